package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
)

// Task is a running attempt, as its handler sees it.
type Task struct {
	Job *domain.Job // the record as claimed: spec, payload, attempt
	run *run

	inputs inputs // a workflow step's dependencies' results (inputs.go)
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

// emitWait bounds an Emit's writes.
const emitWait = 10 * time.Second

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
	// The handler's context runs to the job's timeout: an append or a read
	// whose answer was lost with a server waits no longer than this.
	ctx, cancel := context.WithTimeout(ctx, emitWait)
	defer cancel()
	return rn.write(ctx, "emit", func(j *domain.Job, now time.Time) (*domain.Event, error) {
		return commands.Emit(j, name, level, message, fields, rn.rt.cfg.WorkerID, now)
	})
}

// guard is this attempt as its writes are guarded; its outcome acks its
// work item.
func (rn *run) guard() store.Attempt {
	return store.Attempt{Worker: rn.rt.cfg.WorkerID, Item: rn.lease, Number: rn.number,
		Settle: func(*domain.Job) { _ = rn.msg.Ack() }}
}

// write appends one annotation of this attempt on the snapshot its last
// write left, as long as the attempt still holds the job.
func (rn *run) write(ctx context.Context, op string, decide func(j *domain.Job, now time.Time) (*domain.Event, error)) error {
	rn.wmu.Lock()
	defer rn.wmu.Unlock()
	next, err := rn.rt.store.Annotate(ctx, op, rn.snap, rn.guard(), decide)
	if err != nil {
		return err
	}
	rn.snap = next
	return nil
}

func (rn *run) setProgress(p domain.Progress) {
	rn.pmu.Lock()
	if rn.progress == nil {
		rn.progress = NewCoalescer(rn.rt.cfg.ProgressInterval, func(_, _ string, p domain.Progress) {
			rn.writeProgress(context.Background(), p)
		})
	}
	c := rn.progress
	rn.pmu.Unlock()
	c.Defer(rn.id, rn.rt.cfg.WorkerID, p)
}

// coalescer is the run's progress coalescer, nil if it reported none.
func (rn *run) coalescer() *Coalescer {
	rn.pmu.Lock()
	defer rn.pmu.Unlock()
	return rn.progress
}

// flushProgress writes the pending progress, if any: the last one goes
// before the attempt's outcome.
func (rn *run) flushProgress(ctx context.Context) {
	if c := rn.coalescer(); c != nil {
		if p := c.Take(rn.id, rn.rt.cfg.WorkerID, true); p != nil {
			rn.writeProgress(ctx, *p)
		}
	}
}

func (rn *run) writeProgress(ctx context.Context, p domain.Progress) {
	err := rn.write(ctx, "progress", func(j *domain.Job, now time.Time) (*domain.Event, error) {
		return commands.Progress(j, p, rn.rt.cfg.WorkerID, now)
	})
	if err != nil && !errors.Is(err, commands.ErrNotClaimant) {
		rn.rt.log.Debug("progress", "job", rn.id, "err", err)
	}
}

// stopProgress cancels a scheduled write; the pending value stays for the
// write before the outcome.
func (rn *run) stopProgress() {
	if c := rn.coalescer(); c != nil {
		c.Pause(rn.id)
	}
}

// parentGone reports whether the job of rn has a parent that keeps it
// from running: one that ended without succeeding (cancelled, failed), or
// is gone. It reads the parent after the job's own
// job.started is in the log, so a parent cancelled before that start is
// always seen: a child whose parent is cancelled never runs.
func (r *Runtime) parentGone(ctx context.Context, rn *run) bool {
	return r.store.ParentEnded(ctx, rn.snap.Job)
}
