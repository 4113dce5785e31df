package store

import (
	"context"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Attempt is one attempt at a job, as its writes are guarded: by the
// worker, the work item that holds its lease and the attempt's number for a
// worker in this process (commands.CheckClaimant); by the worker's id alone
// for a remote one (Item 0: commands.CheckHolder). Settle acks its work
// item once its outcome is written, given the job as the outcome was
// decided on.
type Attempt struct {
	Worker string
	Item   uint64
	Number int
	Settle func(j *domain.Job)
}

// Holds refuses a write of an attempt that no longer holds its job.
func (a Attempt) Holds(j *domain.Job) error {
	if a.Item == 0 {
		return commands.CheckHolder(j, a.Worker)
	}
	return commands.CheckClaimant(j, a.Worker, a.Item, a.Number)
}

// RecordOutcome writes how an attempt ended: decided on the job as it is,
// under the attempt's guard (Outcome.Decide); appended, projected and
// dispatched by Apply; then the attempt's work item is settled. A refusal
// (ErrNotClaimant: the lease went to another, or the job was cancelled;
// ErrInvalidTransition) writes nothing and settles nothing: the caller
// releases the item.
//
// An outcome appended to the log whose record could not be written stands:
// it is returned as written, its record Behind (Current and the Projector
// write it from the log).
//
// A result over commands.MaxInlineResult is stored in the files bucket
// first, as the attempt's own object (files.ResultJSONName), and the event
// names it (Outcome.ResultRef). A crash between the two leaves an object no
// event names: purge's Sweep deletes it with the job's other files.
func (s *Store) RecordOutcome(ctx context.Context, op string, cur Snapshot, a Attempt, o commands.Outcome, opts ...Option) (Snapshot, *domain.Event, error) {
	u := commands.Jitter()
	var decided *domain.Job
	var stored *storedResult // Apply may decide again: stored once per attempt
	next, ev, err := s.Apply(ctx, op, cur, func(j *domain.Job) (*domain.Event, error) {
		if err := a.Holds(j); err != nil {
			return nil, err
		}
		decided = j
		o := o
		if o.Kind == commands.Succeeded && len(o.Result) > commands.MaxInlineResult {
			ref, err := s.storeResult(ctx, j, o.Result, &stored)
			if err != nil {
				return nil, err
			}
			o.Result, o.ResultRef = nil, ref
		}
		return o.Decide(j, a.Worker, time.Now().UTC(), u)
	}, opts...)
	if err != nil && ev != nil {
		// The outcome is in the log, only its record was not written: it
		// stands. The record, and what the outcome implies, are written
		// from the log (Current, the Projector). Taken for a failure, the
		// attempt would write its claim's record over it and report again,
		// refused: its outcome "discarded" though it stands.
		folded, ferr := s.jobs.k.Fold(decided, ev)
		if ferr != nil {
			return next, nil, err
		}
		s.Log.Warn("outcome written to the log; its record is left to the projector", "job", ev.JobID, "event", ev.Type, "err", err)
		next, err = Snapshot{Job: folded, Rev: next.Rev, Behind: true}, nil
	}
	if err != nil {
		return next, nil, err
	}
	if a.Settle != nil {
		a.Settle(decided)
	}
	return next, ev, nil
}

// storedResult is a large result stored for an attempt.
type storedResult struct {
	attempt int
	ref     domain.FileRef
}

// storeResult stores the large result of j's current attempt in the files
// bucket, once per attempt (*stored).
func (s *Store) storeResult(ctx context.Context, j *domain.Job, result []byte, stored **storedResult) (*domain.FileRef, error) {
	if *stored != nil && (*stored).attempt == j.Attempt {
		return &(*stored).ref, nil
	}
	fs, err := s.Files(ctx)
	if err != nil {
		return nil, err
	}
	ref, err := fs.PutResultJSON(ctx, j.ID, j.Attempt, result)
	if err != nil {
		return nil, err
	}
	*stored = &storedResult{attempt: j.Attempt, ref: ref}
	return &ref, nil
}

// Annotate writes an event of an attempt that does not end it (its
// progress, a handler's event, a remote worker's start), decided on the
// job as it is under the attempt's guard.
func (s *Store) Annotate(ctx context.Context, op string, cur Snapshot, a Attempt, decide func(j *domain.Job, now time.Time) (*domain.Event, error)) (Snapshot, error) {
	next, _, err := s.Apply(ctx, op, cur, func(j *domain.Job) (*domain.Event, error) {
		if err := a.Holds(j); err != nil {
			return nil, err
		}
		return decide(j, time.Now().UTC())
	})
	return next, err
}
