package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
)

// How an attempt's end is told: a handler the runtime stopped because it
// found its lease lost did not fail (if its attempt still holds the job
// after all, the job goes back to its queue, no retry spent); one stopped
// by a cancel or its timeout, or that failed, failed.
func TestClassifyOutcome(t *testing.T) {
	handlerErr := errors.New("boom")
	for _, c := range []struct {
		name        string
		result      []byte
		herr, cause error
		kind        commands.OutcomeKind
		code        string
	}{
		{"succeeded", []byte(`1`), nil, nil, commands.Succeeded, ""},
		{"succeeded after the lease was thought lost", []byte(`1`), nil, errLeaseLost, commands.Succeeded, ""},
		{"failed", nil, handlerErr, nil, commands.Failed, CodeError},
		{"shut down", nil, context.Canceled, ErrShutdown, commands.GivenBack, ""},
		{"lease lost", nil, fmt.Errorf("stopped: %w", errLeaseLost), errLeaseLost, commands.GivenBack, ""},
		{"lease lost, the handler's own error", nil, handlerErr, errLeaseLost, commands.GivenBack, ""},
		{"lease lost, a fan-out", nil, &FanOut{}, errLeaseLost, commands.GivenBack, ""},
		{"cancelled, a fan-out", nil, &FanOut{}, ErrJobCancelled, commands.Failed, CodeError},
		{"cancelled", nil, ErrJobCancelled, ErrJobCancelled, commands.Failed, CodeError},
		{"timed out", nil, ErrTimeout, ErrTimeout, commands.Failed, CodeTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			o, fo := classifyOutcome(c.result, c.herr, c.cause, time.Second)
			if o.Kind != c.kind || fo != nil || (c.code != "" && o.Error.Code != c.code) {
				t.Fatalf("outcome %+v (fan-out %v), want %v %s", o, fo, c.kind, c.code)
			}
		})
	}
}
