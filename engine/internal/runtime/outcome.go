package runtime

import (
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
)

// An attempt's end takes two steps, for jobs and batches, in this process
// and outside it:
//
//  1. classify: what a handler returned, and why its context ended, become
//     a commands.Outcome (classifyOutcome; a remote worker's report is one
//     already, commands.Report);
//  2. record: the outcome is decided on the job as it is (Outcome.Decide,
//     under the attempt's guard), appended, projected and dispatched
//     (Store.Apply), then the attempt's work item is settled
//     (Store.RecordOutcome). A batch's outcome is decided by commands.DecideBatch
//     and recorded as a piece event of its parent (Runtime.settleBatch).

// classifyOutcome tells how an attempt ended from its handler's result and error
// and the cause of its context's end: the one place where error kinds, a
// timeout and a panic are told apart. A *FanOut is returned as it is, for
// the runtime to make the pieces before the job waits.
func classifyOutcome(result []byte, herr, cause error, timeout time.Duration) (commands.Outcome, *FanOut) {
	var rl *RetryLaterError
	var fo *FanOut
	switch {
	case herr == nil:
		res, err := commands.CompactResult(result)
		if err == nil {
			return commands.Outcome{Kind: commands.Succeeded, Result: res}, nil
		}
		herr = &PermanentError{Err: fmt.Errorf("handler result: %w", err)}
	case errors.Is(cause, ErrShutdown):
		return commands.Outcome{Kind: commands.GivenBack, Reason: "worker shut down"}, nil
	case errors.Is(cause, errNotSeated):
		return commands.Outcome{Kind: commands.GivenBack, Reason: "claimed ahead of the worker's handlers, none freed in time: given back for another worker"}, nil
	case errors.Is(cause, errLeaseLost):
		// The runtime stopped the handler: it found its attempt no longer
		// holding the job. If it still does after all (the record it read
		// was behind the log), the job goes back to its queue, no retry
		// spent: its handler did not fail. If not, the write is refused.
		return commands.Outcome{Kind: commands.GivenBack, Reason: "the worker stopped the handler: it found its lease lost"}, nil
	case errors.As(herr, &rl):
		return commands.Outcome{Kind: commands.RetryingLater, Delay: rl.Delay, Reason: rl.Reason}, nil
	case errors.Is(herr, store.ErrParentGone):
		return commands.Outcome{Kind: commands.ParentEnded, Reason: store.ErrParentGone.Error()}, nil
	case errors.As(herr, &fo):
		if !errors.Is(cause, ErrJobCancelled) {
			return commands.Outcome{Kind: commands.Waiting}, fo
		}
		herr = cause // the attempt no longer holds its job: it makes no pieces
	}
	var perm *PermanentError
	var pe *panicError
	o := commands.Outcome{Kind: commands.Failed, Permanent: errors.As(herr, &perm),
		Error: domain.JobError{Code: errorCode(herr), Message: herr.Error()}}
	switch {
	case errors.Is(cause, ErrTimeout):
		o.Error = domain.JobError{Code: CodeTimeout, Message: fmt.Sprintf("execution timeout of %s passed: %v", timeout, herr)}
	case errors.As(herr, &pe):
		o.Error.Stack = pe.stack
	}
	return o, nil
}

// callHandler runs a handler, turning a panic into an error with its
// stack.
func callHandler(call func() ([]byte, error)) (result []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: string(debug.Stack())}
		}
	}()
	return call()
}

type panicError struct {
	value any
	stack string
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }
func (e *panicError) Code() string  { return CodePanic }
