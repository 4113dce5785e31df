package commands

import (
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// The questions the engine, the HTTP gateway and the runtimes ask of a
// job's state, answered here: no job state is compared outside the rules
// (this package) and the folds (projections). tests/layers checks it.

// HeldState reports whether a job in state s is held by a worker under a
// lease: claimed or running.
func HeldState(s domain.State) bool {
	return s == domain.StateClaimed || s == domain.StateRunning
}

// Dispatchable reports whether a job in state s needs its way to a worker
// written: a work item (queued) or a message schedule (scheduled).
func Dispatchable(s domain.State) bool {
	return s == domain.StateQueued || s == domain.StateScheduled
}

// InQueue reports whether a job in state s waits in its queue for a
// worker (queued): it has a place in line and a work item.
func InQueue(s domain.State) bool { return s == domain.StateQueued }

// InAdmission reports whether a job in state s waits for admission
// (pending): it has a place among the queue's pending jobs.
func InAdmission(s domain.State) bool { return s == domain.StatePending }

// AwaitsPieces reports whether a job in state s is a coordinator waiting
// for its children or batches (waiting).
func AwaitsPieces(s domain.State) bool { return s == domain.StateWaiting }

// WasCancelled reports whether a job in state s ended by a cancel.
func WasCancelled(s domain.State) bool { return s == domain.StateCancelled }

// Settled reports whether a job in state s ended by an outcome of its own
// (succeeded or failed), not by a cancel.
func Settled(s domain.State) bool {
	return s == domain.StateSucceeded || s == domain.StateFailed
}

// PieceOutcome is the piece event a child or batch that ended in state s
// tells its parent.
func PieceOutcome(s domain.State) string {
	switch s {
	case domain.StateFailed:
		return domain.PcFailed
	case domain.StateCancelled:
		return domain.PcCancelled
	}
	return domain.PcSucceeded
}

// Annotates reports whether ev moves no state: an annotation (progress, a
// handler's event, a hold, a piece).
func Annotates(ev *domain.Event) bool { return ev.To == domain.StateNew }

// Reprioritizable reports whether a job in state s may be given another
// priority (job.reprioritized): it has not started.
func Reprioritizable(s domain.State) bool {
	return Check("", s, "", domain.EvReprioritized) == nil
}

// ReportEnds reports whether a worker's report of state s ends its attempt
// (anything but running, or no state at all).
func ReportEnds(s domain.State) bool { return s != "" && s != domain.StateRunning }

// BatchReportable reports whether a worker may report a batch it holds in
// state s: succeeded, failed or retry_later.
func BatchReportable(s domain.State) bool {
	return s == domain.StateSucceeded || s == domain.StateFailed || s == StateRetryLater
}

// ReportShape is which of a worker's report's optional fields were given,
// to be checked against the state reported before anything is decided.
type ReportShape struct {
	State     domain.State
	Result    bool           // a result
	Error     bool           // an error
	ErrorText bool           // an error with a message
	Retryable bool           // retryable
	Reason    bool           // a reason
	Delay     *time.Duration // the delay of retry_later
	Fanout    bool           // what a waiting job waits for
}

// CheckDelayAndFanout refuses a delay or a fan-out that does not go with
// the state reported, or a state that lacks one, naming the field.
func (r ReportShape) CheckDelayAndFanout() error {
	switch {
	case r.State == StateRetryLater && r.Delay == nil:
		return inputErr("delay", `state "retry_later" needs a delay (0: at once)`)
	case r.Delay != nil && r.State != StateRetryLater:
		return inputErr("delay", `only with state "retry_later"`)
	case r.Delay != nil && *r.Delay < 0:
		return valueErr("delay", *r.Delay, "must not be negative")
	case AwaitsPieces(r.State) && !r.Fanout:
		return inputErr("fanout", `state "waiting" needs a fanout`)
	case r.Fanout && !AwaitsPieces(r.State):
		return inputErr("fanout", `only with state "waiting"`)
	}
	return nil
}

// CheckFields refuses a result, an error, retryable or a reason that does
// not go with the state reported, or a failure without a message.
func (r ReportShape) CheckFields() error {
	switch {
	case r.Result && r.State != domain.StateSucceeded:
		return inputErr("result", `only with state "succeeded"`)
	case r.Error && r.State != domain.StateFailed:
		return inputErr("error", `only with state "failed"`)
	case r.Retryable && r.State != domain.StateFailed:
		return inputErr("retryable", `only with state "failed"`)
	case r.Reason && r.State != domain.StateQueued && r.State != StateRetryLater:
		return inputErr("reason", `only with state "queued" or "retry_later"`)
	}
	return nil
}

// CheckFailure refuses a failed report without an error message.
func (r ReportShape) CheckFailure() error {
	if r.State == domain.StateFailed && !r.ErrorText {
		return inputErr("error", `state "failed" needs an error with a message`)
	}
	return nil
}

// DueLater reports whether a job in state s waits for its time to come
// (scheduled): a message schedule moves it to its queue then.
func DueLater(s domain.State) bool { return s == domain.StateScheduled }

// StateWord reports whether s names something a worker may put in a
// report: a job state or retry_later.
func StateWord(s domain.State) bool { return s.Valid() || s == StateRetryLater }
