package jetflow_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/internal/tracing"
)

// With tracing off in this process (no tracer provider set), the W3C
// trace context of a submit still travels with the job: from the Go
// client's context (directly, and through the command service from a
// token client's headers) into the job, to its handler's context, and to
// the children a coordinator makes. A job submitted outside any trace has
// none.
func TestTraceContextTravelsWithTracingOff(t *testing.T) {
	t.Parallel()
	srv, ctx, admin := startEngine(t)
	var mu sync.Mutex
	seen := map[string]trace.SpanContext{} // job id -> its handler's span context
	record := func(ctx context.Context, job *jetflow.RawJob) {
		mu.Lock()
		seen[job.ID] = trace.SpanContextFromContext(ctx)
		mu.Unlock()
	}
	w := jetflow.NewWorker(admin, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	w.Handle("tr.leaf", jetflow.HandlerFunc(func(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
		record(ctx, job)
		return nil, nil
	}))
	w.Handle("tr.coord", jetflow.HandlerFunc(func(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
		record(ctx, job)
		child, _ := jetflow.NewRequest("tr.leaf", nil)
		return nil, jetflow.FanOut(jetflow.FanOutSpec{Children: []*jetflow.SubmitRequest{child}})
	}))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	tok, err := admin.CreateToken(ctx, jetflow.TokenSpec{Name: "ci", Namespace: "default", Role: jetflow.RoleProducer})
	if err != nil {
		t.Fatal(err)
	}
	viaToken, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	wait := func(id string) *jetflow.JobInfo {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		j, err := admin.Wait(wctx, id)
		if err != nil || j.State != jetflow.Succeeded {
			t.Fatalf("job %s: %+v %v", id, j, err)
		}
		return j
	}
	in := func(tp, ts string) (context.Context, trace.SpanContext) {
		sc := tracing.Parse(tp, ts)
		return trace.ContextWithRemoteSpanContext(ctx, sc), sc
	}

	for _, c := range []struct {
		name   string
		client *jetflow.Client
		tp, ts string
	}{
		{"direct", admin, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "rojo=00f067aa0ba902b7"},
		{"token", viaToken, "00-0af7651916cd43dd8448eb211c80319d-b7ad6b7169203332-00", ""},
	} {
		sctx, sc := in(c.tp, c.ts)
		job, err := c.client.Submit(sctx, "tr.leaf", nil)
		if err != nil {
			t.Fatal(err)
		}
		if job.TraceParent != c.tp || job.TraceState != c.ts {
			t.Errorf("%s: job's trace context %q %q, want %q %q", c.name, job.TraceParent, job.TraceState, c.tp, c.ts)
		}
		wait(job.ID)
		mu.Lock()
		got := seen[job.ID]
		mu.Unlock()
		if got.TraceID() != sc.TraceID() || got.SpanID() != sc.SpanID() || !got.IsRemote() || got.IsSampled() != sc.IsSampled() {
			t.Errorf("%s: handler's span context %v, want the submit's %v", c.name, got, sc)
		}
	}

	sctx, _ := in("00-0af7651916cd43dd8448eb211c80319e-b7ad6b7169203333-01", "")
	parent, err := admin.Submit(sctx, "tr.coord", nil)
	if err != nil {
		t.Fatal(err)
	}
	wait(parent.ID)
	kids, err := admin.Children(ctx, parent.ID)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children: %v %v", kids, err)
	}
	if kids[0].TraceParent != parent.TraceParent {
		t.Errorf("child's trace context %q, want its parent's %q", kids[0].TraceParent, parent.TraceParent)
	}

	plain, err := admin.Submit(ctx, "tr.leaf", nil)
	if err != nil {
		t.Fatal(err)
	}
	wait(plain.ID)
	mu.Lock()
	defer mu.Unlock()
	if plain.TraceParent != "" || seen[plain.ID].IsValid() {
		t.Errorf("a job outside any trace has %q, its handler %v", plain.TraceParent, seen[plain.ID])
	}
}
