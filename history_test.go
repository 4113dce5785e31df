package jetflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// logged is one event of a job as the log stored it: its type, the state
// it moved the job to, and the instant the log stored it.
type logged struct {
	seq  uint64
	typ  string
	to   domain.State
	time time.Time
}

// eventsOf reads job id's events from the events stream, with their
// stream timestamps.
func eventsOf(t *testing.T, cl *jetflow.Client, id string) []logged {
	t.Helper()
	ctx := testkit.Ctx(t)
	st := testkit.StoreOf(t, cl)
	var out []logged
	for seq := uint64(1); ; {
		m, err := st.Events.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(streams.EventFilter(id)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		ev, err := streams.DecodeEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, logged{m.Sequence, ev.Type, ev.To, m.Time})
		seq = m.Sequence + 1
	}
}

// httpGet is GET path with the admin token: status and body.
func (e *bothEnv) httpGet(path string) (int, []byte) {
	e.t.Helper()
	req, _ := http.NewRequestWithContext(e.ctx, http.MethodGet, e.ts.URL+path, nil)
	req.Header.Set("Authorization", "Bearer "+e.admin)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// A job submitted, started, retried and succeeded: its view at instants
// before, at and between its events, through both clients and HTTP.
func TestHistoryJobAtInstants(t *testing.T) {
	e := newBothEnv(t)
	ctx := e.ctx
	w := jetflow.NewWorker(testkit.Client(t, e.d.Conn(), "hist-worker"), jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	jetflow.Register(w, "hist.flaky", func(_ context.Context, j *jetflow.Job[any]) (any, error) {
		if j.Attempt == 1 {
			return nil, errors.New("first attempt fails")
		}
		return map[string]int{"attempt": j.Attempt}, nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	job, err := e.d.Submit(ctx, "hist.flaky", nil, jetflow.MaxRetries(2), jetflow.Backoff(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	final, err := e.d.Wait(ctx, job.ID)
	if err != nil || final.State != jetflow.Succeeded {
		t.Fatalf("wait: %v %+v", err, final)
	}
	evs := eventsOf(t, e.d, job.ID)
	var types []string
	for _, ev := range evs {
		types = append(types, ev.typ)
	}
	want := []string{domain.EvSubmitted, domain.EvStarted, domain.EvRetryScheduled, domain.EvDue, domain.EvStarted, domain.EvSucceeded}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	// The state after each event, and the attempts then.
	states := []jetflow.State{jetflow.Queued, jetflow.Running, jetflow.Scheduled, jetflow.Queued, jetflow.Running, jetflow.Succeeded}
	attempts := []int{0, 1, 1, 1, 2, 2}
	check := func(what string, at time.Time, wantState jetflow.State, wantAttempts int) {
		t.Helper()
		for _, cl := range []*jetflow.Client{e.d, e.k} {
			got, err := cl.GetAt(ctx, job.ID, at)
			if wantState == "" {
				if !errors.Is(err, jetflow.ErrNotFound) {
					t.Errorf("%s: GetAt %s: %v %+v, want not found", what, at.Format(time.RFC3339Nano), err, got)
				}
				continue
			}
			if err != nil || got.State != wantState || got.Attempts != wantAttempts || got.ID != job.ID {
				t.Errorf("%s: GetAt: %v state %v attempts %v, want %s %d", what, err, got.State, got.Attempts, wantState, wantAttempts)
			}
		}
		status, body := e.httpGet("/api/v1/jobs/" + job.ID + "?at=" + url.QueryEscape(at.UTC().Format(time.RFC3339Nano)))
		var v struct {
			State    string `json:"state"`
			Attempts int    `json:"attempts"`
		}
		switch {
		case wantState == "" && status != http.StatusNotFound:
			t.Errorf("%s: HTTP %d %s, want 404", what, status, body)
		case wantState != "" && (status != http.StatusOK || json.Unmarshal(body, &v) != nil || v.State != string(wantState) || v.Attempts != wantAttempts):
			t.Errorf("%s: HTTP %d %s, want %s %d", what, status, body, wantState, wantAttempts)
		}
	}
	check("before the submit", evs[0].time.Add(-time.Nanosecond), "", 0)
	for i, ev := range evs {
		check(fmt.Sprintf("at event %d (%s)", i+1, ev.typ), ev.time, states[i], attempts[i])
		if i+1 < len(evs) && evs[i+1].time.Sub(ev.time) > time.Nanosecond {
			mid := ev.time.Add(evs[i+1].time.Sub(ev.time) / 2)
			check(fmt.Sprintf("between events %d and %d", i+1, i+2), mid, states[i], attempts[i])
		}
	}
	check("after the end", time.Now().Add(time.Hour), jetflow.Succeeded, 2)
	// After its last event the job is its record.
	at, err := e.k.GetAt(ctx, job.ID, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	same(t, "GetAt(now) and Get", at, final, "files")
	if at.FinishedAt == nil || !at.FinishedAt.Equal(*final.FinishedAt) || at.StartedAt == nil || !at.StartedAt.Equal(*final.StartedAt) {
		t.Errorf("times: at %v %v, record %v %v", at.StartedAt, at.FinishedAt, final.StartedAt, final.FinishedAt)
	}

	// A bad instant: 400 invalid-input naming at, from HTTP and both clients.
	for _, bad := range []string{"yesterday", "2026-13-01T00:00:00Z", ""} {
		status, body := e.httpGet("/api/v1/jobs/" + job.ID + "?at=" + url.QueryEscape(bad))
		var p struct {
			Type  string `json:"type"`
			Field string `json:"field"`
		}
		if status != http.StatusBadRequest || json.Unmarshal(body, &p) != nil || p.Type != "invalid-input" || p.Field != "at" {
			t.Errorf("?at=%q: %d %s", bad, status, body)
		}
	}
	// Unknown job.
	status, _ := e.httpGet("/api/v1/jobs/" + domain.NewID() + "?at=" + url.QueryEscape(time.Now().UTC().Format(time.RFC3339Nano)))
	if status != http.StatusNotFound {
		t.Errorf("unknown job at now: %d", status)
	}
}

// Scoped replay and verify, and the jobs in a state at an instant.
func TestHistoryScopes(t *testing.T) {
	e := newBothEnv(t)
	ctx := e.ctx
	submit := func(typ, ns, queue string) string {
		t.Helper()
		j, err := e.d.Submit(ctx, typ, nil, jetflow.Namespace(ns), jetflow.Queue(queue))
		if err != nil {
			t.Fatal(err)
		}
		return j.ID
	}
	// First batch: default/hq1/hist.a x3. Nothing serves these types: they stay queued.
	var first []string
	for range 3 {
		first = append(first, submit("hist.a", "default", "hq1"))
	}
	firstEnd := eventsOf(t, e.d, first[2])[0].time
	testkit.WaitFor(t, 5*time.Second, func() error {
		if time.Now().Sub(firstEnd) < 5*time.Millisecond {
			return errors.New("not yet")
		}
		return nil
	})
	b1 := submit("hist.b", "hista", "hq2")
	b2 := submit("hist.b", "hista", "hq2")
	a4 := submit("hist.a", "hista", "hq1")
	secondStart := eventsOf(t, e.d, b1)[0].time
	type counts = map[jetflow.State]int
	cases := []struct {
		scope jetflow.ReplayScope
		want  counts
	}{
		{jetflow.ReplayScope{}, counts{jetflow.Queued: 6}},
		{jetflow.ReplayScope{Namespace: "hista"}, counts{jetflow.Queued: 3}},
		{jetflow.ReplayScope{Namespace: "default"}, counts{jetflow.Queued: 3}},
		{jetflow.ReplayScope{Queue: "hq1"}, counts{jetflow.Queued: 4}},
		{jetflow.ReplayScope{Type: "hist.b"}, counts{jetflow.Queued: 2}},
		{jetflow.ReplayScope{Namespace: "hista", Queue: "hq1", Type: "hist.a"}, counts{jetflow.Queued: 1}},
		{jetflow.ReplayScope{Job: b2}, counts{jetflow.Queued: 1}},
		{jetflow.ReplayScope{Job: domain.NewID()}, counts{}},
		{jetflow.ReplayScope{Until: firstEnd}, counts{jetflow.Queued: 3}},
		{jetflow.ReplayScope{Since: secondStart}, counts{jetflow.Queued: 3}},
		{jetflow.ReplayScope{Since: secondStart, Queue: "hq1"}, counts{jetflow.Queued: 1}},
		{jetflow.ReplayScope{Until: firstEnd.Add(-time.Hour)}, counts{}},
	}
	for _, c := range cases {
		d, k := each(e, func(cl *jetflow.Client, who string) counts {
			got, _, err := cl.ReplayScope(ctx, c.scope)
			if err != nil {
				t.Fatalf("%s %+v: %v", who, c.scope, err)
			}
			return got
		})
		if fmt.Sprint(d) != fmt.Sprint(c.want) || fmt.Sprint(k) != fmt.Sprint(c.want) {
			t.Errorf("replay %+v: direct %v, token %v, want %v", c.scope, d, k, c.want)
		}
	}

	// A record of namespace hista differs from the log: a verify of its
	// scopes finds it, of the others not.
	st := testkit.StoreOf(t, e.d)
	snap, err := st.Record(ctx, b1)
	if err != nil {
		t.Fatal(err)
	}
	bad := *snap.Job
	bad.Attempt = 7
	raw, _ := streams.EncodeJob(&bad)
	if _, err := st.KV.Update(ctx, b1, raw, snap.Rev); err != nil {
		t.Fatal(err)
	}
	verifies := []struct {
		scope   jetflow.ReplayScope
		records int
		diffs   []string
	}{
		{jetflow.ReplayScope{Namespace: "hista"}, 3, []string{b1}},
		{jetflow.ReplayScope{Type: "hist.b"}, 2, []string{b1}},
		{jetflow.ReplayScope{Job: b1}, 1, []string{b1}},
		{jetflow.ReplayScope{Since: secondStart}, 3, []string{b1}},
		{jetflow.ReplayScope{Namespace: "default"}, 3, nil},
		{jetflow.ReplayScope{Queue: "hq1"}, 4, nil},
		{jetflow.ReplayScope{Job: b2}, 1, nil},
		{jetflow.ReplayScope{Until: firstEnd}, 3, nil},
		{jetflow.ReplayScope{}, 6, []string{b1}},
	}
	for _, v := range verifies {
		d, k := each(e, func(cl *jetflow.Client, who string) *jetflow.VerifyReport {
			r, err := cl.VerifyScope(ctx, v.scope, 0)
			if err != nil {
				t.Fatalf("%s verify %+v: %v", who, v.scope, err)
			}
			return r
		})
		for _, r := range []*jetflow.VerifyReport{d, k} {
			var ids []string
			for _, df := range r.Diffs {
				ids = append(ids, df.ID)
			}
			if r.Records != v.records || fmt.Sprint(ids) != fmt.Sprint(v.diffs) {
				t.Errorf("verify %+v: %d records, diffs %+v; want %d, %v", v.scope, r.Records, r.Diffs, v.records, v.diffs)
			}
			if len(r.Diffs) == 1 && fmt.Sprint(r.Diffs[0].Fields) != "[attempts]" {
				t.Errorf("verify %+v: fields %v", v.scope, r.Diffs[0].Fields)
			}
		}
	}
	if _, err := st.KV.Put(ctx, b1, mustEncode(t, snap.Job)); err != nil {
		t.Fatal(err)
	}

	// The jobs queued at an instant, from the log.
	ids := func(js []*jetflow.JobInfo) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.ID)
		}
		sort.Strings(out)
		return out
	}
	sorted := func(s ...string) []string { sort.Strings(s); return s }
	lists := []struct {
		at   time.Time
		o    jetflow.ListAtOptions
		want []string
		more bool
	}{
		{firstEnd, jetflow.ListAtOptions{State: jetflow.Queued}, sorted(first...), false},
		{time.Now(), jetflow.ListAtOptions{Namespace: "hista"}, sorted(b1, b2, a4), false},
		{time.Now(), jetflow.ListAtOptions{Namespace: "hista", State: jetflow.Running}, nil, false},
		{time.Now(), jetflow.ListAtOptions{Queue: "hq2", State: jetflow.Queued}, sorted(b1, b2), false},
		{time.Now(), jetflow.ListAtOptions{Namespace: "hista", Limit: 2}, sorted(b2, a4), true},
		{firstEnd.Add(-time.Hour), jetflow.ListAtOptions{}, nil, false},
	}
	for _, l := range lists {
		for _, cl := range []*jetflow.Client{e.d, e.k} {
			got, more, err := cl.ListAt(ctx, l.at, l.o)
			if err != nil || fmt.Sprint(ids(got)) != fmt.Sprint(l.want) || more != l.more {
				t.Errorf("ListAt %+v: %v %v more %v; want %v more %v", l.o, err, ids(got), more, l.want, l.more)
			}
		}
	}
	// A reader of namespace hista sees its namespace's jobs only: another's
	// is not found, as with Get.
	tok, err := e.d.CreateToken(ctx, jetflow.TokenSpec{Name: "hist-reader", Namespace: "hista", Role: jetflow.RoleReader})
	if err != nil {
		t.Fatal(err)
	}
	reader, err := jetflow.NewClient(ctx, e.d.Conn(), jetflow.ClientOptions{Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	if got, more, err := reader.ListAt(ctx, time.Now(), jetflow.ListAtOptions{}); err != nil || fmt.Sprint(ids(got)) != fmt.Sprint(sorted(b1, b2, a4)) || more {
		t.Errorf("reader's ListAt: %v %v %v", err, ids(got), more)
	}
	if _, _, err := reader.ListAt(ctx, time.Now(), jetflow.ListAtOptions{Namespace: "default"}); !errors.Is(err, jetflow.ErrDenied) {
		t.Errorf("reader's ListAt of namespace default: %v", err)
	}
	if _, err := reader.GetAt(ctx, first[0], time.Now()); !errors.Is(err, jetflow.ErrNotFound) {
		t.Errorf("reader's GetAt of another namespace's job: %v", err)
	}
	if j, err := reader.GetAt(ctx, b1, time.Now()); err != nil || j.State != jetflow.Queued {
		t.Errorf("reader's GetAt of its job: %v %+v", err, j)
	}
	if _, _, err := reader.ReplayScope(ctx, jetflow.ReplayScope{Namespace: "hista"}); !errors.Is(err, jetflow.ErrDenied) {
		t.Errorf("reader's replay: %v", err)
	}

	// Bad input: a specific error naming the field, from both clients.
	for _, bad := range []struct {
		o     jetflow.ListAtOptions
		field string
	}{
		{jetflow.ListAtOptions{State: "sleeping"}, "state"},
		{jetflow.ListAtOptions{Limit: jetflow.MaxListAt + 1}, "limit"},
		{jetflow.ListAtOptions{Queue: "a b"}, "queue"},
	} {
		_, _, de := e.d.ListAt(ctx, time.Now(), bad.o)
		_, _, ke := e.k.ListAt(ctx, time.Now(), bad.o)
		sameErr(t, fmt.Sprintf("ListAt %+v", bad.o), de, ke, jetflow.ErrInvalidInput)
		if p := jetflow.ProblemOf(de); p == nil || p.Field != bad.field {
			t.Errorf("ListAt %+v: %v, want field %s", bad.o, de, bad.field)
		}
	}
	_, _, de := e.d.ReplayScope(ctx, jetflow.ReplayScope{Since: time.Now(), Until: time.Now().Add(-time.Hour)})
	_, _, ke := e.k.ReplayScope(ctx, jetflow.ReplayScope{Since: time.Now(), Until: time.Now().Add(-time.Hour)})
	sameErr(t, "until before since", de, ke, jetflow.ErrInvalidInput)
}

func mustEncode(t *testing.T, j *domain.Job) []byte {
	t.Helper()
	b, err := streams.EncodeJob(j)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
