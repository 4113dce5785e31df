package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
)

func TestSubmitGetIdempotency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := `{"type":"mail.send","payload":{"to":"a@example.com"},"queue":"mail","max_retries":5,"timeout":"90s",
		"idempotency_key":"order-1","tags":["x","y"],"backoff":2.5,"priority":3}`
	r := e.do("POST", "/api/v1/jobs", body).want(t, http.StatusCreated)
	v := r.job(t)
	if r.header.Get("Location") != "/api/v1/jobs/"+v.ID {
		t.Fatalf("Location %q", r.header.Get("Location"))
	}
	if v.State != domain.StateQueued || v.Type != "mail.send" || v.Queue != "mail" || v.MaxRetries != 5 ||
		v.TimeoutSeconds != 90 || v.BackoffSeconds != 2.5 || v.IdempotencyKey != "order-1" || v.Priority != 3 ||
		strings.Join(v.Tags, ",") != "x,y" || string(v.Payload) != `{"to":"a@example.com"}` {
		t.Fatalf("submitted %+v", v)
	}
	// The same key again: 200 and the same job, nothing written.
	before := e.eventCount()
	again := e.do("POST", "/api/v1/jobs", body).want(t, http.StatusOK).job(t)
	if again.ID != v.ID || e.eventCount() != before {
		t.Fatalf("repeat submit: %s (first %s), events %d -> %d", again.ID, v.ID, before, e.eventCount())
	}
	// GET is the one encoder's JSON of the record (plus the queue position).
	got := e.do("GET", "/api/v1/jobs/"+v.ID, nil).want(t, http.StatusOK)
	snap, err := e.store.Record(e.ctx, v.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := projections.View(snap.Job)
	zero := 0
	want.QueuePosition = &zero
	wb, _ := json.Marshal(want)
	var gotv, wantv any
	_ = json.Unmarshal(got.body, &gotv)
	_ = json.Unmarshal(wb, &wantv)
	if fmt.Sprint(gotv) != fmt.Sprint(wantv) {
		t.Fatalf("GET body\n got %s\nwant %s", got.body, wb)
	}
	// Delay makes it scheduled; run_at in the past is now.
	d := e.submit(`{"type":"later","delay":3600}`)
	if d.State != domain.StateScheduled || d.RunAt == nil || time.Until(*d.RunAt) < 59*time.Minute {
		t.Fatalf("delayed %+v", d)
	}
	p := e.submit(map[string]any{"type": "now", "run_at": time.Now().Add(-time.Hour)})
	if p.State != domain.StateQueued {
		t.Fatalf("run_at in the past: %s", p.State)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxBodyBytes = 4096 })
	before := e.eventCount()
	cases := []struct {
		name, body string
		status     int
		slug       string
	}{
		{"not JSON", `{"type":`, 400, problemMalformedRequest},
		{"empty body", ``, 400, problemMalformedRequest},
		{"an array", `[1,2]`, 400, problemMalformedRequest},
		{"unknown field", `{"type":"a","colour":"red"}`, 400, problemMalformedRequest},
		{"wrong type", `{"type":"a","max_retries":"many"}`, 400, problemMalformedRequest},
		{"bad duration", `{"type":"a","timeout":"soon"}`, 400, problemMalformedRequest},
		{"trailing data", `{"type":"a"} {"type":"b"}`, 400, problemMalformedRequest},
		{"no type", `{"payload":1}`, 400, engine.ProblemInvalidInput},
		{"bad type", `{"type":"no spaces allowed"}`, 400, engine.ProblemInvalidInput},
		{"bad queue", `{"type":"a","queue":"a.b"}`, 400, engine.ProblemInvalidInput},
		{"delay and run_at", `{"type":"a","delay":5,"run_at":"2030-01-01T00:00:00Z"}`, 400, engine.ProblemInvalidInput},
		{"negative retries", `{"type":"a","max_retries":-1}`, 400, engine.ProblemInvalidInput},
		{"bad parent", `{"type":"a","parent":"nope"}`, 400, engine.ProblemInvalidInput},
		{"too large", `{"type":"a","payload":"` + strings.Repeat("x", 5000) + `"}`, 413, problemPayloadTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e.do("POST", "/api/v1/jobs", c.body).problem(t, c.status, c.slug)
		})
	}
	// Other bad requests.
	e.do("GET", "/api/v1/jobs?state=nope", nil).problem(t, 400, engine.ProblemInvalidInput)
	e.do("GET", "/api/v1/jobs?limit=0", nil).problem(t, 400, engine.ProblemInvalidInput)
	e.do("GET", "/api/v1/jobs?limit=x", nil).problem(t, 400, engine.ProblemInvalidInput)
	e.do("GET", "/api/v1/jobs?cursor=garbage", nil).problem(t, 400, problemBadCursor)
	e.do("GET", "/api/v1/jobs?cursor="+Cursor{CreatedAt: time.Now(), ID: "x"}.Encode(), nil).problem(t, 400, problemBadCursor)
	p := e.do("GET", "/api/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", nil).problem(t, 404, engine.ProblemNotFound)
	if p.JobID != "01ARZ3NDEKTSV4RRFFQ69G5FAV" {
		t.Fatalf("problem without the job id: %+v", p)
	}
	e.do("GET", "/api/v1/jobs/not-an-id", nil).problem(t, 404, engine.ProblemNotFound)
	e.do("POST", "/api/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel", nil).problem(t, 404, engine.ProblemNotFound)
	e.do("POST", "/api/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/retry", nil).problem(t, 404, engine.ProblemNotFound)
	e.do("GET", "/api/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/events", nil).problem(t, 404, engine.ProblemNotFound)
	e.do("GET", "/api/v1/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV/children", nil).problem(t, 404, engine.ProblemNotFound)
	e.do("GET", "/api/v1/nothing/here", nil).problem(t, 404, engine.ProblemNotFound)
	r := e.do("PUT", "/api/v1/jobs", `{}`)
	r.problem(t, 405, problemMethodNotAllowed)
	if r.header.Get("Allow") != "GET, HEAD, POST" {
		t.Fatalf("Allow %q", r.header.Get("Allow"))
	}
	e.do("POST", "/api/v1/queues/nope/pause", nil).problem(t, 404, engine.ProblemNotFound)
	e.do("POST", "/api/v1/queues/bad.name/pause", nil).problem(t, 400, engine.ProblemInvalidInput)
	if n := e.eventCount(); n != before {
		t.Fatalf("bad input wrote %d events", n-before)
	}
}

func TestListNewestFirstWithFiltersAndCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []string
	for i := 0; i < 7; i++ {
		typ := "t1"
		if i%2 == 1 {
			typ = "t2"
		}
		ids = append(ids, e.submit(map[string]any{"type": typ, "queue": "qa", "payload": i}).ID)
	}
	// Jobs written by another client (not through this gateway) reach the
	// index through its watch.
	res, err := e.store.Submit(e.ctx, &commands.SubmitRequest{Type: "t1", Queue: "qb"})
	if err != nil {
		t.Fatal(err)
	}
	ids = append(ids, res.Job.ID)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if e.g.index.Get(res.Job.ID) == nil {
			return fmt.Errorf("not indexed yet")
		}
		return nil
	})
	// Page through everything, 3 at a time: newest first, each job once.
	var seen []string
	cursor := ""
	for pages := 0; ; pages++ {
		var l jobList
		e.do("GET", "/api/v1/jobs?limit=3&cursor="+cursor, nil).want(t, 200).json(t, &l)
		for _, j := range l.Jobs {
			seen = append(seen, j.ID)
		}
		if l.NextCursor == "" {
			break
		}
		cursor = l.NextCursor
		if pages > 5 {
			t.Fatal("too many pages")
		}
	}
	var want []string
	for i := len(ids) - 1; i >= 0; i-- {
		want = append(want, ids[i])
	}
	if strings.Join(seen, " ") != strings.Join(want, " ") {
		t.Fatalf("pages\n got %v\nwant %v", seen, want)
	}
	check := func(query string, want ...string) {
		t.Helper()
		var l jobList
		e.do("GET", "/api/v1/jobs?"+query, nil).want(t, 200).json(t, &l)
		var got []string
		for _, j := range l.Jobs {
			got = append(got, j.ID)
		}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("%s:\n got %v\nwant %v", query, got, want)
		}
	}
	check("queue=qb", ids[7])
	check("queue=qa&type=t2", ids[5], ids[3], ids[1])
	check("type=t1&limit=2", ids[7], ids[6])
	check("state=running")
	check("namespace=other")
	// Cancel one: the state filter follows.
	e.do("DELETE", "/api/v1/jobs/"+ids[2], nil).want(t, 200)
	check("state=cancelled", ids[2])
	var st stats
	e.do("GET", "/api/v1/stats?queue=qa", nil).want(t, 200).json(t, &st)
	if st.Total != 7 || st.States[domain.StateCancelled] != 1 || st.States[domain.StateQueued] != 6 ||
		strings.Join(st.Queues, ",") != "qa,qb" || strings.Join(st.Types, ",") != "t1,t2" {
		t.Fatalf("stats %+v", st)
	}
}

// Prefer: wait=N is capped at MaxWait, and the request returns the
// current state after it.
func TestPreferWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxWait = 2 * time.Second })
	id := e.submit(`{"type":"nobody.runs.this"}`).ID
	// Waits of 100s and more than fit return after 2s: under 10s is capped.
	for _, pref := range []string{"respond-async, wait=100", "wait=99999999999999999999999"} {
		t0 := time.Now()
		r := e.do("GET", "/api/v1/jobs/"+id, nil, "Prefer", pref).want(t, 200)
		if took := time.Since(t0); r.header.Get("Preference-Applied") != "wait=2" || took < 2*time.Second || took > 10*time.Second {
			t.Fatalf("Prefer %q: applied %q after %s", pref, r.header.Get("Preference-Applied"), took)
		}
		if r.job(t).State != domain.StateQueued {
			t.Fatalf("after the wait: %s", r.job(t).State)
		}
	}
}

// A wait ends the moment the job is terminal (pushed by the KV watch), and
// there is none for a terminal job, wait=0 or a malformed preference.
// Returning within 10s is not having waited: the waits asked for are 30s.
func TestPreferWaitEndsEarly(t *testing.T) {
	t.Parallel()
	e := newEnv(t) // MaxWait 60s
	id := e.submit(`{"type":"nobody.runs.this"}`).ID
	quick := func(pref string) resp {
		t.Helper()
		t0 := time.Now()
		r := e.do("GET", "/api/v1/jobs/"+id, nil, "Prefer", pref).want(t, 200)
		if took := time.Since(t0); took > 10*time.Second {
			t.Fatalf("Prefer %q: returned after %s", pref, took)
		}
		return r
	}
	// A malformed preference is ignored: no wait, no Preference-Applied.
	for _, pref := range []string{"wait=abc", "wait=-1", "wait", "wait=1.5", "respond-async", "wait=0"} {
		if r := quick(pref); r.header.Get("Preference-Applied") != "" || r.job(t).State != domain.StateQueued {
			t.Fatalf("Prefer %q: applied %q, %s", pref, r.header.Get("Preference-Applied"), r.body)
		}
	}
	// A wait under way returns when the job is cancelled.
	got := make(chan resp, 1)
	go func() {
		got <- e.do("GET", "/api/v1/jobs/"+id, nil, "Prefer", "wait=30")
	}()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := len(e.g.open); n != 1 {
			return fmt.Errorf("%d long polls open, want the one", n)
		}
		return nil
	})
	t0 := time.Now()
	e.do("POST", "/api/v1/jobs/"+id+"/cancel", nil).want(t, 200)
	r := <-got
	if took := time.Since(t0); r.status != 200 || r.header.Get("Preference-Applied") != "wait=30" ||
		r.job(t).State != domain.StateCancelled || took > 10*time.Second {
		t.Fatalf("wait ended %s after the cancel: %d, applied %q: %s", took, r.status, r.header.Get("Preference-Applied"), r.body)
	}
	// A terminal job returns at once, and says it did not wait.
	if r := quick("wait=30"); r.header.Get("Preference-Applied") != "" || r.header.Get("Vary") != "Prefer" ||
		r.job(t).State != domain.StateCancelled {
		t.Fatalf("terminal job: applied %q, vary %q: %s", r.header.Get("Preference-Applied"), r.header.Get("Vary"), r.body)
	}
}

// A MaxWait under a second is waited, not rounded down to no wait.
func TestPreferWaitSubSecondCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxWait = 700 * time.Millisecond })
	id := e.submit(`{"type":"nobody.runs.this"}`).ID
	t0 := time.Now()
	r := e.do("GET", "/api/v1/jobs/"+id, nil, "Prefer", "wait=5").want(t, 200)
	if took := time.Since(t0); r.header.Get("Preference-Applied") != "wait=1" || took < 700*time.Millisecond || took > 3*time.Second {
		t.Fatalf("applied %q after %s", r.header.Get("Preference-Applied"), took)
	}
}

func TestCancelRetryChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orig := e.submit(`{"type":"img.resize","payload":{"w":10},"queue":"img","max_retries":7,"tags":["t"],"timeout":"5m"}`)
	// Retry of a job that is not terminal: 409, nothing written.
	before := e.eventCount()
	p := e.do("POST", "/api/v1/jobs/"+orig.ID+"/retry", nil).problem(t, 409, engine.ProblemInvalidTransition)
	if p.JobID != orig.ID || e.eventCount() != before {
		t.Fatalf("retry of a queued job: %+v, %d events written", p, e.eventCount()-before)
	}
	c := e.do("POST", "/api/v1/jobs/"+orig.ID+"/cancel", `{"reason":"changed my mind"}`).want(t, 200).job(t)
	if c.State != domain.StateCancelled {
		t.Fatalf("cancel: %s", c.State)
	}
	// Cancel of a terminal job: 200, unchanged, nothing written.
	before = e.eventCount()
	again := e.do("DELETE", "/api/v1/jobs/"+orig.ID, nil).want(t, 200).job(t)
	if again.State != domain.StateCancelled || again.Seq != c.Seq || e.eventCount() != before {
		t.Fatalf("cancel again: %+v, %d events written", again, e.eventCount()-before)
	}
	e.wantEvents(orig.ID, domain.EvSubmitted, domain.EvCancelled)
	r := e.do("POST", "/api/v1/jobs/"+orig.ID+"/retry", nil).want(t, 201)
	nj := r.job(t)
	if r.header.Get("Location") != "/api/v1/jobs/"+nj.ID || nj.ID == orig.ID || nj.RetryOf != orig.ID ||
		nj.Type != orig.Type || nj.Queue != "img" || string(nj.Payload) != `{"w":10}` || nj.MaxRetries != 7 ||
		nj.TimeoutSeconds != 300 || strings.Join(nj.Tags, ",") != "t" || nj.State != domain.StateQueued {
		t.Fatalf("retry %+v", nj)
	}
	// With an idempotency key, a repeated retry is the same new job.
	k1 := e.do("POST", "/api/v1/jobs/"+orig.ID+"/retry", `{"idempotency_key":"retry-1"}`).want(t, 201).job(t)
	k2 := e.do("POST", "/api/v1/jobs/"+orig.ID+"/retry", `{"idempotency_key":"retry-1"}`).want(t, 200).job(t)
	if k1.ID != k2.ID {
		t.Fatalf("keyed retries %s %s", k1.ID, k2.ID)
	}
	e.do("POST", "/api/v1/jobs/"+orig.ID+"/retry", `{"bogus":1}`).problem(t, 400, problemMalformedRequest)
	// Children: jobs whose parent is the job.
	var kids []string
	for i := 0; i < 3; i++ {
		kids = append(kids, e.submit(map[string]any{"type": "child", "parent": nj.ID}).ID)
	}
	var l jobList
	e.do("GET", "/api/v1/jobs/"+nj.ID+"/children?parent=ignored", nil).want(t, 200).json(t, &l)
	if len(l.Jobs) != 3 || l.Jobs[0].ID != kids[2] || l.Jobs[2].ID != kids[0] || l.Jobs[0].ParentID != nj.ID {
		t.Fatalf("children %+v", l)
	}
	e.do("GET", "/api/v1/jobs/"+orig.ID+"/children", nil).want(t, 200).json(t, &l)
	if len(l.Jobs) != 0 {
		t.Fatalf("children of a childless job: %+v", l.Jobs)
	}
}

func TestEventsJSONAndStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["ev.job"]}`)
	id := e.submit(`{"type":"ev.job"}`).ID
	e.claimJob(wk, id)
	var l eventList
	e.do("GET", "/api/v1/jobs/"+id+"/events", nil).want(t, 200).json(t, &l)
	if len(l.Events) != 2 || l.Events[0].Type != domain.EvSubmitted || l.Events[1].Type != domain.EvClaimed || l.More {
		t.Fatalf("events %+v", l)
	}
	first := l.Events[0].Seq
	e.do("GET", "/api/v1/jobs/"+id+"/events?limit=1", nil).want(t, 200).json(t, &l)
	if len(l.Events) != 1 || !l.More || l.NextAfter != first {
		t.Fatalf("limit 1: %+v", l)
	}
	e.do("GET", fmt.Sprintf("/api/v1/jobs/%s/events?after=%d", id, first), nil).want(t, 200).json(t, &l)
	if len(l.Events) != 1 || l.Events[0].Type != domain.EvClaimed {
		t.Fatalf("after: %+v", l)
	}
	e.do("GET", "/api/v1/jobs/"+id+"/events?after=x", nil).problem(t, 400, engine.ProblemInvalidInput)

	// The stream: history, then live events, then "end" after the terminal one.
	ch, _ := e.openSSE("/api/v1/jobs/" + id + "/events")
	var got []string
	var lastID string
	for len(got) < 2 {
		ev := next(t, ch, "message")
		var v projections.EventView
		_ = json.Unmarshal([]byte(ev.data), &v)
		if ev.id != fmt.Sprint(v.Seq) {
			t.Fatalf("SSE id %q for seq %d", ev.id, v.Seq)
		}
		got, lastID = append(got, v.Type), ev.id
	}
	e.patch(id, map[string]any{"worker_id": wk, "state": "running"}).want(t, 200)
	e.patch(id, map[string]any{"worker_id": wk, "progress": map[string]any{"current": 1, "total": 2}}).want(t, 200)
	e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded", "result": map[string]int{"n": 1}}).want(t, 200)
	for len(got) < 5 {
		var v projections.EventView
		_ = json.Unmarshal([]byte(next(t, ch, "message").data), &v)
		got = append(got, v.Type)
	}
	next(t, ch, "end")
	want := []string{domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvProgress, domain.EvSucceeded}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("stream %v, want %v", got, want)
	}
	// Resumed with Last-Event-ID: only what came after it.
	ch2, _ := e.openSSE("/api/v1/jobs/"+id+"/events", "Last-Event-ID", lastID)
	got = nil
	for len(got) < 3 {
		var v projections.EventView
		_ = json.Unmarshal([]byte(next(t, ch2, "message").data), &v)
		got = append(got, v.Type)
	}
	next(t, ch2, "end")
	if strings.Join(got, " ") != strings.Join(want[2:], " ") {
		t.Fatalf("resumed stream %v", got)
	}
	// Resumed after the end: just "end".
	var all eventList
	e.do("GET", "/api/v1/jobs/"+id+"/events", nil).want(t, 200).json(t, &all)
	ch3, _ := e.openSSE("/api/v1/jobs/"+id+"/events", "Last-Event-ID", fmt.Sprint(all.Events[4].Seq))
	if ev := next(t, ch3, "message", "end"); ev.event != "end" {
		t.Fatalf("after the end: %+v", ev)
	}
}

func TestLiveStream(t *testing.T) {
	t.Parallel()
	ticks := make(chan time.Time)
	e := newEnv(t, func(c *Config) { c.flushTicks = ticks })
	// flush has the stream send what changed, as its ticker does.
	flush := func() {
		t.Helper()
		select {
		case ticks <- time.Now():
		case <-time.After(20 * time.Second):
			t.Fatal("the stream took no flush tick within 20s")
		}
	}
	ch, _ := e.openSSE("/api/v1/stream?queue=live&with=queues")
	var c stats
	_ = json.Unmarshal([]byte(next(t, ch, "counts").data), &c)
	if c.Total != 0 {
		t.Fatalf("initial counts %+v", c)
	}
	e.submit(`{"type":"other","queue":"elsewhere"}`) // filtered out
	res, err := e.store.Submit(e.ctx, &commands.SubmitRequest{Type: "x", Queue: "live"})
	if err != nil {
		t.Fatal(err)
	}
	// Once the index has the job (from its watch), so has the stream.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if e.g.index.Get(res.Job.ID) == nil {
			return fmt.Errorf("job %s is not in the index", res.Job.ID)
		}
		return nil
	})
	flush()
	var s summary
	_ = json.Unmarshal([]byte(next(t, ch, "job").data), &s)
	if s.ID != res.Job.ID || s.State != domain.StateQueued || s.Queue != "live" {
		t.Fatalf("job event %+v", s)
	}
	_ = json.Unmarshal([]byte(next(t, ch, "counts").data), &c)
	if c.Total != 1 || c.States[domain.StateQueued] != 1 {
		t.Fatalf("counts %+v", c)
	}
	var qs []QueueInfo
	_ = json.Unmarshal([]byte(next(t, ch, "queues").data), &qs)
	if len(qs) == 0 {
		t.Fatalf("queues %+v", qs)
	}
	// More changes at once than a page shows: one "bulk" event instead.
	for i := 0; i < streamMaxBatch+50; i++ {
		e.g.index.Put(&domain.Job{ID: domain.NewID(), State: domain.StateQueued, CreatedAt: time.Now(),
			Spec: domain.Spec{Namespace: "default", Type: "x", Queue: "live"}}, 1)
	}
	flush()
	var bulk struct{ Changed int }
	ev := next(t, ch, "bulk", "job")
	if _ = json.Unmarshal([]byte(ev.data), &bulk); ev.event != "bulk" || bulk.Changed != streamMaxBatch+50 {
		t.Fatalf("after %d changes: %s %s", streamMaxBatch+50, ev.event, ev.data)
	}
}

// Filters are checked (a bad namespace or type is 400, not an empty
// page), and problem details are not HTML-escaped.
func TestFilterChecksAndProblemText(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, q := range []string{"namespace=a%20b", "namespace=a.b", "type=a%20b"} {
		p := e.do("GET", "/api/v1/jobs?"+q, nil).problem(t, 400, engine.ProblemInvalidInput)
		if field, _, _ := strings.Cut(q, "="); p.Field != field {
			t.Fatalf("%s: field %q", q, p.Field)
		}
		e.do("GET", "/api/v1/stream?"+q, nil, "Accept", "text/event-stream").problem(t, 400, engine.ProblemInvalidInput)
	}
	e.do("GET", "/api/v1/jobs?namespace=team-a", nil).want(t, 200)
	wk := e.register(`{"name":"w","types":["esc"]}`)
	id := e.submit(`{"type":"esc"}`).ID
	e.claimJob(wk, id)
	r := e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded"})
	p := r.problem(t, 409, engine.ProblemInvalidTransition)
	if !strings.Contains(p.Detail, "claimed -> succeeded") || strings.Contains(string(r.body), `\u003e`) {
		t.Fatalf("problem body %s", r.body)
	}
}

// GET /jobs?parent=ID lists the jobs submitted with that parent, newest
// first, with the other filters.
func TestListByParent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	parent := e.submit(`{"type":"p.parent"}`).ID
	other := e.submit(`{"type":"p.parent"}`).ID
	c1 := e.submit(map[string]any{"type": "p.kid", "parent": parent}).ID
	c2 := e.submit(map[string]any{"type": "p.kid", "parent": parent, "queue": "kq"}).ID
	e.submit(map[string]any{"type": "p.kid", "parent": other})
	e.do("POST", "/api/v1/jobs/"+c1+"/cancel", nil).want(t, 200)
	ids := func(path string) string {
		t.Helper()
		var l jobList
		e.do("GET", path, nil).want(t, 200).json(t, &l)
		var out []string
		for _, j := range l.Jobs {
			if j.ParentID != parent {
				t.Fatalf("%s lists %s of parent %q", path, j.ID, j.ParentID)
			}
			out = append(out, j.ID)
		}
		return strings.Join(out, ",")
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if got := ids("/api/v1/jobs?parent=" + parent); got != c2+","+c1 {
			return fmt.Errorf("parent filter: %s, want %s,%s", got, c2, c1)
		}
		return nil
	})
	if got := ids("/api/v1/jobs?parent=" + parent + "&state=cancelled"); got != c1 {
		t.Fatalf("parent and state: %s", got)
	}
	if got := ids("/api/v1/jobs?parent=" + parent + "&queue=kq"); got != c2 {
		t.Fatalf("parent and queue: %s", got)
	}
	if got := ids("/api/v1/jobs?parent=" + c1); got != "" {
		t.Fatalf("a job without children: %s", got)
	}
	e.do("GET", "/api/v1/jobs?parent=nope", nil).problem(t, 400, engine.ProblemInvalidInput)
}

// A body over the default limit of 1 MiB is 413 problem+json and writes
// nothing, whether its length is announced or not.
func TestBodyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := func(size int) []byte {
		head, tail := `{"type":"big","payload":"`, `"}`
		return []byte(head + strings.Repeat("x", size-len(head)-len(tail)) + tail)
	}
	before := e.eventCount()
	over := body(DefaultMaxBodyBytes + 1)
	e.do("POST", "/api/v1/jobs", over).problem(t, http.StatusRequestEntityTooLarge, problemPayloadTooLarge)
	// Chunked: no Content-Length, cut off by the reader.
	req, err := http.NewRequestWithContext(e.ctx, "POST", e.ts.URL+"/api/v1/jobs", io.MultiReader(bytes.NewReader(over)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	resp{status: res.StatusCode, header: res.Header, body: b}.problem(t, http.StatusRequestEntityTooLarge, problemPayloadTooLarge)
	if n := e.eventCount() - before; n != 0 {
		t.Fatalf("bodies over the limit wrote %d events", n)
	}
	var l jobList
	e.do("GET", "/api/v1/jobs?type=big", nil).want(t, 200).json(t, &l)
	if len(l.Jobs) != 0 {
		t.Fatalf("%d jobs of an over-limit body", len(l.Jobs))
	}
	// Just under the limit the body is read (the payload is then checked on
	// its own).
	if r := e.do("POST", "/api/v1/jobs", body(DefaultMaxBodyBytes)); r.status == http.StatusRequestEntityTooLarge {
		t.Fatalf("a body of exactly the limit: %d %s", r.status, r.body)
	}
}

// A query that does not decode is refused, not read as no query: a bad
// cursor is bad-cursor (not the first page), another bad pair names its
// parameter.
func TestMalformedQuery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.submit(`{"type":"q"}`)
	e.do("GET", "/api/v1/jobs?cursor=%%%", nil).problem(t, 400, problemBadCursor)
	e.do("GET", "/api/v1/jobs?limit=1&cursor=%zz", nil).problem(t, 400, problemBadCursor)
	if p := e.do("GET", "/api/v1/jobs?state=%zz", nil).problem(t, 400, engine.ProblemInvalidInput); p.Field != "state" {
		t.Fatalf("field %q", p.Field)
	}
	id := e.submit(`{"type":"q"}`).ID
	e.do("GET", "/api/v1/jobs/"+id+"/children?cursor=%%%", nil).problem(t, 400, problemBadCursor)
	if r := e.do("GET", "/?cursor=%%%", nil); r.status != 400 || !strings.Contains(string(r.body), "cursor") {
		t.Fatalf("dashboard: %d", r.status)
	}
}
