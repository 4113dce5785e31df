package commands

import (
	"fmt"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// Error codes of the deadlines the reaper enforces.
const (
	CodeTimeout      = "TIMEOUT"       // the execution timeout passed
	codeQueueTimeout = "QUEUE_TIMEOUT" // not started within its queue timeout
)

// ReapPolicy is what the reaper allows a job beyond its own deadlines.
type ReapPolicy struct {
	// Grace is added to a held job's execution timeout: a worker that still
	// holds the job has its handler cancelled at the timeout and records
	// the failure itself well within it.
	Grace time.Duration
	// StallTimeout fails a waiting parent none of whose pieces finished for
	// this long, unless its fan-out set its own.
	StallTimeout time.Duration
}

// Why the reaper ends a job: the deadline it passed.
const (
	reapTimeout      = "reap-timeout"       // held past its execution timeout and the grace
	reapQueueTimeout = "reap-queue-timeout" // queued past its queue timeout
	reapStalled      = "reap-stalled"       // waiting for pieces none of which finished for the stall timeout
)

// Overdue reports which deadline j passed at now (reapTimeout,
// reapQueueTimeout, reapStalled), or "" if none.
func Overdue(j *domain.Job, p ReapPolicy, now time.Time) string {
	due, ok := DueAt(j, p)
	if !ok || !now.After(due) {
		return ""
	}
	switch {
	case Held(j):
		return reapTimeout
	case j.State == domain.StateQueued:
		return reapQueueTimeout
	default:
		return reapStalled
	}
}

// DueAt is the instant after which Overdue names a deadline of j, as long
// as j does not change (every change is an event); ok is false when j has
// no deadline the reaper enforces, in its state. The reaper looks at a job
// again only once this instant has passed, or after its next event.
func DueAt(j *domain.Job, p ReapPolicy) (due time.Time, ok bool) {
	switch {
	case Held(j):
		d, ok := Deadline(j)
		return d.Add(p.Grace), ok
	case j.State == domain.StateQueued:
		if j.Spec.QueueTimeout > 0 {
			return j.QueuedAt.Add(j.Spec.QueueTimeout), true
		}
	case j.State == domain.StateWaiting:
		if st := stallTimeout(j, p); st > 0 {
			return j.UpdatedAt.Add(st), true
		}
	}
	return time.Time{}, false
}

func stallTimeout(j *domain.Job, p ReapPolicy) time.Duration {
	if j.Fanout != nil && j.Fanout.Plan.StallTimeout > 0 {
		return j.Fanout.Plan.StallTimeout
	}
	if j.Spec.Workflow != nil {
		return 0 // a workflow's steps keep their own deadlines; it waits for them however long they take
	}
	return p.StallTimeout
}

// Reap decides the event that ends j for the deadline it passed at now
// (Overdue), and names that deadline; a job that passed none (it moved on
// since it was seen) is refused with a *TransitionError.
func Reap(j *domain.Job, p ReapPolicy, actor string, now time.Time) (*domain.Event, string, error) {
	why := Overdue(j, p, now)
	var ev *domain.Event
	var err error
	switch why {
	case reapTimeout:
		ev, err = Fail(j, domain.JobError{Code: CodeTimeout, Message: fmt.Sprintf(
			"execution timeout of %s (and %s grace) passed and no worker reported", j.Spec.Timeout, p.Grace)},
			false, actor, now, 0)
	case reapQueueTimeout:
		ev, err = Fail(j, domain.JobError{Code: codeQueueTimeout, Message: fmt.Sprintf(
			"not started within its queue timeout of %s", j.Spec.QueueTimeout)}, false, actor, now, 0)
	case reapStalled:
		ev, err = stall(j, stallTimeout(j, p), actor, now)
	default:
		return nil, "", &TransitionError{JobID: j.ID, Event: "reap", From: j.State, To: j.State}
	}
	return ev, why, err
}
