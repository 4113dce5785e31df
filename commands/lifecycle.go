package commands

import (
	"github.com/jetflow/jetflow/streams"
)

// Transition is one allowed move of the lifecycle: from a state to another,
// recorded by one event type.
type Transition struct {
	From  streams.State
	To    streams.State
	Event string
	When  string
}

// Lifecycle is the job lifecycle, the only place where moves are allowed.
// Anything not listed is refused with ErrInvalidTransition and writes
// nothing. docs/architecture.md draws it.
var Lifecycle = []Transition{
	{streams.StateNew, streams.StatePending, streams.EvSubmitted, "submitted, held by admission"},
	{streams.StateNew, streams.StateScheduled, streams.EvSubmitted, "submitted with run_at in the future"},
	{streams.StateNew, streams.StateQueued, streams.EvSubmitted, "submitted"},

	{streams.StatePending, streams.StateQueued, streams.EvAdmitted, "admitted: a slot of its queue is free"},
	{streams.StatePending, streams.StateScheduled, streams.EvAdmitted, "admitted, run_at in the future"},
	{streams.StatePending, streams.StateFailed, streams.EvFailed, "admission failed"},
	{streams.StatePending, streams.StateCancelled, streams.EvCancelled, "cancel"},

	{streams.StateScheduled, streams.StateQueued, streams.EvDue, "due"},
	// Not in the brief's table: a job of a queue with limits that comes due
	// (a retry after its backoff, a run_at) waits for a slot like a new one.
	{streams.StateScheduled, streams.StatePending, streams.EvPending, "due in a queue with limits"},
	{streams.StateScheduled, streams.StateCancelled, streams.EvCancelled, "cancel"},

	{streams.StateQueued, streams.StateClaimed, streams.EvClaimed, "claimed by an HTTP worker"},
	{streams.StateQueued, streams.StateRunning, streams.EvStarted, "claimed and started by an SDK worker"},
	{streams.StateQueued, streams.StateCancelled, streams.EvCancelled, "cancel"},
	{streams.StateQueued, streams.StateFailed, streams.EvFailed, "queue_timeout passed"},

	{streams.StateClaimed, streams.StateRunning, streams.EvStarted, "worker starts it"},
	{streams.StateClaimed, streams.StateQueued, streams.EvLeaseExpiredRequeue, "claim lease expired"},
	{streams.StateClaimed, streams.StateQueued, streams.EvRequeued, "worker gave it back"},
	{streams.StateClaimed, streams.StateFailed, streams.EvFailed, "worker reports failure"},
	{streams.StateClaimed, streams.StateFailed, streams.EvLeaseExpired, "claim lease expired too often"},
	{streams.StateClaimed, streams.StateCancelled, streams.EvCancelled, "cancel"},

	{streams.StateRunning, streams.StateSucceeded, streams.EvSucceeded, "handler returned"},
	{streams.StateRunning, streams.StateFailed, streams.EvFailed, "failed for good"},
	{streams.StateRunning, streams.StateFailed, streams.EvLeaseExpired, "lease expired too often"},
	{streams.StateRunning, streams.StateCancelled, streams.EvCancelled, "cancel"},
	{streams.StateRunning, streams.StateScheduled, streams.EvRetryScheduled, "retry after backoff"},
	{streams.StateRunning, streams.StateScheduled, streams.EvRetryLater, "handler asked to retry later"},
	{streams.StateRunning, streams.StateQueued, streams.EvRetryScheduled, "retry without delay"},
	{streams.StateRunning, streams.StateQueued, streams.EvRetryLater, "retry later without delay"},
	{streams.StateRunning, streams.StateQueued, streams.EvLeaseExpiredRequeue, "lease expired (requeue)"},
	{streams.StateRunning, streams.StateQueued, streams.EvRequeued, "worker shut down (requeue)"},
	{streams.StateRunning, streams.StateWaiting, streams.EvWaiting, "handler deferred to children/batches"},

	{streams.StateWaiting, streams.StateSucceeded, streams.EvSucceeded, "children/batches all done"},
	{streams.StateWaiting, streams.StateFailed, streams.EvFailed, "failure policy tripped"},
	{streams.StateWaiting, streams.StateFailed, streams.EvStalled, "no piece finished for stall_seconds"},
	{streams.StateWaiting, streams.StateCancelled, streams.EvCancelled, "cancel"},
}

// Annotations are events that record something about a job without moving
// it; they are allowed in the states listed.
var Annotations = map[string][]streams.State{
	streams.EvProgress: {streams.StateClaimed, streams.StateRunning, streams.StateWaiting},
	streams.EvCustom:   {streams.StateClaimed, streams.StateRunning, streams.StateWaiting},
	streams.EvFanIn:    {streams.StateWaiting},
	streams.EvPurged:   {streams.StateSucceeded, streams.StateFailed, streams.StateCancelled},
	streams.EvPending:  {streams.StatePending}, // why it waits
}

type move struct {
	from, to streams.State
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
func Allowed(from, to streams.State) bool { return allowed[move{from, to, ""}] }

// Check returns nil if event may move a job from -> to, else a
// *TransitionError. For annotations (to == from, or to empty) it checks
// Annotations instead.
func Check(jobID string, from, to streams.State, event string) error {
	if states, ok := Annotations[event]; ok && (to == "" || to == from) {
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
