package gateway

import (
	"time"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// attemptError is what one attempt of a job ended with, when it failed:
// from the job's events (a retry, a failure, a lost lease, a stall), with
// the error's stack when the handler's runtime recorded one (a panic).
type attemptError struct {
	Attempt int       `json:"attempt"`
	Event   string    `json:"event"` // job.retry_scheduled, job.failed, ...
	Time    time.Time `json:"time"`
	Code    string    `json:"code,omitempty"`
	Message string    `json:"message"`
	Stack   string    `json:"stack,omitempty"`
}

// maxAttemptErrors bounds the attempts a job's page lists.
const maxAttemptErrors = 200

// withAttempt adds the error an event records, if any, to a job's list.
func withAttempt(list []attemptError, v *projections.EventView) []attemptError {
	if v.Error == nil || len(list) >= maxAttemptErrors || v.Type == domain.EvCancelled {
		return list
	}
	return append(list, attemptError{Attempt: v.Attempt, Event: v.Type, Time: v.Time, Code: v.Error.Code,
		Message: v.Error.Message, Stack: v.Error.Stack})
}
