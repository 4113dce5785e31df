package remote

import (
	"context"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
)

// claimContext is ctx in which the claim of j by a remote worker names the
// span of its attempt (tracing.StartRemoteClaim), when tracing is on.
func claimContext(ctx context.Context, j *domain.Job) context.Context {
	if tr := tracing.Tracer(); tr != nil {
		return tracing.StartRemoteClaim(ctx, tr, j)
	}
	return ctx
}

// endAttempt records the span of the remote attempt at j (the record its
// end was decided on) that ev ended, when tracing is on.
func endAttempt(ctx context.Context, j *domain.Job, ev *domain.Event) {
	if ev == nil || j == nil {
		return
	}
	if tr := tracing.Tracer(); tr != nil {
		tracing.EndRemoteAttempt(ctx, tr, j, ev)
	}
}

// batchSpan records the span of a remote worker's attempt at batch b, from
// its claim to now, with what was decided of it, when tracing is on. The
// worker was handed the trace context of the fan-out (the batch's own
// span has no record to keep its ids in).
func batchSpan(ctx context.Context, b *heldBatch, worker string, step commands.BatchStep, err error) {
	tr := tracing.Tracer()
	if tr == nil {
		return
	}
	_, span := tracing.StartBatch(ctx, tr, &b.item, b.ref.delivered, worker, true, b.ref.claimed)
	tracing.EndBatch(span, step, err)
}
