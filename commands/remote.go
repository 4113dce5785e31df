package commands

import (
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jetflow/jetflow/internal/domain"
)

// The rules that a worker outside any jetflow process (the HTTP worker
// protocol) is held to, next to those of Report and CheckReport: its
// deadline, its own events, what a parent's end means for its children.

// StateRetryLater is the report of a remote worker whose handler asks to
// run again later without using up a retry (Go's retryLater): not a state a
// job is ever in, but a report that moves it running -> scheduled (or
// queued when the delay is 0), job.retry_later.
const StateRetryLater domain.State = "retry_later"

// DeadlineGrace is how long after its deadline the attempt of a worker
// outside the process is ended as TIMEOUT (timeOut): its worker was told the
// deadline, and the clocks of workers, gateways and engines differ a little.
const DeadlineGrace = 2 * time.Second

// Deadline is when the execution timeout of held job j's attempt ends: its
// start plus its timeout, or, claimed and not started yet, its claim plus
// its timeout. ok is false for a job that is not held.
func Deadline(j *domain.Job) (deadline time.Time, ok bool) {
	var since time.Time
	switch j.State {
	case domain.StateRunning:
		since = j.StartedAt
	case domain.StateClaimed:
		since = j.ClaimedAt
	default:
		return time.Time{}, false
	}
	if since.IsZero() {
		since = j.UpdatedAt // a record written before claims kept their time
	}
	return since.Add(j.Spec.Timeout), true
}

// TimedOut reports whether held job j is past its deadline by more than
// grace at now.
func TimedOut(j *domain.Job, grace time.Duration, now time.Time) bool {
	d, ok := Deadline(j)
	return ok && now.Sub(d) > grace
}

// HeldRemotely reports whether j is held by a worker outside any jetflow
// process (claimed over HTTP): its work item's ack subject is in its record,
// and nothing but the engine ends its attempt at its deadline.
func HeldRemotely(j *domain.Job) bool { return Held(j) && j.LeaseAck != "" }

// timeOut ends the attempt of held job j whose deadline passed more than
// grace ago, as a failure with code TIMEOUT: retried with backoff while
// the job has retries left and its retry_on / no_retry_on let TIMEOUT
// through (job.retry_scheduled), else failed for good (job.failed; a
// claimed job that never started fails for good). It is refused
// (ErrInvalidTransition) for a job that is not held or not past it: a
// sweeper that judged an earlier read decides again on the job as it is.
func timeOut(j *domain.Job, grace time.Duration, actor string, now time.Time, jitter float64) (*domain.Event, error) {
	if !TimedOut(j, grace, now) {
		return nil, &TransitionError{JobID: j.ID, Event: domain.EvFailed, From: j.State, To: domain.StateFailed}
	}
	return Fail(j, domain.JobError{Code: CodeTimeout, Message: fmt.Sprintf(
		"execution timeout of %s passed (and %s grace) before the worker reported", j.Spec.Timeout, grace)},
		true, actor, now, jitter)
}

// TimeOutHeld is timeOut of the attempt a remote worker holds under work
// item item: refused (ErrInvalidTransition) once the job is no longer held
// remotely under that item (it was reported, released or written off
// since it was seen).
func TimeOutHeld(j *domain.Job, item uint64, grace time.Duration, actor string, now time.Time, jitter float64) (*domain.Event, error) {
	if !HeldRemotely(j) || j.LeaseItem != item {
		return nil, &TransitionError{JobID: j.ID, Event: domain.EvFailed, From: j.State, To: domain.StateFailed}
	}
	return timeOut(j, grace, actor, now, jitter)
}

// BatchOutcome is the outcome a remote worker's report of a batch tells:
// succeeded, failed or retry_later, and no result (a batch has none); any
// other report is refused (*InputError).
func (r Report) BatchOutcome() (Outcome, error) {
	switch r.State {
	case domain.StateSucceeded, domain.StateFailed, StateRetryLater:
	default:
		return Outcome{}, &InputError{Field: "state", Value: fmt.Sprintf("%q", r.State),
			Reason: "a batch reports succeeded, failed or retry_later"}
	}
	if len(r.Result) > 0 {
		return Outcome{}, &InputError{Field: "result", Reason: "a batch has no result"}
	}
	o, _, err := r.Outcome()
	return o, err
}

// Bounds of a handler's own event (job.event).
const (
	maxEventName    = 128
	maxEventMessage = 4096
	maxEventFields  = 64
)

// CheckEvent checks a handler's own event and returns its level ("":
// info): a name of 1-maxEventName bytes, a level of info, warning or
// error, a message of at most maxEventMessage bytes, at most
// maxEventFields fields.
func CheckEvent(name, level, message string, fields map[string]any) (string, error) {
	switch level {
	case "":
		level = domain.LevelInfo
	case domain.LevelInfo, domain.LevelWarning, domain.LevelError:
	default:
		return "", valueErr("level", level, "want info, warning or error")
	}
	if name == "" || len(name) > maxEventName || !utf8.ValidString(name) {
		return "", inputErr("name", "want 1-%d bytes of UTF-8", maxEventName)
	}
	if len(message) > maxEventMessage {
		return "", inputErr("message", "%d bytes: at most %d", len(message), maxEventMessage)
	}
	if len(fields) > maxEventFields {
		return "", inputErr("fields", "%d of them: at most %d", len(fields), maxEventFields)
	}
	return level, nil
}

// EventReport is a handler's own event as a remote worker reports it.
type EventReport struct {
	Name    string
	Level   string
	Message string
	Fields  map[string]any
}

// Decide checks the event and returns it as job.event on j: refused
// unless j is in a state that takes one (claimed, running, waiting).
func (e *EventReport) Decide(j *domain.Job, actor string, now time.Time) (*domain.Event, error) {
	level, err := CheckEvent(e.Name, e.Level, e.Message, e.Fields)
	if err != nil {
		return nil, prefixField("event", err)
	}
	return Emit(j, e.Name, level, e.Message, e.Fields, actor, now)
}

// prefixField names a nested field of an input error: "event" and "name"
// make "event.name".
func prefixField(prefix string, err error) error {
	if in, ok := err.(*InputError); ok {
		named := *in
		named.Field = prefix + "." + in.Field
		return &named
	}
	return err
}

// ChildBlocked reports whether parent, terminal and not succeeded
// (cancelled, failed), keeps its children from running: a child linked to
// it by parent never starts, and its cascade cancels those still
// unfinished. A parent that succeeded leaves them be.
func ChildBlocked(parent *domain.Job) bool {
	return parent.State.Terminal() && parent.State != domain.StateSucceeded
}
