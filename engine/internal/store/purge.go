package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Purge purges terminal job id (commands.Purge): job.purged is appended to
// its subject, then its record, files and queue leftovers are deleted. A
// parent's children are purged first, with it, whatever their age; a parent
// with a child that is not terminal is refused (ErrInvalidTransition). It
// returns how many jobs it purged (the job and its descendants).
//
// A purge is not a transition: job.purged moves nothing, so nothing of
// what a transition implies (dispatch, piece events, cascades) follows it;
// its record is deleted rather than written (the jobs' Kind.Gone). A crash
// after the append leaves the record in place; Current (and so the
// Projector, which sees the event) deletes it, and the FileSweeper deletes
// the files of a job that no longer exists.
func (s *Store) Purge(ctx context.Context, id, reason string) (int, error) {
	fs, err := s.Files(ctx)
	if err != nil {
		return 0, err
	}
	return s.purge(ctx, fs, id, reason)
}

func (s *Store) purge(ctx context.Context, fs *files.Store, id, reason string) (int, error) {
	if !domain.ValidID(id) {
		return 0, &commands.InputError{Field: "id", Reason: fmt.Sprintf("%q is not a job id", id)}
	}
	n := 0
	var purged *domain.Job // the job as its purge was decided on
	_, ev, err := s.jobs.Change(ctx, "purge", Ref{Key: id}, func(j *domain.Job) (*domain.Event, error) {
		if j == nil {
			return nil, fmt.Errorf("job %s: %w", id, commands.ErrNotFound)
		}
		m, children, err := s.purgeChildren(ctx, fs, j, reason)
		n += m
		if err != nil {
			return nil, err
		}
		purged = j
		return commands.Purge(j, children, reason, s.ActorOf(ctx), time.Now().UTC())
	})
	if ev == nil {
		return n, err
	}
	// Purged in the log: Current and the FileSweeper finish what fails here.
	if err := errors.Join(err, s.leftovers(ctx, fs, purged)); err != nil {
		s.Log.Warn("after job.purged", "job", id, "err", err)
	}
	return n + 1, nil
}

// leftovers deletes what a purged job leaves besides its record: its
// files, its schedule and a parent's batches that are still queued.
func (s *Store) leftovers(ctx context.Context, fs *files.Store, j *domain.Job) error {
	var errs []error
	names := make([]string, len(j.Spec.Files))
	for i, f := range j.Spec.Files {
		names[i] = f.Name
	}
	if _, err := fs.DeleteJob(ctx, j.ID, names, j.ResultRef); err != nil {
		errs = append(errs, err)
	}
	if !j.RunAt.IsZero() { // it was scheduled once: a schedule may be left
		errs = append(errs, s.purgeQueueSubject(ctx, j.Spec.Queue, streams.SchedSubject(j.Spec.Queue, j.ID)))
	}
	if p := j.Fanout; p != nil && p.Plan.Kind == domain.FanoutBatches {
		errs = append(errs, s.purgeBatches(ctx, p.Plan.BatchQueue, p.Plan.BatchType, j.ID))
	}
	return errors.Join(errs...)
}

// purgeChildren purges the children of parent j that exist, those of its
// fan-out, its steps (a workflow's) and those linked to it by parent, and returns the states of
// those it could not purge (not terminal).
func (s *Store) purgeChildren(ctx context.Context, fs *files.Store, j *domain.Job, reason string) (int, []domain.State, error) {
	fam, err := s.readFamily(ctx, j.ID)
	if err != nil {
		return 0, nil, err
	}
	ids := fam.linked
	// The children of its fan-out, and those an attempt made before it
	// waited (or when it never did: piece.making).
	made := fam.making
	if j.Fanout != nil && j.Fanout.Plan.Kind == domain.FanoutChildren {
		made = max(made, j.Fanout.Plan.Total)
	}
	for piece := 1; piece <= made; piece++ {
		ids = append(ids, ChildID(j.Spec.Namespace, j.ID, piece))
	}
	// A workflow's steps. A step carried from the run it resumes is that
	// run's. One that succeeded may be carried by a run that resumes this
	// one: if there is or was such a run, it is left to retention.
	var carriable map[string]bool
	if g := j.Spec.Workflow; g != nil {
		resumed := s.resumed(ctx, j)
		carriable = map[string]bool{}
		for i, st := range g.Steps {
			if st.Carried == "" {
				id := StepID(j.Spec.Namespace, j.ID, i)
				ids = append(ids, id)
				carriable[id] = resumed
			}
		}
	}
	n := 0
	var left []domain.State
	for _, id := range ids {
		snap, err := s.Record(ctx, id)
		if errors.Is(err, commands.ErrNotFound) || errors.Is(err, commands.ErrInvalidInput) {
			continue // never made (a linked child whose submit failed after its link), or purged
		}
		if err != nil {
			return n, nil, err
		}
		if !snap.Job.State.Terminal() {
			left = append(left, snap.Job.State)
			continue
		}
		if carriable[id] && commands.EndedSucceeded(snap.Job.State) {
			continue
		}
		m, err := s.purge(ctx, fs, id, reason)
		n += m
		switch {
		case errors.Is(err, commands.ErrNotFound):
		case errors.Is(err, commands.ErrInvalidTransition):
			left = append(left, domain.StateRunning) // a grandchild still runs
		case err != nil:
			return n, nil, err
		}
	}
	return n, left, nil
}
