package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// FanOut records that a job worker holds defers its outcome to the pieces
// of f (an HTTP coordinator's report with state waiting), as a Go
// coordinator's returned FanOut is: the pieces are made (Store.makePieces),
// then running -> waiting is recorded (job.waiting, with the plan) and the
// job's work item settled; the fan-in counter completes it. The report is
// checked as a whole first, its pieces included (each child's submit as
// POST /jobs checks it, its type resolved and its payload validated): a
// refused report writes nothing. A report made again (its answer was
// lost) makes no duplicates: children's ids are derived from the parent's,
// batches' message ids too.
func (r *Remote) FanOut(ctx context.Context, id, worker string, f *FanOut, progress *domain.Progress, ev *commands.EventReport) (Snapshot, error) {
	cur, err := r.store.Load(ctx, id)
	if err != nil {
		return cur, err
	}
	plan := f.plan(cur.Job)
	now := time.Now().UTC()
	if err := commands.CheckReport(cur.Job, worker, commands.Report{State: domain.StateWaiting, Plan: &plan, Event: ev}, progress, now); err != nil {
		return cur, err
	}
	if err := r.store.checkPieces(ctx, cur.Job, f, now); err != nil {
		return cur, err
	}
	a := r.attempt(worker)
	if cur, err = r.annotations(ctx, cur, a, worker, progress, ev); err != nil {
		return cur, err
	}
	if plan, err = r.store.makePieces(ctx, cur.Job, f); err != nil {
		return cur, err
	}
	next, _, err := r.store.record(ctx, "complete", cur, a, commands.Outcome{Kind: commands.Waiting, Plan: &plan})
	if err != nil {
		// Cancelled (or lost) while its pieces were made: nobody waits for
		// the children it made.
		r.store.orphans(ctx, next.Job, len(f.Children), r.log)
		return next, err
	}
	return next, nil
}

// checkPieces checks the pieces of f of parent as making them would,
// writing nothing: each child's submit (commands.SubmitRequest.Spec, its
// type resolved and its payload validated against the type's schema),
// each batch's payload. A refusal names the piece:
// fanout.children[3].max_retries, fanout.batches.items[7].
func (s *Store) checkPieces(ctx context.Context, parent *domain.Job, f *FanOut, now time.Time) error {
	for i, req := range childRequests(parent, f.Children) {
		spec, err := req.Spec(now)
		if err == nil {
			_, err = s.Types.Resolve(ctx, spec.Namespace, spec.Type, spec.Payload)
		}
		if err != nil {
			return pieceError(fmt.Sprintf("fanout.children[%d]", i), err)
		}
	}
	for i, b := range f.Batches {
		if _, err := commands.CompactJSON(b); err != nil {
			return &commands.InputError{Field: fmt.Sprintf("fanout.batches.items[%d]", i), Reason: err.Error()}
		}
	}
	if f.BatchMaxRetries != nil && (*f.BatchMaxRetries < 0 || *f.BatchMaxRetries > commands.MaxRetriesLimit) {
		return &commands.InputError{Field: "fanout.batches.max_retries", Value: fmt.Sprint(*f.BatchMaxRetries),
			Reason: fmt.Sprintf("must be 0-%d", commands.MaxRetriesLimit)}
	}
	return nil
}

// pieceError names the piece of an input error, and says which piece any
// other refusal is about.
func pieceError(piece string, err error) error {
	var in *commands.InputError
	if errors.As(err, &in) {
		named := *in
		named.Field = piece + "." + in.Field
		if in.Field == "" {
			named.Field = piece
		}
		return &named
	}
	return fmt.Errorf("%s: %w", piece, err)
}
