package engine

import (
	"context"
	"errors"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Task is a running attempt, as its handler sees it.
type Task struct {
	Job *domain.Job // the record as claimed: spec, payload, attempt
	run *run
}

// Progress reports how far the attempt got. It never blocks on I/O:
// reports are coalesced so that at most one progress event per
// ProgressInterval is written, with the last value reported; the last one
// is always written before the attempt's outcome.
func (t *Task) Progress(current, total int64, message string) error {
	if err := commands.CheckProgress(current, total, message); err != nil {
		return err
	}
	if t.run == nil {
		return errors.New("progress: not a running attempt")
	}
	t.run.setProgress(domain.Progress{Current: current, Total: total, Message: message})
	return nil
}

// Emit appends a named event to the job's log now: name is the handler's
// own (e.g. "import.page_done"), level is info, warning or error.
func (t *Task) Emit(ctx context.Context, name, level, message string, fields map[string]any) error {
	if t.run == nil {
		return errors.New("emit: not a running attempt")
	}
	level, err := commands.CheckEvent(name, level, message, fields)
	if err != nil {
		return err
	}
	rn := t.run
	return rn.write(ctx, "emit", func(j *domain.Job, now time.Time) (*domain.Event, error) {
		return commands.Emit(j, name, level, message, fields, rn.rt.cfg.WorkerID, now)
	})
}

// guard is this attempt as its writes are guarded; its outcome acks its
// work item.
func (rn *run) guard() attempt {
	return attempt{worker: rn.rt.cfg.WorkerID, item: rn.lease, number: rn.number,
		settle: func(*domain.Job) { _ = rn.msg.Ack() }}
}

// write appends one annotation of this attempt on the snapshot its last
// write left, as long as the attempt still holds the job.
func (rn *run) write(ctx context.Context, op string, decide func(j *domain.Job, now time.Time) (*domain.Event, error)) error {
	rn.wmu.Lock()
	defer rn.wmu.Unlock()
	a := rn.guard()
	next, _, err := rn.rt.store.Apply(ctx, op, rn.snap, func(j *domain.Job) (*domain.Event, error) {
		if err := a.holds(j); err != nil {
			return nil, err
		}
		return decide(j, time.Now().UTC())
	})
	if err != nil {
		return err
	}
	rn.snap = next
	return nil
}

func (rn *run) setProgress(p domain.Progress) {
	rn.pmu.Lock()
	defer rn.pmu.Unlock()
	rn.pending = &p
	if rn.timer != nil {
		return // a flush is due; it takes the newest value
	}
	wait := rn.rt.cfg.ProgressInterval - time.Since(rn.lastWrite)
	rn.timer = time.AfterFunc(max(wait, 0), func() { rn.flushProgress(context.Background()) })
}

// flushProgress writes the pending progress, if any.
func (rn *run) flushProgress(ctx context.Context) {
	rn.pmu.Lock()
	p := rn.pending
	rn.pending = nil
	if rn.timer != nil {
		rn.timer.Stop()
		rn.timer = nil
	}
	if p != nil {
		rn.lastWrite = time.Now() // the interval counts from when a write begins
	}
	rn.pmu.Unlock()
	if p == nil {
		return
	}
	err := rn.write(ctx, "progress", func(j *domain.Job, now time.Time) (*domain.Event, error) {
		return commands.Progress(j, *p, rn.rt.cfg.WorkerID, now)
	})
	if err != nil && !errors.Is(err, commands.ErrNotClaimant) {
		rn.rt.log.Debug("progress", "job", rn.id, "err", err)
	}
}

// stopProgress cancels a scheduled flush; the pending value stays for the
// flush before the outcome.
func (rn *run) stopProgress() {
	rn.pmu.Lock()
	defer rn.pmu.Unlock()
	if rn.timer != nil {
		rn.timer.Stop()
		rn.timer = nil
	}
}

// errParentGone: the job's parent is terminal, so the job must not run.
var errParentGone = errors.New("parent job is no longer running")

// parentGone reports whether the job of rn has a parent that is already
// terminal (cancelled, failed). It reads the parent after the job's own
// job.started is in the log, so a parent cancelled before that start is
// always seen: a child whose parent is cancelled never runs.
func (r *Runtime) parentGone(ctx context.Context, rn *run) bool {
	return r.store.parentEnded(ctx, rn.snap.Job)
}

// parentEnded reports whether j has a parent that keeps it from running:
// one that ended without succeeding (commands.ChildBlocked), or is gone.
func (s *Store) parentEnded(ctx context.Context, j *domain.Job) bool {
	if j.Spec.Parent == "" {
		return false
	}
	p, err := s.Load(ctx, j.Spec.Parent)
	if err != nil {
		return errors.Is(err, commands.ErrNotFound) // an orphan runs nowhere
	}
	return commands.ChildBlocked(p.Job)
}
