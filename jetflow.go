// Package jetflow is an event-sourced job engine on NATS JetStream.
//
// Every transition of a job is an event appended to the job's subject of
// the event log; the state of every job is a projection of its events kept
// in a KV bucket; work-queue streams dispatch runnable jobs to workers, and
// message schedules hold delayed ones.
//
// A Client submits jobs and follows them; a Worker runs handlers for job
// types:
//
//	client, _ := jetflow.Connect(ctx, "nats://127.0.0.1:4222")
//	job, _ := client.Submit(ctx, "email.send", Email{To: "a@example.com"}, jetflow.MaxRetries(5))
//
//	w := jetflow.NewWorker(client, jetflow.WorkerConfig{})
//	jetflow.Register(w, "email.send", func(ctx context.Context, job *jetflow.Job[Email]) (Sent, error) { ... })
//	w.Run(ctx)
//
// The machinery lives in the packages below: commands decides, streams
// writes and reads JetStream, projections folds events into state, engine
// runs workers and background components.
package jetflow

import (
	"errors"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
)

// Errors returned by the Client and Worker; match them with errors.Is.
var (
	ErrNotFound = commands.ErrNotFound
	// ErrDenied: a token client's token is not valid (unauthenticated),
	// or its role or namespace does not allow the call (forbidden).
	ErrDenied            = commands.ErrDenied
	ErrInvalidInput      = commands.ErrInvalidInput
	ErrInvalidTransition = commands.ErrInvalidTransition
	ErrTerminal          = commands.ErrTerminal
	ErrConflict          = commands.ErrConflict
	ErrNotClaimant       = commands.ErrNotClaimant
	// ErrJobCancelled is the cause of a handler's context when its job was
	// cancelled (context.Cause).
	ErrJobCancelled = engine.ErrJobCancelled
	// ErrShutdown is the cause of a handler's context when its worker stops
	// and the job is handed to another worker.
	ErrShutdown = engine.ErrShutdown
	// ErrTimeout is the cause of a handler's context when the job's
	// execution timeout passed.
	ErrTimeout = engine.ErrTimeout
)

// Permanent marks a handler error that must not be retried: the job fails
// at once.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &engine.PermanentError{Err: err}
}

// RetryLater asks for the job to run again after delay without using up a
// retry; reason is recorded in the job.retry_later event.
func RetryLater(delay time.Duration, reason string) error {
	if delay < 0 {
		delay = 0
	}
	return &engine.RetryLaterError{Delay: delay, Reason: reason}
}

// WithCode gives a handler error a stable code, which the job's retry_on and
// no_retry_on lists match and error.code shows.
func WithCode(code string, err error) error {
	if err == nil {
		err = errors.New(code)
	}
	return &codedError{code: code, err: err}
}

type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string { return e.err.Error() }
func (e *codedError) Unwrap() error { return e.err }
func (e *codedError) Code() string  { return e.code }
