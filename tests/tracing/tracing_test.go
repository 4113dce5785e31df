// Package tracing_test follows jobs through jetflow's OpenTelemetry spans:
// an in-memory exporter (sdk/trace/tracetest) is the global provider's, and
// each test asserts the spans of its own trace (a caller's trace context
// it makes) exactly: their names, kinds, parents, links and attributes.
package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/gateway"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/shell"
)

var exporter = tracetest.NewInMemoryExporter()

func TestMain(m *testing.M) {
	// A syncer: a span is in the exporter once it ended.
	tp := sdktrace.NewTracerProvider(append(tracing.ProviderOptions("jetflow-test"), sdktrace.WithSyncer(exporter))...)
	otel.SetTracerProvider(tp)
	os.Exit(m.Run())
}

// env is serve in process: an embedded server, an engine with the gateway,
// and a Go client for workers and submits.
type env struct {
	t      *testing.T
	srv    *server.Server
	ts     *httptest.Server
	client *jetflow.Client
	ctx    context.Context
}

func newEnv(t *testing.T, lease time.Duration) *env {
	t.Helper()
	srv := testkit.Server(t)
	e := &env{t: t, srv: srv, ctx: testkit.Ctx(t)}
	cfg := engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, LeaseSweepInterval: 500 * time.Millisecond, Log: testkit.Logger(t)}
	cfg.Reaper.Interval = 200 * time.Millisecond
	eng := engine.NewEngine(testkit.Store(t, testkit.Conn(t, srv), "engine"), cfg)
	g, err := gateway.New(gateway.Config{Client: testkit.Client(t, testkit.Conn(t, srv), "gateway"), Lease: lease, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	eng.Add(g)
	e.ts = httptest.NewServer(g)
	t.Cleanup(e.ts.Close)
	if err := eng.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	e.client, err = jetflow.NewClient(e.ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Name: "client", Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// worker starts a Go worker with id and handlers (and batch handlers).
func (e *env) worker(id string, handlers map[string]jetflow.HandlerFunc, batches map[string]func(context.Context, *jetflow.Batch[json.RawMessage]) error) {
	e.t.Helper()
	w := jetflow.NewWorker(e.client, jetflow.WorkerConfig{ID: id, Logger: testkit.Logger(e.t), ShutdownGrace: time.Second})
	for typ, h := range handlers {
		w.Handle(typ, h)
	}
	for typ, h := range batches {
		jetflow.RegisterBatch(w, typ, h)
	}
	if err := w.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { w.Stop(context.Background()) })
}

// do sends a request to the gateway and decodes its JSON answer into out,
// failing the test unless the status is want.
func (e *env) do(method, path string, body any, want int, out any, headers ...string) {
	e.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(e.ctx, method, e.ts.URL+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		e.t.Fatalf("%s %s: %d %s, want %d", method, path, res.StatusCode, raw, want)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			e.t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
}

func (e *env) get(id string) *projections.JobView {
	e.t.Helper()
	var v projections.JobView
	e.do("GET", "/api/v1/jobs/"+id, nil, 200, &v)
	return &v
}

func (e *env) waitState(id string, want jetflow.State) *projections.JobView {
	e.t.Helper()
	var v *projections.JobView
	testkit.WaitFor(e.t, 30*time.Second, func() error {
		v = e.get(id)
		if string(v.State) != string(want) {
			return fmt.Errorf("job %s is %s, want %s", id, v.State, want)
		}
		return nil
	})
	return v
}

// verify checks that every record is the fold of its log (replay
// --verify): the trace fields of the records included.
func (e *env) verify() {
	e.t.Helper()
	rep, err := e.client.Verify(e.ctx, time.Second)
	if err != nil || len(rep.Diffs) > 0 {
		e.t.Fatalf("verify: %v %+v", err, rep)
	}
}

// caller is the span context of a caller's own span: the trace a test's
// jobs are submitted in, with a fresh trace id.
func caller() trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	for i := range tid {
		tid[i] = byte(rand.Uint32())
	}
	for i := range sid {
		sid[i] = byte(rand.Uint32())
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
}

func traceparent(sc trace.SpanContext) string { return tracing.TraceParent(sc) }

// span is a span as a test asserts it: labelled by its name and, for an
// attempt, its number (run t#2); its parent and links by their labels
// ("caller" for the test's own span).
type span struct {
	Label  string
	Kind   trace.SpanKind
	Parent string
	Links  []string // label (what the link says)
	Attrs  map[string]string
	Status codes.Code
	Desc   string
}

// collect waits until the trace of sc has n spans, then returns them by
// label, and the raw stubs by label.
func collect(t *testing.T, sc trace.SpanContext, n int) (map[string]span, map[string]tracetest.SpanStub) {
	t.Helper()
	var stubs []tracetest.SpanStub
	testkit.WaitFor(t, 30*time.Second, func() error {
		stubs = stubs[:0]
		for _, s := range exporter.GetSpans() {
			if s.SpanContext.TraceID() == sc.TraceID() {
				stubs = append(stubs, s)
			}
		}
		if len(stubs) < n {
			var names []string
			for _, s := range stubs {
				names = append(names, s.Name)
			}
			return fmt.Errorf("%d spans in the trace, want %d: %v", len(stubs), n, names)
		}
		return nil
	})
	label := func(s tracetest.SpanStub) string {
		for _, a := range s.Attributes {
			if a.Key == tracing.AttrPiece {
				return fmt.Sprintf("%s#p%d", s.Name, a.Value.AsInt64())
			}
		}
		for _, a := range s.Attributes {
			if a.Key == tracing.AttrAttempt && s.SpanKind == trace.SpanKindConsumer {
				return fmt.Sprintf("%s#%d", s.Name, a.Value.AsInt64())
			}
		}
		return s.Name
	}
	byID := map[trace.SpanID]string{sc.SpanID(): "caller"}
	for _, s := range stubs {
		byID[s.SpanContext.SpanID()] = label(s)
	}
	got, raw := map[string]span{}, map[string]tracetest.SpanStub{}
	for _, s := range stubs {
		l := label(s)
		// The attempts of the children of a fan-out are told apart by
		// their job's submit: run trace.child#1 of submit trace.child#p2.
		if s.SpanKind == trace.SpanKindConsumer && s.Parent.IsValid() {
			if p := byID[s.Parent.SpanID()]; strings.Contains(p, "#p") {
				l += " of " + p
			}
		}
		if _, dup := got[l]; dup {
			t.Fatalf("two spans labelled %s", l)
		}
		v := span{Label: l, Kind: s.SpanKind, Parent: byID[s.Parent.SpanID()], Attrs: map[string]string{},
			Status: s.Status.Code, Desc: s.Status.Description}
		if !s.Parent.IsValid() {
			v.Parent = "(root)"
		} else if v.Parent == "" {
			v.Parent = "(unknown " + s.Parent.SpanID().String() + ")"
		}
		for _, lk := range s.Links {
			what := ""
			for _, a := range lk.Attributes {
				if a.Key == tracing.AttrLink {
					what = a.Value.AsString()
				}
			}
			v.Links = append(v.Links, byID[lk.SpanContext.SpanID()]+" ("+what+")")
		}
		sort.Strings(v.Links)
		for _, a := range s.Attributes {
			v.Attrs[string(a.Key)] = a.Value.Emit()
		}
		got[l], raw[l] = v, s
	}
	if len(stubs) != n {
		t.Fatalf("%d spans in the trace, want %d: %v", len(stubs), n, keys(got))
	}
	return got, raw
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// check compares the spans with want, each want's attributes being a
// subset of the span's (ids and times are checked by the tests).
func check(t *testing.T, got map[string]span, want []span) {
	t.Helper()
	if d := cmp.Diff(keys(got), func() []string {
		var ls []string
		for _, w := range want {
			ls = append(ls, w.Label)
		}
		sort.Strings(ls)
		return ls
	}()); d != "" {
		t.Fatalf("span labels (-got +want):\n%s", d)
	}
	for _, w := range want {
		g := got[w.Label]
		attrs := map[string]string{}
		for k := range w.Attrs {
			attrs[k] = g.Attrs[k]
		}
		g.Attrs = attrs
		if d := cmp.Diff(g, w, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("span %s (-got +want):\n%s", w.Label, d)
		}
	}
}

// The trace: a job submitted over HTTP in a caller's trace, failed
// by its first attempt, retried and succeeded by its second, is one trace:
// the submit span a child of the caller's, each attempt a child of the
// submit, the second linked to the first; the handler's context carries
// its attempt's span.
func TestHTTPSubmitRetriedToSuccessIsOneTrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3*time.Second)
	var mu sync.Mutex
	var inHandler []trace.SpanContext
	e.worker("tw-1", map[string]jetflow.HandlerFunc{"trace.flaky": func(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
		mu.Lock()
		inHandler = append(inHandler, trace.SpanContextFromContext(ctx))
		mu.Unlock()
		if job.Attempt == 1 {
			return nil, jetflow.WithCode("FLAKY", errors.New("first try fails"))
		}
		return json.RawMessage(`{"ok":true}`), nil
	}}, nil)
	sc := caller()
	var job projections.JobView
	e.do("POST", "/api/v1/jobs", map[string]any{"type": "trace.flaky", "max_retries": 2, "backoff": 0}, 201, &job,
		"traceparent", traceparent(sc), "tracestate", "vendor=x")
	e.waitState(job.ID, jetflow.Succeeded)

	got, raw := collect(t, sc, 3)
	job1 := map[string]string{"jetflow.job.id": job.ID, "jetflow.job.type": "trace.flaky", "jetflow.queue": "default", "jetflow.namespace": "default"}
	with := func(m map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	check(t, got, []span{
		{Label: "submit trace.flaky", Kind: trace.SpanKindProducer, Parent: "caller", Attrs: with(job1, "jetflow.created", "true")},
		{Label: "run trace.flaky#1", Kind: trace.SpanKindConsumer, Parent: "submit trace.flaky",
			Attrs: with(job1, "jetflow.attempt", "1", "jetflow.worker", "tw-1", "jetflow.outcome", "job.retry_scheduled",
				"jetflow.state", "queued", "jetflow.error.code", "FLAKY"),
			Status: codes.Error, Desc: "first try fails"},
		{Label: "run trace.flaky#2", Kind: trace.SpanKindConsumer, Parent: "submit trace.flaky",
			Links: []string{"run trace.flaky#1 (previous_attempt)"},
			Attrs: with(job1, "jetflow.attempt", "2", "jetflow.worker", "tw-1", "jetflow.outcome", "job.succeeded",
				"jetflow.state", "succeeded", "jetflow.error.code", "")},
	})
	// The caller's tracestate goes along; the job's trace context is its
	// submit's span; each handler ran in its attempt's span.
	submit := raw["submit trace.flaky"].SpanContext
	if s := raw["submit trace.flaky"].Parent; s.SpanID() != sc.SpanID() || !s.IsRemote() || s.TraceState().Get("vendor") != "x" {
		t.Errorf("submit's parent %v, want the caller's %v with its tracestate", s, sc)
	}
	if v := e.get(job.ID); v.TraceParent != traceparent(submit) || v.TraceState != "vendor=x" {
		t.Errorf("job's trace context %q %q, want the submit's %q", v.TraceParent, v.TraceState, traceparent(submit))
	}
	e.verify()
	mu.Lock()
	defer mu.Unlock()
	if len(inHandler) != 2 || !inHandler[0].Equal(raw["run trace.flaky#1"].SpanContext) || !inHandler[1].Equal(raw["run trace.flaky#2"].SpanContext) {
		t.Errorf("handlers' span contexts %v, want their attempts'", inHandler)
	}
}

// An HTTP worker's claim hands it the trace context of its attempt's span,
// which the engine records when the attempt ends, with those very ids: a
// retry's attempt is linked to the one before, and the worker's own spans
// have their parent in the trace.
func TestHTTPWorkerAttemptsKeepTheIdsTheirClaimsGave(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3*time.Second)
	sc := caller()
	var job projections.JobView
	e.do("POST", "/api/v1/jobs", map[string]any{"type": "trace.remote", "max_retries": 1, "backoff": 0}, 201, &job,
		"traceparent", traceparent(sc))
	var reg struct {
		ID string `json:"id"`
	}
	e.do("POST", "/api/v1/workers", map[string]any{"name": "py", "types": []string{"trace.remote"}}, 201, &reg)
	claim := func() trace.SpanContext {
		var c gateway.ClaimResponse
		e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": reg.ID, "wait": 10}, 200, &c)
		if c.Job == nil || c.Job.ID != job.ID {
			t.Fatalf("claim %+v, want job %s", c.Job, job.ID)
		}
		got := tracing.Parse(c.Job.TraceParent, "")
		if got.TraceID() != sc.TraceID() {
			t.Fatalf("claimed job's traceparent %q is not of the caller's trace %s", c.Job.TraceParent, sc.TraceID())
		}
		return got
	}
	patch := func(body map[string]any) {
		body["worker_id"] = reg.ID
		e.do("PATCH", "/api/v1/jobs/"+job.ID, body, 200, nil)
	}
	first := claim()
	patch(map[string]any{"state": "running"})
	if v := e.get(job.ID); v.TraceParent != traceparent(first) {
		t.Errorf("running job's traceparent %q, want its attempt's %q", v.TraceParent, traceparent(first))
	}
	patch(map[string]any{"state": "failed", "error": map[string]any{"code": "E1", "message": "boom"}, "retryable": true})
	second := claim()
	patch(map[string]any{"state": "running"})
	patch(map[string]any{"state": "succeeded", "result": map[string]any{"ok": true}})

	got, raw := collect(t, sc, 3)
	check(t, got, []span{
		{Label: "submit trace.remote", Kind: trace.SpanKindProducer, Parent: "caller", Attrs: map[string]string{"jetflow.job.id": job.ID}},
		{Label: "run trace.remote#1", Kind: trace.SpanKindConsumer, Parent: "submit trace.remote",
			Attrs: map[string]string{"jetflow.attempt": "1", "jetflow.worker": reg.ID, "jetflow.remote": "true",
				"jetflow.outcome": "job.retry_scheduled", "jetflow.error.code": "E1"},
			Status: codes.Error, Desc: "boom"},
		{Label: "run trace.remote#2", Kind: trace.SpanKindConsumer, Parent: "submit trace.remote",
			Links: []string{"run trace.remote#1 (previous_attempt)"},
			Attrs: map[string]string{"jetflow.attempt": "2", "jetflow.worker": reg.ID, "jetflow.remote": "true",
				"jetflow.outcome": "job.succeeded"}},
	})
	if raw["run trace.remote#1"].SpanContext.SpanID() != first.SpanID() {
		t.Errorf("attempt 1 recorded as %v, its claim said %v", raw["run trace.remote#1"].SpanContext, first)
	}
	if raw["run trace.remote#2"].SpanContext.SpanID() != second.SpanID() {
		t.Errorf("attempt 2 recorded as %v, its claim said %v", raw["run trace.remote#2"].SpanContext, second)
	}
	if first.SpanID() == second.SpanID() {
		t.Errorf("both claims named span %s", first.SpanID())
	}
	if v := e.get(job.ID); v.TraceParent != traceparent(raw["submit trace.remote"].SpanContext) {
		t.Errorf("finished job's traceparent %q, want its submit's", v.TraceParent)
	}
	e.verify()
}

// A worker outside the process that goes silent: the lease sweeper's
// decision is a span linked to the attempt, and the attempt's span is
// recorded with the lost lease as its outcome.
func TestLostLeaseOfAnHTTPWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t, time.Second)
	sc := caller()
	var job projections.JobView
	e.do("POST", "/api/v1/jobs", map[string]any{"type": "trace.silent", "max_lease_requeues": 0}, 201, &job,
		"traceparent", traceparent(sc))
	var reg struct {
		ID string `json:"id"`
	}
	e.do("POST", "/api/v1/workers", map[string]any{"name": "mute", "types": []string{"trace.silent"}}, 201, &reg)
	var c gateway.ClaimResponse
	e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": reg.ID, "wait": 10}, 200, &c)
	if c.Job == nil {
		t.Fatal("nothing claimed")
	}
	e.waitState(job.ID, jetflow.Failed) // no requeue left: job.lease_expired

	got, raw := collect(t, sc, 3)
	check(t, got, []span{
		{Label: "submit trace.silent", Kind: trace.SpanKindProducer, Parent: "caller", Attrs: map[string]string{"jetflow.job.id": job.ID}},
		{Label: "run trace.silent#1", Kind: trace.SpanKindConsumer, Parent: "submit trace.silent",
			Attrs:  map[string]string{"jetflow.remote": "true", "jetflow.outcome": "job.lease_expired", "jetflow.state": "failed"},
			Status: codes.Error, Desc: raw["run trace.silent#1"].Status.Description},
		{Label: "lease expired trace.silent", Kind: trace.SpanKindInternal, Parent: "submit trace.silent",
			Links:  []string{"run trace.silent#1 (attempt)"},
			Attrs:  map[string]string{"jetflow.outcome": "job.lease_expired", "jetflow.state": "failed"},
			Status: codes.Error, Desc: raw["lease expired trace.silent"].Status.Description},
	})
	if raw["run trace.silent#1"].SpanContext.SpanID() != tracing.Parse(c.Job.TraceParent, "").SpanID() {
		t.Errorf("the attempt's span is not the one its claim named")
	}
}

// A job submitted over the NATS command protocol with traceparent and
// tracestate headers is submitted in that context.
func TestNATSSubmitHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3*time.Second)
	sc := caller()
	m := nats.NewMsg("jetflow.cmd.submit")
	m.Data = []byte(`{"type":"trace.nats"}`)
	m.Header.Set("Content-Type", "application/json")
	m.Header.Set("traceparent", traceparent(sc))
	res, err := e.client.Conn().RequestMsgWithContext(e.ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	var reply struct {
		Job *projections.JobView `json:"job"`
	}
	if err := json.Unmarshal(res.Data, &reply); err != nil || reply.Job == nil {
		t.Fatalf("reply %s: %v", res.Data, err)
	}
	got, raw := collect(t, sc, 1)
	check(t, got, []span{{Label: "submit trace.nats", Kind: trace.SpanKindProducer, Parent: "caller",
		Attrs: map[string]string{"jetflow.job.id": reply.Job.ID, "jetflow.created": "true"}}})
	if reply.Job.TraceParent != traceparent(raw["submit trace.nats"].SpanContext) {
		t.Errorf("job's traceparent %q, want its submit's", reply.Job.TraceParent)
	}
}

// A fan-out to children and one to batches: the coordinator's attempt makes
// its pieces in a fanout span, under which every child's submit and every
// batch's attempt are; fan-in is a span of the parent's trace linked to the
// coordinator's attempt.
func TestFanOutAndFanInSpans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3*time.Second)
	ok := func(context.Context, *jetflow.RawJob) (json.RawMessage, error) { return json.RawMessage(`1`), nil }
	e.worker("tw-f", map[string]jetflow.HandlerFunc{
		"trace.coord": func(context.Context, *jetflow.RawJob) (json.RawMessage, error) {
			c1, _ := jetflow.NewRequest("trace.child", 1)
			c2, _ := jetflow.NewRequest("trace.child", 2)
			return nil, jetflow.FanOut(jetflow.FanOutSpec{Children: []*jetflow.SubmitRequest{c1, c2}})
		},
		"trace.bcoord": func(context.Context, *jetflow.RawJob) (json.RawMessage, error) {
			return nil, jetflow.FanOut(jetflow.FanOutSpec{BatchType: "trace.piece", Batches: []any{1, 2}})
		},
		"trace.child": ok,
	}, map[string]func(context.Context, *jetflow.Batch[json.RawMessage]) error{
		"trace.piece": func(context.Context, *jetflow.Batch[json.RawMessage]) error { return nil },
	})

	children := caller()
	job, err := e.client.Submit(trace.ContextWithRemoteSpanContext(e.ctx, children), "trace.coord", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(job.ID, jetflow.Succeeded)
	got, raw := collect(t, children, 8)
	check(t, got, []span{
		{Label: "submit trace.coord", Kind: trace.SpanKindProducer, Parent: "caller"},
		{Label: "run trace.coord#1", Kind: trace.SpanKindConsumer, Parent: "submit trace.coord",
			Attrs: map[string]string{"jetflow.outcome": "job.waiting", "jetflow.state": "waiting"}},
		{Label: "fanout trace.coord", Kind: trace.SpanKindInternal, Parent: "run trace.coord#1",
			Attrs: map[string]string{"jetflow.fanout.kind": "children", "jetflow.fanout.total": "2"}},
		{Label: "submit trace.child#p1", Kind: trace.SpanKindProducer, Parent: "fanout trace.coord",
			Attrs: map[string]string{"jetflow.parent": job.ID}},
		{Label: "submit trace.child#p2", Kind: trace.SpanKindProducer, Parent: "fanout trace.coord",
			Attrs: map[string]string{"jetflow.parent": job.ID}},
		{Label: "run trace.child#1 of submit trace.child#p1", Kind: trace.SpanKindConsumer, Parent: "submit trace.child#p1",
			Attrs: map[string]string{"jetflow.outcome": "job.succeeded"}},
		{Label: "run trace.child#1 of submit trace.child#p2", Kind: trace.SpanKindConsumer, Parent: "submit trace.child#p2",
			Attrs: map[string]string{"jetflow.outcome": "job.succeeded"}},
		{Label: "fanin trace.coord", Kind: trace.SpanKindInternal, Parent: "submit trace.coord",
			Links: []string{"run trace.coord#1 (attempt)"},
			Attrs: map[string]string{"jetflow.outcome": "job.succeeded", "jetflow.fanout.succeeded": "2", "jetflow.fanout.failed": "0"}},
	})
	_ = raw

	batches := caller()
	job, err = e.client.Submit(trace.ContextWithRemoteSpanContext(e.ctx, batches), "trace.bcoord", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitState(job.ID, jetflow.Succeeded)
	got, _ = collect(t, batches, 6)
	check(t, got, []span{
		{Label: "submit trace.bcoord", Kind: trace.SpanKindProducer, Parent: "caller"},
		{Label: "run trace.bcoord#1", Kind: trace.SpanKindConsumer, Parent: "submit trace.bcoord"},
		{Label: "fanout trace.bcoord", Kind: trace.SpanKindInternal, Parent: "run trace.bcoord#1",
			Attrs: map[string]string{"jetflow.fanout.kind": "batches", "jetflow.fanout.total": "2"}},
		{Label: "run batch trace.piece#p1", Kind: trace.SpanKindConsumer, Parent: "fanout trace.bcoord",
			Attrs: map[string]string{"jetflow.parent": job.ID, "jetflow.attempt": "1", "jetflow.outcome": "piece.succeeded"}},
		{Label: "run batch trace.piece#p2", Kind: trace.SpanKindConsumer, Parent: "fanout trace.bcoord",
			Attrs: map[string]string{"jetflow.parent": job.ID, "jetflow.attempt": "1", "jetflow.outcome": "piece.succeeded"}},
		{Label: "fanin trace.bcoord", Kind: trace.SpanKindInternal, Parent: "submit trace.bcoord",
			Links: []string{"run trace.bcoord#1 (attempt)"}, Attrs: map[string]string{"jetflow.fanout.succeeded": "2"}},
	})
}

// A job of a queue with limits waits in pending; its admission is a span
// of its trace.
func TestAdmissionSpan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3*time.Second)
	if err := e.client.SetQueueLimits(e.ctx, "traced", jetflow.QueueLimits{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	sc := caller()
	var job projections.JobView
	e.do("POST", "/api/v1/jobs", map[string]any{"type": "trace.admit", "queue": "traced"}, 201, &job, "traceparent", traceparent(sc))
	e.waitState(job.ID, jetflow.Queued)
	got, _ := collect(t, sc, 2)
	check(t, got, []span{
		{Label: "submit trace.admit", Kind: trace.SpanKindProducer, Parent: "caller"},
		{Label: "admit trace.admit", Kind: trace.SpanKindInternal, Parent: "submit trace.admit",
			Attrs: map[string]string{"jetflow.job.id": job.ID, "jetflow.queue": "traced", "jetflow.outcome": "job.admitted", "jetflow.state": "queued"}},
	})
}

// The reaper's decision (here a queue timeout) is a span of the job's
// trace.
func TestReaperSpan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3*time.Second)
	sc := caller()
	var job projections.JobView
	e.do("POST", "/api/v1/jobs", map[string]any{"type": "trace.unserved", "queue_timeout": 0.3}, 201, &job, "traceparent", traceparent(sc))
	e.waitState(job.ID, jetflow.Failed)
	got, raw := collect(t, sc, 2)
	check(t, got, []span{
		{Label: "submit trace.unserved", Kind: trace.SpanKindProducer, Parent: "caller"},
		{Label: "reap trace.unserved", Kind: trace.SpanKindInternal, Parent: "submit trace.unserved",
			Attrs: map[string]string{"jetflow.job.id": job.ID, "jetflow.outcome": "job.failed", "jetflow.state": "failed",
				"jetflow.reason": "reap-queue-timeout", "jetflow.error.code": "QUEUE_TIMEOUT"},
			Status: codes.Error, Desc: raw["reap trace.unserved"].Status.Description},
	})
}

// The command of an --exec job has its attempt's span in TRACEPARENT, not
// the worker's own.
func TestExecCommandGetsItsAttemptsSpan(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 3*time.Second)
	r, err := shell.New(shell.Config{Command: `printf '%s' "$TRACEPARENT"`, WorkDir: t.TempDir(), Logger: testkit.Logger(t),
		Env: []string{"PATH=" + os.Getenv("PATH"), "TRACEPARENT=00-11111111111111111111111111111111-2222222222222222-01"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	e.worker("tw-x", map[string]jetflow.HandlerFunc{"trace.exec": r.Work}, nil)
	sc := caller()
	var job projections.JobView
	e.do("POST", "/api/v1/jobs", map[string]any{"type": "trace.exec"}, 201, &job, "traceparent", traceparent(sc))
	v := e.waitState(job.ID, jetflow.Succeeded)
	_, raw := collect(t, sc, 2)
	var res shell.Result
	if err := json.Unmarshal(v.Result, &res); err != nil {
		t.Fatal(err)
	}
	if want := traceparent(raw["run trace.exec#1"].SpanContext); res.StdoutTail != want {
		t.Errorf("the command's TRACEPARENT is %q, want its attempt's %q", res.StdoutTail, want)
	}
}
