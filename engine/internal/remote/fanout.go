package remote

import (
	"context"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
)

// FanOut records that a job worker holds defers its outcome to the pieces
// of f (an HTTP coordinator's report with state waiting), as a Go
// coordinator's returned FanOut is: the pieces are made (Store.MakePieces),
// then running -> waiting is recorded (job.waiting, with the plan) and the
// job's work item settled; the fan-in counter completes it. The report is
// checked as a whole first, its pieces included (each child's submit as
// POST /jobs checks it, its type resolved and its payload validated): a
// refused report writes nothing. A report made again (its answer was
// lost) makes no duplicates: children's ids are derived from the parent's,
// batches' message ids too.
func (r *Remote) FanOut(ctx context.Context, id, worker string, f *store.FanOut, progress *domain.Progress, ev *commands.EventReport) (store.Snapshot, error) {
	cur, err := r.store.Current(ctx, id)
	if err != nil {
		return cur, err
	}
	plan := f.Plan(cur.Job)
	now := time.Now().UTC()
	if err := commands.CheckReport(cur.Job, worker, commands.Report{State: domain.StateWaiting, Plan: &plan, Event: ev}, progress, now); err != nil {
		return cur, err
	}
	if err := r.store.CheckPieces(ctx, cur.Job, f, now); err != nil {
		return cur, err
	}
	a := r.attempt(worker)
	if cur, err = r.annotations(ctx, cur, a, worker, progress, ev); err != nil {
		return cur, err
	}
	// The pieces continue the trace of the attempt that makes them.
	if plan, err = r.store.MakePieces(tracing.RemoteContext(ctx, cur.Job), cur.Job, f); err != nil {
		return cur, err
	}
	next, waited, err := r.store.RecordOutcome(ctx, "complete", cur, a, commands.Outcome{Kind: commands.Waiting, Plan: &plan})
	endAttempt(ctx, cur.Job, waited)
	if err != nil {
		// Cancelled (or lost) while its pieces were made: nobody waits for
		// the children it made.
		r.store.CancelMadeChildren(ctx, next.Job, len(f.Children))
		return next, err
	}
	return next, nil
}
