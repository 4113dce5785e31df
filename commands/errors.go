package commands

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// Sentinel errors. Match them with errors.Is; the concrete errors below carry
// the details.
var (
	// ErrInvalidTransition: the lifecycle table does not allow the move.
	ErrInvalidTransition = errors.New("invalid transition")
	// ErrInvalidInput: a command is malformed (bad name, payload, option).
	ErrInvalidInput = errors.New("invalid input")
	// ErrTerminal: the job is already succeeded, failed or cancelled. Cancel
	// treats it as a no-op that writes nothing.
	ErrTerminal = errors.New("job is terminal")
	// ErrNotFound: no job has the id (or no queue the name, ...): the
	// error that wraps it says what was looked for.
	ErrNotFound = errors.New("not found")
	// ErrConflict: another writer changed the job first; re-read and retry.
	ErrConflict = domain.ErrConflict
	// ErrStale: the record already says what the command would record
	// (e.g. fan-in counts up to a later piece event): nothing to write.
	ErrStale = errors.New("stale: the record is ahead")
	// ErrNotClaimant: the writer does not hold the job's lease (a zombie
	// worker, or a worker reporting on a job it never claimed).
	ErrNotClaimant = errors.New("not the claimant of the job")
)

// TransitionError is a refused move of one job.
type TransitionError struct {
	JobID string
	Event string
	From  domain.State
	To    domain.State
}

func (e *TransitionError) Error() string {
	from := string(e.From)
	if from == "" {
		from = "(new)"
	}
	if e.To == "" && e.From.Terminal() {
		return fmt.Sprintf("job %s is %s: nothing moves a terminal job (%s refused)", e.JobID, from, e.Event)
	}
	return fmt.Sprintf("job %s: %s: %s -> %s is not allowed", e.JobID, e.Event, from, e.To)
}

// Is makes errors.Is(err, ErrInvalidTransition) hold; a refusal because the
// job is terminal also matches ErrTerminal.
func (e *TransitionError) Is(target error) bool {
	return target == ErrInvalidTransition || (target == ErrTerminal && e.From.Terminal())
}

// InputError is a malformed command: which field, and why.
type InputError struct {
	Field  string
	Reason string
	// Value is the refused value as it was given (a string quoted), when
	// the reason does not say it: a CLI names its flag and value instead of
	// the field, followed by the reason.
	Value string
	// Err, if set, is a more specific error the refusal also matches
	// (errors.Is), such as errInvalidNamespace.
	Err error
}

// Unwrap returns the more specific error, if any.
func (e *InputError) Unwrap() error { return e.Err }

func (e *InputError) Error() string {
	field := e.Field
	if field == "" { // a value refused where it was decoded, before its field was known
		field = "value"
	}
	if e.Value != "" {
		return fmt.Sprintf("invalid %s %s: %s", field, e.Value, e.Reason)
	}
	return fmt.Sprintf("invalid %s: %s", field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalidInput) hold.
func (e *InputError) Is(target error) bool { return target == ErrInvalidInput }

func inputErr(field, format string, args ...any) error {
	return &InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// valueErr is an InputError that names the refused value.
func valueErr(field string, value any, format string, args ...any) error {
	v := fmt.Sprint(value)
	if s, ok := value.(string); ok {
		v = fmt.Sprintf("%q", s)
	}
	return &InputError{Field: field, Value: v, Reason: fmt.Sprintf(format, args...)}
}

// dueSlack is how much earlier than its run_at a job may be promoted: what
// a message schedule's precision (about a second) and clocks that differ a
// little between the server and an engine make early.
const dueSlack = 2 * time.Second

// NotDueError is Due's answer for a job whose run_at is more than dueSlack
// away: the promoter asks again then.
type NotDueError struct {
	JobID string
	RunAt time.Time
}

func (e *NotDueError) Error() string {
	return fmt.Sprintf("job %s is due at %s, not yet", e.JobID, e.RunAt.Format(time.RFC3339Nano))
}
