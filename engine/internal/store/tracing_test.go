package store

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
)

// A submit with tracing off (no provider set in this package's tests)
// allocates nothing for tracing when it has no trace context, and carries
// its caller's context into the specs when it has one.
func TestTraceSubmitsWithTracingOff(t *testing.T) {
	ws := []*Write[domain.Job]{{Ev: &domain.Event{JobID: "a", Spec: &domain.Spec{Type: "t"}}}, nil,
		{Ev: &domain.Event{JobID: "b", Spec: &domain.Spec{Type: "t"}}}}
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() { endSubmits(traceSubmits(ctx, ws), nil) }); n != 0 {
		t.Fatalf("%v allocations per submit", n)
	}
	if ws[0].Ev.Spec.TraceParent != "" {
		t.Fatalf("a job with no trace context got %q", ws[0].Ev.Spec.TraceParent)
	}
	sc := tracing.Parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=b")
	if spans := traceSubmits(trace.ContextWithRemoteSpanContext(ctx, sc), ws); spans != nil {
		t.Fatalf("spans with tracing off: %v", spans)
	}
	for _, i := range []int{0, 2} {
		if s := ws[i].Ev.Spec; s.TraceParent != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || s.TraceState != "a=b" {
			t.Fatalf("job %d carries %q %q, want the caller's context", i, s.TraceParent, s.TraceState)
		}
	}
}
