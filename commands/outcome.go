package commands

import (
	"fmt"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// OutcomeKind says how an attempt ended.
type OutcomeKind int

// The ways an attempt ends.
const (
	// Succeeded: the handler returned a result.
	Succeeded OutcomeKind = iota + 1
	// Failed: the handler failed; retried with backoff while the job has
	// retries left, the error is not Permanent and its code passes
	// retry_on / no_retry_on, else failed for good.
	Failed
	// RetryingLater: the handler asked to run again after Delay without
	// using up a retry.
	RetryingLater
	// GivenBack: the worker gives the job back to its queue at once (it
	// shuts down, or unregisters).
	GivenBack
	// ParentEnded: the job's parent is terminal, so the job must not run:
	// it cancels itself.
	ParentEnded
	// Waiting: the handler deferred the outcome to the pieces of Plan,
	// which were made.
	Waiting
)

// Outcome is how an attempt ended, told once by whoever ran it: the
// runtime from a handler's return (engine.Classify), a remote worker by
// its report. Decide turns it into the event that records it, on the job as
// it is when written.
type Outcome struct {
	Kind   OutcomeKind
	Result []byte // Succeeded: JSON, compacted
	// ResultRef: Succeeded with a result kept in the files bucket (over
	// MaxInlineResult), Result empty (Store.RecordOutcome moves it there).
	ResultRef *domain.FileRef
	Error     domain.JobError // Failed
	Permanent bool            // Failed: no retry, whatever is left
	Delay     time.Duration   // RetryingLater: how long to wait
	Reason    string          // RetryingLater, GivenBack, ParentEnded: why
	Plan      *domain.FanoutPlan
}

// Decide returns the event that records o on j, or a refusal (the
// lifecycle does not allow it from j's state). jitter spreads a retry's
// backoff (Jitter()).
func (o Outcome) Decide(j *domain.Job, actor string, now time.Time, jitter float64) (*domain.Event, error) {
	switch o.Kind {
	case Succeeded:
		ev, err := Succeed(j, o.Result, actor, now)
		if err == nil && o.ResultRef != nil {
			ev.Result, ev.ResultRef = nil, o.ResultRef
		}
		return ev, err
	case Failed:
		return Fail(j, o.Error, !o.Permanent, actor, now, jitter)
	case RetryingLater:
		return retryLater(j, o.Delay, o.Reason, actor, now)
	case GivenBack:
		return Requeue(j, o.Reason, actor, now)
	case ParentEnded:
		return Cancel(j, o.Reason, actor, now)
	case Waiting:
		if o.Plan == nil {
			return nil, inputErr("fanout", "no plan")
		}
		return Wait(j, *o.Plan, actor, now)
	}
	return nil, fmt.Errorf("job %s: outcome %d: %w", j.ID, o.Kind, ErrInvalidInput)
}

// BatchStep is what becomes of a batch's attempt: its work item is given
// back for another attempt (after Delay; at once when a worker shuts
// down), or the batch is done and Piece (piece.succeeded or piece.failed,
// with Error, a panic's stack included: it is the batch's only record)
// records it on its parent. Drop: the batch ends unrecorded (its parent was
// cancelled).
type BatchStep struct {
	Retry bool
	Delay time.Duration
	Piece string
	Error *domain.JobError
	Drop  bool
}

// batchBackoffCap bounds the delay before a batch's next attempt.
const batchBackoffCap = time.Minute

// DecideBatch decides what becomes of attempt n (1-based) of batch b that
// ended with o: a failure is retried with the batch's backoff
// (retryDelay, capped at batchBackoffCap) while attempts are left.
// cancelled says the parent's cancel stopped it.
func DecideBatch(b *domain.BatchItem, n int, o Outcome, cancelled bool) BatchStep {
	switch {
	case o.Kind == Succeeded:
		return BatchStep{Piece: domain.PcSucceeded}
	case o.Kind == GivenBack:
		return BatchStep{Retry: true}
	case cancelled:
		return BatchStep{Drop: true}
	case o.Kind == RetryingLater:
		return BatchStep{Retry: true, Delay: o.Delay}
	case o.Kind == Failed && !o.Permanent && n <= b.MaxRetries:
		return BatchStep{Retry: true, Delay: retryDelay(&domain.Spec{Backoff: b.Backoff, BackoffCap: batchBackoffCap}, n, 0)}
	}
	e := o.Error
	if o.Kind != Failed {
		e = domain.JobError{Code: "ERROR", Message: "a batch can only succeed, fail or retry later"}
	}
	return BatchStep{Piece: domain.PcFailed, Error: &e}
}

// Report is what a remote worker reports about a job it holds (the HTTP
// worker protocol's PATCH): a state, and what goes with it.
type Report struct {
	State     domain.State
	Result    []byte           // succeeded: JSON
	Error     *domain.JobError // failed
	Retryable *bool            // failed: default true
	Reason    string           // queued, retry_later
	Delay     time.Duration    // retry_later (StateRetryLater)
	// Plan is what a waiting coordinator waits for: its pieces, made
	// before the report is recorded.
	Plan *domain.FanoutPlan
	// Event is a handler's own event, written before the state's move.
	Event *EventReport
}

// Outcome is the attempt's end the report tells, or ok false for a report
// that ends nothing (running) or names a state a worker cannot report.
func (r Report) Outcome() (o Outcome, ok bool, err error) {
	switch r.State {
	case domain.StateSucceeded:
		res, err := CompactResult(r.Result)
		if err != nil {
			return Outcome{}, false, err
		}
		return Outcome{Kind: Succeeded, Result: res}, true, nil
	case domain.StateFailed:
		if r.Error == nil {
			return Outcome{}, false, inputErr("error", `state "failed" needs an error with a message`)
		}
		return Outcome{Kind: Failed, Error: *r.Error, Permanent: r.Retryable != nil && !*r.Retryable}, true, nil
	case domain.StateQueued:
		reason := r.Reason
		if reason == "" {
			reason = "given back by the worker"
		}
		return Outcome{Kind: GivenBack, Reason: reason}, true, nil
	case StateRetryLater:
		if r.Delay < 0 {
			return Outcome{}, false, valueErr("delay", r.Delay, "must not be negative")
		}
		if err := CheckReason("reason", r.Reason); err != nil {
			return Outcome{}, false, err
		}
		return Outcome{Kind: RetryingLater, Delay: r.Delay, Reason: r.Reason}, true, nil
	case domain.StateWaiting:
		if r.Plan == nil {
			return Outcome{}, false, inputErr("fanout", `state "waiting" needs a fanout`)
		}
		return Outcome{Kind: Waiting, Plan: r.Plan}, true, nil
	case domain.StateRunning:
		return Outcome{}, false, nil
	}
	return Outcome{}, false, fmt.Errorf("a worker reports running, succeeded, failed, queued, retry_later or waiting, not %s: %w", r.State, ErrInvalidTransition)
}

// CheckReport decides a remote worker's report (its state, and progress
// that comes with it) against j as it is, writing nothing: the worker must
// hold the job and the lifecycle must allow the move. The writes decide
// again, revision-checked; this check is what keeps a report refused as a
// whole from writing part of itself.
func CheckReport(j *domain.Job, worker string, r Report, progress *domain.Progress, now time.Time) error {
	if err := CheckHolder(j, worker); err != nil {
		return err
	}
	if progress != nil {
		if _, err := Progress(j, *progress, worker, now); err != nil {
			return err
		}
	}
	if r.Event != nil {
		if _, err := r.Event.Decide(j, worker, now); err != nil {
			return err
		}
	}
	if r.State == "" {
		return nil
	}
	o, ends, err := r.Outcome()
	if err != nil {
		return fmt.Errorf("job %s: %w", j.ID, err)
	}
	if !ends {
		_, err = Start(j, worker, j.LeaseItem, now)
		return err
	}
	_, err = o.Decide(j, worker, now, 0)
	return err
}

// WriteOffLease decides that j lost its lease: requeued, or failed once
// it lost MaxLeaseRequeues leases (LeaseLost). b is the holder's last
// heartbeat as read when j was as judged says. It is refused unless j is
// still held by the same attempt of the same holder under the same work item
// (an item redelivered to another worker can carry the job's next attempt:
// b would be the wrong holder's) and its lease ran out by b (LeaseExpired):
// the sweeper and a claimer that judged a lease on an earlier read decide
// again on the job as it is.
func WriteOffLease(j, judged *domain.Job, b Beat, lease time.Duration, actor string, now time.Time) (*domain.Event, error) {
	if !Held(j) || j.LeaseItem != judged.LeaseItem || j.Worker != judged.Worker || j.Attempt != judged.Attempt ||
		!LeaseExpired(j, b, lease, now) {
		return nil, &TransitionError{JobID: j.ID, Event: domain.EvLeaseExpiredRequeue, From: j.State, To: domain.StateQueued}
	}
	return LeaseLost(j, actor, now)
}

// Retry is the submit of a new run of terminal job j: the original spec
// (type, payload, queue, namespace and every option) with retry_of naming
// j. Not copied: the parent (a finished fan-out takes no new children),
// the idempotency key (it names the original) and the schedule (the retry
// runs now). A job that is not terminal is refused (ErrInvalidTransition):
// it can still end on its own, or be cancelled first.
//
// With failedPieces, j must be a fan-out some of whose pieces did not
// succeed: the new run's coordinator fans out again and only those pieces
// are made; the ones that succeeded in j are carried over as succeeded
// (FailedPieces in the spec; the store's MakePieces carries them).
func Retry(j *domain.Job, idempotencyKey string, failedPieces bool) (*SubmitRequest, error) {
	if !j.State.Terminal() {
		return nil, fmt.Errorf("retry job %s: it is %s; only a succeeded, failed or cancelled job can be retried: %w",
			j.ID, j.State, ErrInvalidTransition)
	}
	if j.Spec.Workflow != nil {
		return nil, fmt.Errorf("retry job %s: it is a workflow; resume it with POST /api/v1/workflows/%s/retry (jetflow workflow retry): %w",
			j.ID, j.ID, ErrInvalidTransition)
	}
	if failedPieces {
		switch {
		case j.Fanout == nil:
			return nil, &InputError{Field: "failed_pieces", Reason: fmt.Sprintf("job %s did not fan out: retry it whole", j.ID)}
		case j.Fanout.Counts.Succeeded >= j.Fanout.Plan.Total:
			return nil, &InputError{Field: "failed_pieces", Reason: fmt.Sprintf("all %d pieces of job %s succeeded: none to run again", j.Fanout.Plan.Total, j.ID)}
		}
	}
	s := j.Spec
	dur := func(d time.Duration) *Duration { v := Duration(d); return &v }
	maxRetries, maxLease, jitter := s.MaxRetries, s.MaxLeaseRequeues, s.Jitter
	req := &SubmitRequest{
		Namespace: s.Namespace, Type: s.Type, Payload: RawJSON(s.Payload), Queue: s.Queue,
		MaxRetries: &maxRetries, Backoff: dur(s.Backoff), BackoffCap: dur(s.BackoffCap), Jitter: &jitter,
		Timeout: dur(s.Timeout), Tags: append([]string(nil), s.Tags...), RetryOf: j.ID, Priority: s.Priority,
		RetryOn: append([]string(nil), s.RetryOn...), NoRetryOn: append([]string(nil), s.NoRetryOn...),
		MaxLeaseRequeues: &maxLease, IdempotencyKey: idempotencyKey,
		User:           s.User, // it runs for the same user (quotas)
		ConcurrencyKey: s.ConcurrencyKey, FailedPieces: failedPieces,
	}
	if s.QueueTimeout > 0 {
		req.QueueTimeout = dur(s.QueueTimeout)
	}
	return req, nil
}
