package commands

import (
	"github.com/jetflow/jetflow/internal/domain"
)

// Transition is one allowed move of the lifecycle: from a state to another,
// recorded by one event type.
type Transition struct {
	From  domain.State
	To    domain.State
	Event string
	When  string
}

// Lifecycle is the job lifecycle, the only place where moves are allowed.
// Anything not listed is refused with ErrInvalidTransition and writes
// nothing. docs/architecture.md draws it.
var Lifecycle = []Transition{
	{domain.StateNew, domain.StatePending, domain.EvSubmitted, "submitted, held by admission"},
	{domain.StateNew, domain.StateScheduled, domain.EvSubmitted, "submitted with run_at in the future"},
	{domain.StateNew, domain.StateQueued, domain.EvSubmitted, "submitted"},

	{domain.StatePending, domain.StateQueued, domain.EvAdmitted, "admitted: a slot of its queue is free"},
	{domain.StatePending, domain.StateScheduled, domain.EvAdmitted, "admitted, run_at in the future"},
	{domain.StatePending, domain.StateFailed, domain.EvFailed, "admission failed"},
	{domain.StatePending, domain.StateCancelled, domain.EvCancelled, "cancel"},
	// Not in the brief's table: a workflow waits in pending while its
	// steps are created, then for them (docs/workflows.md).
	{domain.StatePending, domain.StateWaiting, domain.EvWaiting, "a workflow's steps are all created"},

	{domain.StateScheduled, domain.StateQueued, domain.EvDue, "due"},
	// Not in the brief's table: a job of a queue with limits that comes due
	// (a retry after its backoff, a run_at) waits for a slot like a new one.
	{domain.StateScheduled, domain.StatePending, domain.EvPending, "due in a queue with limits"},
	{domain.StateScheduled, domain.StateCancelled, domain.EvCancelled, "cancel"},

	{domain.StateQueued, domain.StateClaimed, domain.EvClaimed, "claimed by an HTTP worker"},
	{domain.StateQueued, domain.StateRunning, domain.EvStarted, "claimed and started by an SDK worker"},
	{domain.StateQueued, domain.StateCancelled, domain.EvCancelled, "cancel"},
	{domain.StateQueued, domain.StateFailed, domain.EvFailed, "queue_timeout passed"},

	{domain.StateClaimed, domain.StateRunning, domain.EvStarted, "worker starts it"},
	{domain.StateClaimed, domain.StateQueued, domain.EvLeaseExpiredRequeue, "claim lease expired"},
	{domain.StateClaimed, domain.StateQueued, domain.EvRequeued, "worker gave it back"},
	{domain.StateClaimed, domain.StateFailed, domain.EvFailed, "worker reports failure"},
	{domain.StateClaimed, domain.StateFailed, domain.EvLeaseExpired, "claim lease expired too often"},
	{domain.StateClaimed, domain.StateCancelled, domain.EvCancelled, "cancel"},

	{domain.StateRunning, domain.StateSucceeded, domain.EvSucceeded, "handler returned"},
	{domain.StateRunning, domain.StateFailed, domain.EvFailed, "failed for good"},
	{domain.StateRunning, domain.StateFailed, domain.EvLeaseExpired, "lease expired too often"},
	{domain.StateRunning, domain.StateCancelled, domain.EvCancelled, "cancel"},
	{domain.StateRunning, domain.StateScheduled, domain.EvRetryScheduled, "retry after backoff"},
	{domain.StateRunning, domain.StateScheduled, domain.EvRetryLater, "handler asked to retry later"},
	{domain.StateRunning, domain.StateQueued, domain.EvRetryScheduled, "retry without delay"},
	{domain.StateRunning, domain.StateQueued, domain.EvRetryLater, "retry later without delay"},
	{domain.StateRunning, domain.StateQueued, domain.EvLeaseExpiredRequeue, "lease expired (requeue)"},
	{domain.StateRunning, domain.StateQueued, domain.EvRequeued, "worker shut down (requeue)"},
	{domain.StateRunning, domain.StateWaiting, domain.EvWaiting, "handler deferred to children/batches"},

	{domain.StateWaiting, domain.StateSucceeded, domain.EvSucceeded, "children/batches all done"},
	{domain.StateWaiting, domain.StateFailed, domain.EvFailed, "failure policy tripped"},
	{domain.StateWaiting, domain.StateFailed, domain.EvStalled, "no piece finished for stall_seconds"},
	{domain.StateWaiting, domain.StateCancelled, domain.EvCancelled, "cancel"},
}

// annotations are events that record something about a job without moving
// it; they are allowed in the states listed.
var annotations = map[string][]domain.State{
	domain.EvProgress: {domain.StateClaimed, domain.StateRunning, domain.StateWaiting},
	domain.EvCustom:   {domain.StateClaimed, domain.StateRunning, domain.StateWaiting},
	domain.EvFanIn:    {domain.StateWaiting},
	domain.EvPurged:   {domain.StateSucceeded, domain.StateFailed, domain.StateCancelled},
	domain.EvPending:  {domain.StatePending}, // why it waits
	// Another priority, for a job that has not started: it orders a job
	// still pending in a queue with priorities (docs/limits.md).
	domain.EvReprioritized: {domain.StatePending, domain.StateScheduled, domain.StateQueued},
}

type move struct {
	from, to domain.State
	event    string
}

var allowed = func() map[move]bool {
	m := make(map[move]bool, len(Lifecycle))
	for _, t := range Lifecycle {
		m[move{t.From, t.To, t.Event}] = true
		m[move{t.From, t.To, ""}] = true
	}
	return m
}()

// Allowed reports whether the lifecycle has a move from -> to (by any event).
func Allowed(from, to domain.State) bool { return allowed[move{from, to, ""}] }

// Check returns nil if event may move a job from -> to, else a
// *TransitionError. For annotations (to == from, or to empty) it checks
// annotations instead.
func Check(jobID string, from, to domain.State, event string) error {
	if states, ok := annotations[event]; ok && (to == "" || to == from) {
		for _, s := range states {
			if s == from && (to == "" || to == from) {
				return nil
			}
		}
		return &TransitionError{JobID: jobID, Event: event, From: from, To: from}
	}
	if !allowed[move{from, to, event}] {
		return &TransitionError{JobID: jobID, Event: event, From: from, To: to}
	}
	return nil
}
