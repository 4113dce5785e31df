package commands

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// event builds an event that moves j to `to`, checked against Lifecycle.
func event(j *domain.Job, typ string, to domain.State, actor string, now time.Time) (*domain.Event, error) {
	if err := Check(j.ID, j.State, to, typ); err != nil {
		return nil, err
	}
	return &domain.Event{Type: typ, JobID: j.ID, Time: now, Attempt: j.Attempt, Actor: actor,
		Level: domain.LevelInfo, From: j.State, To: to}, nil
}

// Start records that worker started running j under the lease of the work
// item at queue stream sequence lease. It begins a new attempt.
func Start(j *domain.Job, worker string, lease uint64, now time.Time) (*domain.Event, error) {
	ev, err := event(j, domain.EvStarted, domain.StateRunning, worker, now)
	if err != nil {
		return nil, err
	}
	ev.Attempt = j.Attempt + 1
	ev.Lease = lease
	return ev, nil
}

// Claim records that a worker (over HTTP) claimed j without starting it yet.
func Claim(j *domain.Job, worker string, lease uint64, now time.Time) (*domain.Event, error) {
	ev, err := event(j, domain.EvClaimed, domain.StateClaimed, worker, now)
	if err != nil {
		return nil, err
	}
	ev.Lease = lease
	return ev, nil
}

// Succeed records the result of a finished job.
func Succeed(j *domain.Job, result []byte, actor string, now time.Time) (*domain.Event, error) {
	ev, err := event(j, domain.EvSucceeded, domain.StateSucceeded, actor, now)
	if err != nil {
		return nil, err
	}
	ev.Result = result
	return ev, nil
}

// Fail decides what a failed attempt leads to: a retry after backoff
// (scheduled, or queued when the delay is zero) while retries are left and
// the error is retryable, else failed for good. jitter is a number in [0,1)
// that spreads the delay; pass rand.Float64().
func Fail(j *domain.Job, jerr domain.JobError, retryable bool, actor string, now time.Time, jitter float64) (*domain.Event, error) {
	if j.State == domain.StateRunning && retryable && j.Retries < j.Spec.MaxRetries && shouldRetry(&j.Spec, jerr.Code) {
		delay := retryDelay(&j.Spec, j.Retries+1, jitter)
		ev, err := delayed(j, domain.EvRetryScheduled, delay, actor, now)
		if err != nil {
			return nil, err
		}
		ev.Level = domain.LevelWarning
		ev.Error = &jerr
		ev.Message = jerr.Message
		return ev, nil
	}
	ev, err := event(j, domain.EvFailed, domain.StateFailed, actor, now)
	if err != nil {
		return nil, err
	}
	ev.Level = domain.LevelError
	ev.Error = &jerr
	ev.Message = jerr.Message
	return ev, nil
}

// retryLater puts a running job back for delay without using up a retry.
func retryLater(j *domain.Job, delay time.Duration, reason, actor string, now time.Time) (*domain.Event, error) {
	ev, err := delayed(j, domain.EvRetryLater, delay, actor, now)
	if err != nil {
		return nil, err
	}
	ev.Message = reason
	ev.Fields = map[string]any{"delay_seconds": delay.Seconds()}
	return ev, nil
}

func delayed(j *domain.Job, typ string, delay time.Duration, actor string, now time.Time) (*domain.Event, error) {
	to := domain.StateQueued
	if delay > 0 {
		to = domain.StateScheduled
	}
	ev, err := event(j, typ, to, actor, now)
	if err != nil {
		return nil, err
	}
	if delay > 0 {
		ev.RunAt = now.Add(delay).UTC()
	}
	return ev, nil
}

// Cancel cancels j from any state that is not terminal. For a terminal job
// it returns an error matching ErrTerminal: the caller writes nothing.
func Cancel(j *domain.Job, reason, actor string, now time.Time) (*domain.Event, error) {
	if err := CheckReason("reason", reason); err != nil {
		return nil, err
	}
	if j.State.Terminal() {
		return nil, &TransitionError{JobID: j.ID, Event: domain.EvCancelled, From: j.State, To: domain.StateCancelled}
	}
	ev, err := event(j, domain.EvCancelled, domain.StateCancelled, actor, now)
	if err != nil {
		return nil, err
	}
	ev.Message = reason
	return ev, nil
}

// ErrSamePriority is Reprioritize's answer for a job that has the
// priority already: nothing to write.
var ErrSamePriority = errors.New("jetflow: the job has this priority already")

// Reprioritize gives j, which has not started, another priority
// (minPriority to maxPriority). A job that started, or ended, is refused
// with a *TransitionError; one of that priority already with
// ErrSamePriority.
func Reprioritize(j *domain.Job, priority int, actor string, now time.Time) (*domain.Event, error) {
	if priority < minPriority || priority > maxPriority {
		return nil, valueErr("priority", priority, "must be %d to %d", minPriority, maxPriority)
	}
	ev, err := event(j, domain.EvReprioritized, "", actor, now)
	if err != nil {
		return nil, err
	}
	if j.Spec.Priority == priority {
		return nil, ErrSamePriority
	}
	ev.Priority = &priority
	ev.Message = fmt.Sprintf("priority %d, was %d", priority, j.Spec.Priority)
	return ev, nil
}

// Requeue gives a claimed or running job back to its queue at once (a worker
// shutting down).
func Requeue(j *domain.Job, reason, actor string, now time.Time) (*domain.Event, error) {
	if err := CheckReason("reason", reason); err != nil {
		return nil, err
	}
	ev, err := event(j, domain.EvRequeued, domain.StateQueued, actor, now)
	if err != nil {
		return nil, err
	}
	ev.Message = reason
	return ev, nil
}

// LeaseLost decides what happens to a claimed or running job whose lease
// expired: requeued, or failed once it lost MaxLeaseRequeues leases.
func LeaseLost(j *domain.Job, actor string, now time.Time) (*domain.Event, error) {
	if j.LeaseRequeues >= j.Spec.MaxLeaseRequeues {
		ev, err := event(j, domain.EvLeaseExpired, domain.StateFailed, actor, now)
		if err != nil {
			return nil, err
		}
		ev.Level = domain.LevelError
		ev.Error = &domain.JobError{Code: "LEASE_EXPIRED", Message: "lease expired and the job was requeued the maximum number of times"}
		ev.Message = ev.Error.Message
		return ev, nil
	}
	ev, err := event(j, domain.EvLeaseExpiredRequeue, domain.StateQueued, actor, now)
	if err != nil {
		return nil, err
	}
	ev.Level = domain.LevelWarning
	ev.Message = "lease expired: the worker stopped renewing it"
	return ev, nil
}

// Due moves a scheduled job to its queue, or, in a queue with limits
// (limited), to pending, where it waits for a slot. A job due more than
// dueSlack later is not due yet (*NotDueError): the fired schedule that
// asks is one of an earlier delay of the job (a copy of it that a crash
// brought back), and its own schedule fires later.
func Due(j *domain.Job, limited bool, actor string, now time.Time) (*domain.Event, error) {
	if DueLater(j.State) && j.RunAt.After(now.Add(dueSlack)) {
		return nil, &NotDueError{JobID: j.ID, RunAt: j.RunAt}
	}
	if limited {
		ev, err := event(j, domain.EvPending, domain.StatePending, actor, now)
		if err != nil {
			return nil, err
		}
		ev.Message = "due; waits for a slot of queue " + j.Spec.Queue
		return ev, nil
	}
	return event(j, domain.EvDue, domain.StateQueued, actor, now)
}

// Progress records a handler's progress on j. It does not move the job.
func Progress(j *domain.Job, p domain.Progress, actor string, now time.Time) (*domain.Event, error) {
	if err := Check(j.ID, j.State, j.State, domain.EvProgress); err != nil {
		return nil, err
	}
	if err := CheckProgress(p.Current, p.Total, p.Message); err != nil {
		return nil, err
	}
	return &domain.Event{Type: domain.EvProgress, JobID: j.ID, Time: now, Attempt: j.Attempt, Actor: actor,
		Level: domain.LevelInfo, Message: p.Message, Progress: &p}, nil
}

// retryDelay is the backoff before retry n (1-based):
// min(base*2^(n-1), cap), spread by +-jitter*delay. u is in [0,1).
func retryDelay(s *domain.Spec, n int, u float64) time.Duration {
	if s.Backoff <= 0 || n < 1 {
		return 0
	}
	d := float64(s.Backoff) * math.Pow(2, float64(n-1))
	if limit := float64(s.BackoffCap); limit > 0 && d > limit {
		d = limit
	}
	if s.Jitter > 0 {
		d += d * s.Jitter * (2*u - 1)
	}
	if d < 0 {
		d = 0
	}
	return time.Duration(d)
}

// Jitter returns a random number for retryDelay.
func Jitter() float64 { return rand.Float64() }

func shouldRetry(s *domain.Spec, code string) bool {
	if code != "" && slices.Contains(s.NoRetryOn, code) {
		return false
	}
	if len(s.RetryOn) > 0 {
		return slices.Contains(s.RetryOn, code)
	}
	return true
}

// CheckHolder returns ErrNotClaimant unless j is claimed or running by
// worker: the guard of reports from workers outside the process (HTTP),
// whose identity is their worker id. A report on a terminal job is refused
// for the job's state, whoever sends it: a *TransitionError (ErrTerminal),
// which names that state.
func CheckHolder(j *domain.Job, worker string) error {
	if Held(j) && j.Worker == worker {
		return nil
	}
	if j.State.Terminal() {
		return &TransitionError{JobID: j.ID, Event: "report", From: j.State}
	}
	return fmt.Errorf("job %s is %s, held by %q: %w", j.ID, j.State, j.Worker, ErrNotClaimant)
}

// CheckClaimant returns ErrNotClaimant unless j is claimed or running under
// the lease of worker's work item in the given attempt: the guard that keeps
// a zombie worker (one whose lease went to another) from changing the job.
func CheckClaimant(j *domain.Job, worker string, lease uint64, attempt int) error {
	if Held(j) && j.Worker == worker && j.LeaseItem == lease && j.Attempt == attempt {
		return nil
	}
	if j.State.Terminal() {
		return fmt.Errorf("job %s is %s: %w", j.ID, j.State, ErrNotClaimant)
	}
	return fmt.Errorf("job %s is %s, held by %q (attempt %d): %w", j.ID, j.State, j.Worker, j.Attempt, ErrNotClaimant)
}

// Emit records a handler's own event (name, level, message, fields) on j. It
// does not move the job.
func Emit(j *domain.Job, name, level, message string, fields map[string]any, actor string, now time.Time) (*domain.Event, error) {
	if err := Check(j.ID, j.State, j.State, domain.EvCustom); err != nil {
		return nil, err
	}
	return &domain.Event{Type: domain.EvCustom, JobID: j.ID, Time: now, Attempt: j.Attempt, Actor: actor,
		Name: name, Level: level, Message: message, Fields: fields}, nil
}
