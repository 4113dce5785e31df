package runtime

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/commands"
)

// PermanentError marks a handler error that must not be retried.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// RetryLaterError asks for the job to run again after Delay without using up
// a retry ("the GPU is busy").
type RetryLaterError struct {
	Delay  time.Duration
	Reason string
}

func (e *RetryLaterError) Error() string {
	return fmt.Sprintf("retry later (in %s): %s", e.Delay, e.Reason)
}

// codedError is an error with a stable code, matched against a job's
// retry_on and no_retry_on lists and shown as error.code.
type codedError interface {
	error
	Code() string
}

// Error codes the runtime assigns.
const (
	CodeError   = "ERROR"              // a handler error without a code of its own
	CodeTimeout = commands.CodeTimeout // the execution timeout passed
	CodePanic   = "PANIC"              // the handler panicked
)

// Causes of a handler's context being cancelled by the runtime.
var (
	// ErrJobCancelled: the job was cancelled while its handler ran.
	ErrJobCancelled = errors.New("jetflow: job cancelled")
	// errLeaseLost: the job's lease went to another worker.
	errLeaseLost = errors.New("jetflow: lease lost")
	// ErrShutdown: the worker is shutting down; the job will be requeued.
	ErrShutdown = errors.New("jetflow: worker shutting down")
	// errNotSeated: a job claimed ahead of the handlers found no free
	// slot in time (ahead.go): it goes back to its queue.
	errNotSeated = errors.New("jetflow: claimed ahead, no handler slot freed in time")
	// ErrTimeout: the job's execution timeout passed.
	ErrTimeout = errors.New("jetflow: execution timeout")
)

func errorCode(err error) string {
	var ce codedError
	if errors.As(err, &ce) && ce.Code() != "" {
		return ce.Code()
	}
	return CodeError
}
