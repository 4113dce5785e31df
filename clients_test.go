package jetflow_test

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/gateway"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/nats-io/nats-server/v2/server"
)

// bothEnv is an engine with access control (serve --auth), an SDK worker,
// an HTTP gateway for HTTP workers, and two clients: d, with the engine's
// NATS permissions (direct), and k, a token client of an admin token.
type bothEnv struct {
	t     *testing.T
	ctx   context.Context
	d, k  *jetflow.Client
	admin string // the admin token
	ts    *httptest.Server
	srv   *server.Server
}

func newBothEnv(t *testing.T) *bothEnv {
	t.Helper()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	e := &bothEnv{t: t, ctx: ctx, srv: srv}
	eng := jetflow.NewEngine(testkit.Client(t, testkit.Conn(t, srv), "engine"), jetflow.EngineConfig{Auth: true, Logger: testkit.Logger(t)})
	g, err := gateway.New(gateway.Config{Client: testkit.Client(t, testkit.Conn(t, srv), "gateway"), Auth: true, Lease: 30 * time.Second, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	eng.Add(g)
	e.ts = httptest.NewServer(g)
	t.Cleanup(e.ts.Close)
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	e.d = testkit.Client(t, testkit.Conn(t, srv), "direct")
	tok, err := e.d.CreateToken(ctx, jetflow.TokenSpec{Name: "root", Namespace: "*", Role: jetflow.RoleAdmin})
	if err != nil {
		t.Fatal(err)
	}
	e.admin = tok.Token
	if e.k, err = jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Token: e.admin}); err != nil {
		t.Fatal(err)
	}
	w := jetflow.NewWorker(testkit.Client(t, testkit.Conn(t, srv), "worker"), jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	jetflow.Register(w, "both.echo", func(_ context.Context, j *jetflow.Job[json.RawMessage]) (json.RawMessage, error) {
		return j.Payload, nil
	})
	jetflow.Register(w, "both.fail", func(context.Context, *jetflow.Job[any]) (any, error) {
		return nil, jetflow.Permanent(errors.New("no"))
	})
	jetflow.Register(w, "both.fan", func(context.Context, *jetflow.Job[any]) (any, error) {
		kids, err := jetflow.Children("both.echo", []any{1, 2, 3})
		if err != nil {
			return nil, err
		}
		return nil, jetflow.FanOut(jetflow.FanOutSpec{Children: kids})
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	return e
}

// http sends a request to the gateway with the admin token.
func (e *bothEnv) http(method, path string, body any) []byte {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(e.ctx, method, e.ts.URL+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+e.admin)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		e.t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, out)
	}
	return out
}

// volatile are what differs between two jobs (events, tokens, ...) made
// alike by the two clients: ids, times, sequences, who wrote them.
var volatile = []string{"id", "job_id", "created_at", "updated_at", "run_at", "queued_at", "started_at", "finished_at",
	"deadline", "duration_seconds", "seq", "queue_position", "time", "actor", "token", "parent_id", "retry_of",
	"idempotency_key", "registered_at", "last_heartbeat", "expires_at", "revoked_at", "created_by", "revoked_by"}

// plain is v as JSON values, without the keys drop at any depth.
func plain(t *testing.T, v any, drop []string) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var g any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	var strip func(any) any
	strip = func(x any) any {
		switch y := x.(type) {
		case map[string]any:
			for _, k := range drop {
				delete(y, k)
			}
			for k, e := range y {
				y[k] = strip(e)
			}
		case []any:
			for i, e := range y {
				y[i] = strip(e)
			}
		}
		return x
	}
	return strip(g)
}

// same fails unless a (the direct client's) and b (the token client's)
// are alike but for the volatile keys and those of drop.
func same(t *testing.T, what string, a, b any, drop ...string) {
	t.Helper()
	drop = append(drop, volatile...)
	pa, pb := plain(t, a, drop), plain(t, b, drop)
	if !reflect.DeepEqual(pa, pb) {
		ja, _ := json.Marshal(pa)
		jb, _ := json.Marshal(pb)
		t.Errorf("%s differs:\n direct %.3000s\n token  %.3000s", what, ja, jb)
	}
}

// sameErr fails unless both errors are the same problem.
func sameErr(t *testing.T, what string, a, b error, want error) {
	t.Helper()
	if !errors.Is(a, want) || !errors.Is(b, want) {
		t.Errorf("%s: direct %v, token %v; want %v", what, a, b, want)
		return
	}
	pa, pb := jetflow.ProblemOf(a), jetflow.ProblemOf(b)
	if pa.Type != pb.Type || pa.Status != pb.Status || pa.Field != pb.Field {
		t.Errorf("%s: direct %s/%d/%q, token %s/%d/%q", what, pa.Type, pa.Status, pa.Field, pb.Type, pb.Status, pb.Field)
	}
}

// each runs fn with each client: the direct one first (as "d"), then the
// token one ("k").
func each[T any](e *bothEnv, fn func(cl *jetflow.Client, who string) T) (T, T) {
	return fn(e.d, "d"), fn(e.k, "k")
}

// must is v, unless err fails the test: must(f())(t).
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

// TestEveryMethodBothClients runs every method of the Client with a client
// of the engine's NATS permissions and with a token client (an admin
// token, the engine with access control on, as serve --auth runs), each
// on a like job, queue, type, namespace or token of its own (or on the
// same ones for reads), and compares what they answer, ids, times and
// actors aside; mistakes get the same problems.
func TestEveryMethodBothClients(t *testing.T) {
	t.Parallel()
	e := newBothEnv(t)
	ctx := e.ctx

	// Submit, Wait, Get, Events, Follow.
	dj, kj := each(e, func(cl *jetflow.Client, who string) *jetflow.JobInfo {
		return must(cl.Submit(ctx, "both.echo", map[string]any{"n": 1}, jetflow.Namespace("ns1"), jetflow.Tags("x"),
			jetflow.Priority(3), jetflow.User("ada"), jetflow.MaxRetries(2), jetflow.Timeout(time.Minute)))(t)
	})
	same(t, "Submit", dj, kj)
	dw, kw := each(e, func(cl *jetflow.Client, who string) *jetflow.JobInfo {
		return must(cl.Wait(ctx, map[string]string{"d": dj.ID, "k": kj.ID}[who]))(t)
	})
	if dw.State != jetflow.Succeeded || string(dw.Result) != `{"n":1}` {
		t.Fatalf("waited for %+v", dw)
	}
	same(t, "Wait", dw, kw, "worker")
	dg, kg := each(e, func(cl *jetflow.Client, who string) *jetflow.JobInfo {
		return must(cl.Get(ctx, map[string]string{"d": dj.ID, "k": kj.ID}[who]))(t)
	})
	same(t, "Get", dg, kg, "worker")
	de, ke := each(e, func(cl *jetflow.Client, who string) []*jetflow.EventInfo {
		return must(cl.Events(ctx, map[string]string{"d": dj.ID, "k": kj.ID}[who]))(t)
	})
	same(t, "Events", de, ke, "worker")
	df, kf := each(e, func(cl *jetflow.Client, who string) []string {
		var seen []string
		if err := cl.Follow(ctx, map[string]string{"d": dj.ID, "k": kj.ID}[who], func(ev *jetflow.EventInfo) error {
			seen = append(seen, ev.Type)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return seen
	})
	same(t, "Follow", df, kf)

	// Send with an idempotency key, twice; SubmitMany.
	type sent struct {
		Job     *jetflow.JobInfo
		Created [2]bool
	}
	ds, ks := each(e, func(cl *jetflow.Client, who string) sent {
		req := must(jetflow.NewRequest("both.park", "p", jetflow.Namespace("ns1"), jetflow.Queue("parked"), jetflow.IdempotencyKey("key-"+who)))(t)
		j1, c1, err1 := cl.Send(ctx, req)
		j2, c2, err2 := cl.Send(ctx, req)
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if j1.ID != j2.ID {
			t.Errorf("%s: a key's second send made %s, not %s", who, j2.ID, j1.ID)
		}
		return sent{j2, [2]bool{c1, c2}}
	})
	if ds.Created != [2]bool{true, false} {
		t.Errorf("created %v", ds.Created)
	}
	// A token's jobs run for its name (commands.SubmitUser): "root".
	same(t, "Send", ds, ks, "user")
	dm, km := each(e, func(cl *jetflow.Client, who string) []*jetflow.JobInfo {
		a := must(jetflow.NewRequest("both.park", 1, jetflow.Namespace("ns1"), jetflow.Queue("parked")))(t)
		b := must(jetflow.NewRequest("both.park", 2, jetflow.Namespace("ns1"), jetflow.Queue("parked")))(t)
		infos, errs := cl.SubmitMany(ctx, []*jetflow.SubmitRequest{a, b})
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return infos
	})
	same(t, "SubmitMany", dm, km, "user")

	// Reprioritize a queued job; again (nothing written); out of range.
	dpr, kpr := each(e, func(cl *jetflow.Client, who string) [2]*jetflow.JobInfo {
		id := map[string]string{"d": dm[0].ID, "k": km[0].ID}[who]
		if _, err := cl.Reprioritize(ctx, id, 1001); !errors.Is(err, jetflow.ErrInvalidInput) {
			t.Errorf("%s: priority 1001: %v", who, err)
		}
		return [2]*jetflow.JobInfo{must(cl.Reprioritize(ctx, id, 9))(t), must(cl.Reprioritize(ctx, id, 9))(t)}
	})
	if dpr[0].Priority != 9 || dpr[1].Priority != 9 || dpr[0].State != jetflow.Queued {
		t.Errorf("reprioritized %+v", dpr[0])
	}
	same(t, "Reprioritize", dpr, kpr, "user")

	// Cancel.
	dc, kc := each(e, func(cl *jetflow.Client, who string) *jetflow.JobInfo {
		id := map[string]string{"d": dm[0].ID, "k": km[0].ID}[who]
		return must(cl.Cancel(ctx, id, "enough"))(t)
	})
	if dc.State != jetflow.Cancelled {
		t.Errorf("cancelled %s", dc.State)
	}
	same(t, "Cancel", dc, kc, "user")
	dre, kre := each(e, func(cl *jetflow.Client, who string) error {
		_, err := cl.Reprioritize(ctx, map[string]string{"d": dm[0].ID, "k": km[0].ID}[who], 1)
		return err
	})
	sameErr(t, "Reprioritize a cancelled job", dre, kre, jetflow.ErrInvalidTransition)

	// Children of a fan-out.
	dk, kk := each(e, func(cl *jetflow.Client, who string) []*jetflow.JobInfo {
		p := must(cl.Submit(ctx, "both.fan", nil, jetflow.Namespace("ns1")))(t)
		if done := must(cl.Wait(ctx, p.ID))(t); done.State != jetflow.Succeeded {
			t.Fatalf("fan-out %+v", done)
		}
		return must(cl.Children(ctx, p.ID))(t)
	})
	if len(dk) != 3 || string(dk[2].Payload) != "3" {
		t.Fatalf("children %+v", dk)
	}
	same(t, "Children", dk, kk, "worker")
	dn, kn := each(e, func(cl *jetflow.Client, who string) []*jetflow.JobInfo {
		return must(cl.Children(ctx, map[string]string{"d": dj.ID, "k": kj.ID}[who]))(t)
	})
	if dn == nil || kn == nil || len(dn)+len(kn) != 0 {
		t.Errorf("children of a plain job: %v, %v", dn, kn)
	}

	// Retry of a failed job.
	dr, kr := each(e, func(cl *jetflow.Client, who string) *jetflow.JobInfo {
		f := must(cl.Submit(ctx, "both.fail", nil, jetflow.Namespace("ns1"), jetflow.MaxRetries(0)))(t)
		if done := must(cl.Wait(ctx, f.ID))(t); done.State != jetflow.Failed {
			t.Fatalf("failing job %+v", done)
		}
		r1 := must(cl.Retry(ctx, f.ID, "again-"+who))(t)
		r2 := must(cl.Retry(ctx, f.ID, "again-"+who))(t)
		if r1.ID != r2.ID || r1.RetryOf != f.ID {
			t.Errorf("%s: retries %s %s of %s (retry_of %s)", who, r1.ID, r2.ID, f.ID, r1.RetryOf)
		}
		return must(cl.Wait(ctx, r1.ID))(t)
	})
	same(t, "Retry", dr, kr, "worker", "user")
	drf, krf := each(e, func(cl *jetflow.Client, who string) error {
		_, err := cl.RetryFailedPieces(ctx, map[string]string{"d": dr.ID, "k": kr.ID}[who], "")
		return err
	})
	sameErr(t, "RetryFailedPieces of a job that did not fan out", drf, krf, jetflow.ErrInvalidInput)
	if p := jetflow.ProblemOf(drf); p.Field != "failed_pieces" {
		t.Errorf("RetryFailedPieces refused with %+v", p)
	}

	// PurgeJob of a finished job: purged, and then not found.
	dpj, kpj := each(e, func(cl *jetflow.Client, who string) []any {
		id := map[string]string{"d": dr.ID, "k": kr.ID}[who]
		n := must(cl.PurgeJob(ctx, id, "done with it"))(t)
		_, err := cl.Get(ctx, id)
		return []any{n, errors.Is(err, jetflow.ErrNotFound)}
	})
	if fmt.Sprint(dpj) != "[1 true]" {
		t.Errorf("PurgeJob: %v", dpj)
	}
	same(t, "PurgeJob", dpj, kpj)

	// List: the same jobs, in the same order.
	dl, kl := each(e, func(cl *jetflow.Client, who string) []string {
		var ids []string
		for _, j := range must(cl.List(ctx, jetflow.ListFilter{Namespace: "ns1", Queue: "parked"}))(t) {
			ids = append(ids, j.ID)
		}
		return ids
	})
	if len(dl) != 6 || !slices.Equal(dl, kl) {
		t.Errorf("list: direct %v, token %v", dl, kl)
	}
	dp, kp := each(e, func(cl *jetflow.Client, who string) []string {
		page := must(cl.List(ctx, jetflow.ListFilter{Namespace: "ns1", Queue: "parked", Limit: 2}))(t)
		next := must(cl.List(ctx, jetflow.ListFilter{Namespace: "ns1", Queue: "parked", Limit: 2, Before: page[1].Cursor()}))(t)
		return []string{page[0].ID, page[1].ID, next[0].ID, next[1].ID}
	})
	if !slices.Equal(dp, kp) || !slices.Equal(dp, dl[:4]) {
		t.Errorf("pages: direct %v, token %v, all %v", dp, kp, dl)
	}

	// Queues: pause, resume, limits.
	each(e, func(cl *jetflow.Client, who string) error {
		if _, err := cl.Submit(ctx, "both.park", nil, jetflow.Queue("q-"+who)); err != nil {
			t.Fatal(err)
		}
		if err := cl.PauseQueue(ctx, "q-"+who); err != nil {
			t.Fatal(err)
		}
		if err := cl.SetQueueLimits(ctx, "q-"+who, jetflow.QueueLimits{MaxRunning: 4}); err != nil {
			t.Fatal(err)
		}
		l, err := cl.ChangeQueueLimits(ctx, "q-"+who, func(l jetflow.QueueLimits) jetflow.QueueLimits {
			l.MaxRunningPerUser = l.MaxRunning / 2
			return l
		})
		if err != nil || l != (jetflow.QueueLimits{MaxRunning: 4, MaxRunningPerUser: 2}) {
			t.Errorf("%s: limits %+v %v", who, l, err)
		}
		// Every limit of admission, and back: a rate limit of 0 takes its
		// period and key with it.
		all := jetflow.QueueLimits{MaxRunning: 4, MaxRunningPerUser: 2, MaxRunningPerKey: 1, RateLimit: 10,
			RatePeriod: time.Minute, RateKey: "user", Priorities: true, MaxQueued: 50}
		l, err = cl.ChangeQueueLimits(ctx, "q-"+who, func(l jetflow.QueueLimits) jetflow.QueueLimits {
			l.MaxRunningPerKey, l.RateLimit, l.RatePeriod, l.RateKey, l.Priorities, l.MaxQueued = 1, 10, time.Minute, "user", true, 50
			return l
		})
		if err != nil || l != all {
			t.Errorf("%s: every limit %+v %v", who, l, err)
		}
		l, err = cl.ChangeQueueLimits(ctx, "q-"+who, func(l jetflow.QueueLimits) jetflow.QueueLimits {
			l.MaxRunningPerKey, l.RateLimit, l.RatePeriod, l.RateKey, l.Priorities, l.MaxQueued = 0, 0, 0, "", false, 0
			return l
		})
		if err != nil || l != (jetflow.QueueLimits{MaxRunning: 4, MaxRunningPerUser: 2}) {
			t.Errorf("%s: limits back %+v %v", who, l, err)
		}
		return nil
	})
	dq, kq := each(e, func(cl *jetflow.Client, who string) []*jetflow.QueueInfo { return must(cl.Queues(ctx))(t) })
	same(t, "Queues", dq, kq)
	byName := map[string]*jetflow.QueueInfo{}
	for _, q := range kq {
		byName[q.Name] = q
	}
	for _, n := range []string{"q-d", "q-k"} {
		if q := byName[n]; q == nil || !q.Paused || q.MaxRunning != 4 || q.MaxRunningPerUser != 2 {
			t.Errorf("queue %s: %+v", n, q)
		}
	}
	each(e, func(cl *jetflow.Client, who string) error {
		if err := cl.ResumeQueue(ctx, "q-"+who); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	for _, q := range must(e.k.Queues(ctx))(t) {
		if q.Paused {
			t.Errorf("queue %s still paused", q.Name)
		}
	}

	// Workers.
	dwk, kwk := each(e, func(cl *jetflow.Client, who string) []*jetflow.WorkerInfo { return must(cl.Workers(ctx))(t) })
	if len(dwk) != 1 || !dwk[0].Live {
		t.Errorf("workers %+v", dwk)
	}
	same(t, "Workers", dwk, kwk, "claims", "live")

	// Types and namespaces.
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`)
	dt, kt := each(e, func(cl *jetflow.Client, who string) [3]*jetflow.TypeInfo {
		t1, c1, err := cl.RegisterType(ctx, "ns1:cat:t-"+who, schema, "a type")
		if err != nil || !c1 {
			t.Fatalf("%s: register %+v %v %v", who, t1, c1, err)
		}
		t2, c2, err := cl.RegisterType(ctx, "ns1:cat:t-"+who, schema, "a type")
		if err != nil || c2 {
			t.Fatalf("%s: register again %+v %v %v", who, t2, c2, err)
		}
		return [3]*jetflow.TypeInfo{t1, t2, must(cl.Type(ctx, "ns1:cat:t-"+who))(t)}
	})
	same(t, "RegisterType, Type", dt, kt, "full_name", "name")
	dts, kts := each(e, func(cl *jetflow.Client, who string) []*jetflow.TypeInfo { return must(cl.Types(ctx, "ns1", false))(t) })
	if len(dts) != 2 {
		t.Errorf("types %+v", dts)
	}
	same(t, "Types", dts, kts)
	dsn, ksn := each(e, func(cl *jetflow.Client, who string) error {
		if err := cl.SetNamespace(ctx, "strict-"+who, jetflow.NamespaceSettings{StrictTypes: true, Retention: 48 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		_, err := cl.Submit(ctx, "free.form", nil, jetflow.Namespace("strict-"+who))
		return err
	})
	sameErr(t, "a free-form type in a strict namespace", dsn, ksn, jetflow.ErrNotFound)

	// Tokens.
	dtk, ktk := each(e, func(cl *jetflow.Client, who string) [2]*jetflow.TokenInfo {
		tok := must(cl.CreateToken(ctx, jetflow.TokenSpec{Name: "ci", Namespace: "ns1", Role: jetflow.RoleReader, TTL: time.Hour}))(t)
		if tok.Token == "" || tok.ExpiresAt == nil {
			t.Errorf("%s: token %+v", who, tok)
		}
		listed := must(cl.Tokens(ctx))(t)
		if !slices.ContainsFunc(listed, func(x *jetflow.TokenInfo) bool { return x.ID == tok.ID && x.Token == "" }) {
			t.Errorf("%s: %s not listed", who, tok.ID)
		}
		return [2]*jetflow.TokenInfo{tok, must(cl.RevokeToken(ctx, tok.ID))(t)}
	})
	if !dtk[1].Revoked {
		t.Errorf("revoked %+v", dtk[1])
	}
	same(t, "CreateToken, RevokeToken", dtk, ktk)
	dtl, ktl := each(e, func(cl *jetflow.Client, who string) []*jetflow.TokenInfo { return must(cl.Tokens(ctx))(t) })
	if len(dtl) != 3 {
		t.Errorf("tokens %+v", dtl)
	}
	same(t, "Tokens", dtl, ktl)

	// Files: submitted with the job (more than a chunk), read by the HTTP
	// worker that holds the job, its result stored and downloaded.
	big := bytes.Repeat([]byte("0123456789abcdef"), 80_000) // 1.25 MB: three chunks
	wk := struct {
		ID string `json:"id"`
	}{}
	if err := json.Unmarshal(e.http("POST", "/api/v1/workers", map[string]any{"name": "hw", "types": []string{"both.files"}}), &wk); err != nil {
		t.Fatal(err)
	}
	archive := zipOf(t, map[string]string{"out/a.txt": "done"})
	type filed struct {
		Job            *jetflow.JobInfo
		In, Small      []byte
		Result         jetflow.FileInfo
		Archive        []byte
		Downloaded     jetflow.FileInfo
		Before, NoFile error
	}
	dfl, kfl := each(e, func(cl *jetflow.Client, who string) filed {
		var out filed
		out.Job = must(cl.Submit(ctx, "both.files", nil, jetflow.Namespace("ns1"), jetflow.Files(map[string]io.Reader{
			"data/big.bin": bytes.NewReader(big), "small.txt": strings.NewReader("hi"), "empty": strings.NewReader("")})))(t)
		var claimed struct {
			Job *struct{ ID string } `json:"job"`
		}
		if err := json.Unmarshal(e.http("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wk.ID}), &claimed); err != nil || claimed.Job == nil || claimed.Job.ID != out.Job.ID {
			t.Fatalf("%s: claimed %+v %v, want %s", who, claimed.Job, err, out.Job.ID)
		}
		read := func(f jetflow.FileInfo) []byte {
			r := must(cl.OpenInput(ctx, out.Job.ID, f))(t)
			defer r.Close()
			return must(io.ReadAll(r))(t)
		}
		out.In, out.Small = read(out.Job.Files[0]), read(out.Job.Files[2])
		if b := read(out.Job.Files[1]); len(b) != 0 {
			t.Errorf("%s: the empty file has %d bytes", who, len(b))
		}
		_, out.Before = cl.Download(ctx, out.Job.ID, io.Discard)
		out.Result = must(cl.PutResult(ctx, out.Job.ID, bytes.NewReader(archive)))(t)
		e.http("PATCH", "/api/v1/jobs/"+out.Job.ID, map[string]any{"worker_id": wk.ID, "state": "running"})
		e.http("PATCH", "/api/v1/jobs/"+out.Job.ID, map[string]any{"worker_id": wk.ID, "state": "succeeded", "result": "ok"})
		var buf bytes.Buffer
		out.Downloaded = must(cl.Download(ctx, out.Job.ID, &buf))(t)
		out.Archive = buf.Bytes()
		_, out.NoFile = cl.Download(ctx, dj.ID, io.Discard)
		return out
	})
	if !bytes.Equal(dfl.In, big) || !bytes.Equal(kfl.In, big) || string(kfl.Small) != "hi" || !bytes.Equal(kfl.Archive, archive) {
		t.Errorf("files: direct %d bytes, token %d bytes, %q, archive %d bytes", len(dfl.In), len(kfl.In), kfl.Small, len(kfl.Archive))
	}
	sameErr(t, "Download before the end", dfl.Before, kfl.Before, jetflow.ErrNotEnded)
	sameErr(t, "Download without an archive", dfl.NoFile, kfl.NoFile, jetflow.ErrNoFile)
	dfl.Before, kfl.Before, dfl.NoFile, kfl.NoFile = nil, nil, nil, nil
	dfl.In, kfl.In, dfl.Archive, kfl.Archive = nil, nil, nil, nil
	same(t, "Files", dfl, kfl, "worker", "user")

	// Purge: each its own namespace's old jobs.
	dpu, kpu := each(e, func(cl *jetflow.Client, who string) [3]any {
		ns := "purge-" + who
		for i := range 3 {
			j := must(cl.Submit(ctx, "both.echo", i, jetflow.Namespace(ns)))(t)
			must(cl.Wait(ctx, j.ID))(t)
		}
		dry, n, err := cl.Purge(ctx, jetflow.PurgeOptions{OlderThan: time.Nanosecond, Namespace: ns, DryRun: true})
		if err != nil || n != 0 || len(dry) != 3 {
			t.Fatalf("%s: dry run %v %d %v", who, dry, n, err)
		}
		ids, n, err := cl.Purge(ctx, jetflow.PurgeOptions{OlderThan: time.Nanosecond, Namespace: ns})
		if err != nil || !slices.Equal(ids, dry) {
			t.Fatalf("%s: purged %v (dry run %v) %v", who, ids, dry, err)
		}
		left := must(cl.List(ctx, jetflow.ListFilter{Namespace: ns}))(t)
		return [3]any{len(ids), n, len(left)}
	})
	if dpu != [3]any{3, 3, 0} {
		t.Errorf("purge %v", dpu)
	}
	same(t, "Purge", dpu, kpu)

	// Replay and Verify, of the same log, once nothing moves.
	testkit.WaitFor(t, 20*time.Second, func() error {
		for _, cl := range []*jetflow.Client{e.d, e.k} {
			rep, err := cl.Verify(ctx, time.Second)
			if err != nil {
				return err
			}
			if len(rep.Diffs) != 0 {
				return fmt.Errorf("diffs %+v", rep.Diffs)
			}
		}
		return nil
	})
	dv, kv := each(e, func(cl *jetflow.Client, who string) *jetflow.VerifyReport {
		return must(cl.Verify(ctx, time.Second))(t)
	})
	same(t, "Verify", dv, kv)
	type replayed struct {
		States map[jetflow.State]int
		Last   uint64
	}
	drp, krp := each(e, func(cl *jetflow.Client, who string) replayed {
		s, last, err := cl.Replay(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return replayed{s, last}
	})
	if drp.States[jetflow.Succeeded] == 0 || drp.Last == 0 || !reflect.DeepEqual(drp, krp) {
		t.Errorf("replay: direct %+v, token %+v", drp, krp)
	}

	// The same mistakes, the same problems.
	unknown := domain.NewID()
	for _, m := range []struct {
		what string
		call func(cl *jetflow.Client) error
		want error
	}{
		{"Get of no job", func(cl *jetflow.Client) error { _, err := cl.Get(ctx, unknown); return err }, jetflow.ErrNotFound},
		{"Children of no job", func(cl *jetflow.Client) error { _, err := cl.Children(ctx, unknown); return err }, jetflow.ErrNotFound},
		{"Retry of a job not ended", func(cl *jetflow.Client) error { _, err := cl.Retry(ctx, ds.Job.ID, ""); return err }, jetflow.ErrInvalidTransition},
		{"Retry of no job", func(cl *jetflow.Client) error { _, err := cl.Retry(ctx, unknown, ""); return err }, jetflow.ErrNotFound},
		{"PurgeJob of a job not ended", func(cl *jetflow.Client) error { _, err := cl.PurgeJob(ctx, ds.Job.ID, ""); return err }, jetflow.ErrInvalidTransition},
		{"PurgeJob of no job", func(cl *jetflow.Client) error { _, err := cl.PurgeJob(ctx, unknown, ""); return err }, jetflow.ErrNotFound},
		{"Type never registered", func(cl *jetflow.Client) error { _, err := cl.Type(ctx, "ns1:cat:nothing"); return err }, jetflow.ErrNotFound},
		{"RegisterType with another schema", func(cl *jetflow.Client) error {
			_, _, err := cl.RegisterType(ctx, "ns1:cat:t-d", json.RawMessage(`{"type":"string"}`), "")
			return err
		}, jetflow.ErrConflict},
		{"RevokeToken of no token", func(cl *jetflow.Client) error { _, err := cl.RevokeToken(ctx, unknown); return err }, jetflow.ErrNotFound},
		{"CreateToken of no role", func(cl *jetflow.Client) error {
			_, err := cl.CreateToken(ctx, jetflow.TokenSpec{Name: "x", Namespace: "ns1", Role: "boss"})
			return err
		}, jetflow.ErrInvalidInput},
		{"SetQueueLimits out of range", func(cl *jetflow.Client) error {
			return cl.SetQueueLimits(ctx, "q-d", jetflow.QueueLimits{MaxRunning: -1})
		}, jetflow.ErrInvalidInput},
		{"PauseQueue of a bad name", func(cl *jetflow.Client) error { return cl.PauseQueue(ctx, "a.b") }, jetflow.ErrInvalidInput},
		{"Purge of a bad namespace", func(cl *jetflow.Client) error {
			_, _, err := cl.Purge(ctx, jetflow.PurgeOptions{OlderThan: time.Hour, Namespace: "a@b"})
			return err
		}, jetflow.ErrInvalidInput},
		{"a file of a bad name", func(cl *jetflow.Client) error {
			_, err := cl.Submit(ctx, "both.files", nil, jetflow.Files(map[string]io.Reader{"../x": strings.NewReader("x")}))
			return err
		}, jetflow.ErrInvalidInput},
		{"Download of no job", func(cl *jetflow.Client) error { _, err := cl.Download(ctx, unknown, io.Discard); return err }, jetflow.ErrNotFound},
	} {
		da, ka := each(e, func(cl *jetflow.Client, who string) error { return m.call(cl) })
		sameErr(t, m.what, da, ka, m.want)
	}

	// What only a client of the engine's permissions has: the replicas it
	// provisioned with (a token client does not know them: 0), a worker and
	// an engine of its own.
	if e.d.Replicas() != 1 || e.k.Replicas() != 0 || e.d.Conn() == nil || e.k.Conn() == nil {
		t.Errorf("replicas %d and %d", e.d.Replicas(), e.k.Replicas())
	}
	if err := jetflow.NewWorker(e.k, jetflow.WorkerConfig{}).Start(ctx); err == nil || !strings.Contains(err.Error(), "token client") {
		t.Errorf("a token client's worker: %v", err)
	}
}

// zipOf is a zip archive of files (name → content).
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for n, c := range files {
		w, err := zw.Create(n)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, c)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
