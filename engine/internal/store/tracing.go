package store

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
)

// traceSubmits gives the jobs of a submit their trace context
// (docs/tracing.md): with tracing on, each a submit span (a child of ctx's
// span context), which becomes the job's; with tracing off here, ctx's
// span context as it is, if it has one. It returns the spans to end
// (endSubmits), nil when tracing is off. A submit in no trace context with
// tracing off costs a context lookup per call, nothing per job.
func traceSubmits(ctx context.Context, ws []*Write[domain.Job]) []trace.Span {
	tr := tracing.Tracer()
	if tr == nil {
		sc := trace.SpanContextFromContext(ctx)
		if !sc.IsValid() {
			return nil
		}
		tp, ts := tracing.Format(sc)
		for _, w := range ws {
			if w != nil {
				w.Ev.Spec.TraceParent, w.Ev.Spec.TraceState = tp, ts
			}
		}
		return nil
	}
	spans := make([]trace.Span, len(ws))
	for i, w := range ws {
		if w != nil {
			spans[i] = tracing.StartSubmit(ctx, tr, w.Ev.JobID, w.Ev.Spec)
		}
	}
	return spans
}

// endSubmits ends the submit spans of traceSubmits with what became of
// each submit.
func endSubmits(spans []trace.Span, out []Submitted) {
	for i, span := range spans {
		if span != nil {
			tracing.EndSubmit(span, out[i].Created, out[i].Err)
		}
	}
}

// leaseWrittenOff records a claimer's decision that the lease of j (the
// record it judged) ran out, which wrote ev, when tracing is on: as the
// lease sweeper's (tracing.SpanLeaseExpired), with the span of the attempt that
// lost it when a worker outside the process held it.
func leaseWrittenOff(ctx context.Context, j *domain.Job, ev *domain.Event, began time.Time) {
	tr := tracing.Tracer()
	if tr == nil {
		return
	}
	tracing.Decided(ctx, tr, tracing.SpanLeaseExpired, j, ev, began)
	if commands.HeldRemotely(j) {
		tracing.EndRemoteAttempt(ctx, tr, j, ev)
	}
}
