package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetflow/jetflow"
)

// warnUnserved warns on stderr when no live worker serves the job's type
// in its queue: a typo of the type, or a worker not started, would
// otherwise leave the job waiting with nothing saying why. A client that
// cannot list workers (a token's) warns of nothing.
func (c *cli) warnUnserved(ctx context.Context, cl *jetflow.Client, job *jetflow.JobInfo) {
	if c.json || strings.HasPrefix(job.Type, "@internal:") { // the engine runs those itself
		return
	}
	workers, err := cl.Workers(ctx)
	if err != nil {
		return
	}
	if note := unservedNote(job, workers); note != "" {
		fmt.Fprintf(c.errw, "jetflow %s: warning: %s\n", c.name, note)
	}
}

// maxServedShown bounds the types a warning lists.
const maxServedShown = 8

// unservedNote says that no live worker serves the job's type in its
// queue, what the live workers of the queue serve, and the type that may
// have been meant; "" when a live worker serves it.
func unservedNote(job *jetflow.JobInfo, workers []*jetflow.WorkerInfo) string {
	var served []string
	for _, w := range workers {
		if !w.Live || (len(w.Queues) > 0 && !slices.Contains(w.Queues, job.Queue)) {
			continue
		}
		if slices.Contains(w.Types, job.Type) {
			return ""
		}
		served = append(served, w.Types...)
	}
	slices.Sort(served)
	served = slices.Compact(served)
	msg := fmt.Sprintf("no live worker serves %s in queue %s", job.Type, job.Queue)
	if len(served) == 0 {
		return msg + " (no live worker serves that queue; the job waits until one does)"
	}
	shown := served
	if len(shown) > maxServedShown {
		shown = append(slices.Clone(shown[:maxServedShown]), fmt.Sprintf("and %d more", len(served)-maxServedShown))
	}
	msg += " (workers serve: " + strings.Join(shown, ", ")
	if s := suggest(job.Type, served); s != "" {
		msg += "; did you mean " + s + "?"
	}
	return msg + ")"
}

// followAttempts prints, on stderr, each attempt's outcome as the job's
// events tell it, until the job ends or stop is called. stop waits (a
// little) for the lines of the events the job ended with, so that they
// come before what the caller prints next.
func (c *cli) followAttempts(ctx context.Context, cl *jetflow.Client, job *jetflow.JobInfo) (stop func()) {
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		a := attemptLines{maxRetries: job.MaxRetries}
		_ = cl.Follow(fctx, job.ID, func(e *jetflow.EventInfo) error {
			if line := a.line(e); line != "" {
				fmt.Fprintln(c.errw, line)
			}
			return nil
		})
	}()
	return func() {
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
		cancel()
		<-done
	}
}

// attemptLines turns a job's events into the lines of `submit --wait`.
type attemptLines struct {
	maxRetries int
	retries    int    // retries used so far
	waits      string // the last reason a pending job gave
}

func (a *attemptLines) line(e *jetflow.EventInfo) string {
	switch e.Type {
	case "job.retry_scheduled":
		a.retries++
		return fmt.Sprintf("attempt %d failed (%s); retry %d of %d %s", e.Attempt, errorText(e), a.retries, a.maxRetries, in(e))
	case "job.retry_later":
		return fmt.Sprintf("attempt %d asked to run again %s (%s); no retry used", e.Attempt, in(e), errorText(e))
	case "job.failed":
		if e.Attempt == 0 { // failed before any attempt (a fan-out's policy)
			return fmt.Sprintf("failed (%s)", errorText(e))
		}
		why := "not retried"
		if a.retries >= a.maxRetries {
			why = "no retries left"
		}
		return fmt.Sprintf("attempt %d failed (%s); %s", e.Attempt, errorText(e), why)
	case "job.lease_expired_requeue":
		return fmt.Sprintf("attempt %d lost its worker (its lease expired); the job is queued again", e.Attempt)
	case "job.lease_expired":
		return fmt.Sprintf("attempt %d lost its worker (its lease expired); no retries left", e.Attempt)
	case "job.requeued":
		return fmt.Sprintf("attempt %d stopped: its worker shut down; the job is queued again", e.Attempt)
	case "job.stalled":
		return fmt.Sprintf("stalled (%s)", errorText(e))
	case "job.pending":
		if e.Message != "" && e.Message != a.waits {
			a.waits = e.Message
			return "waiting: " + e.Message
		}
	}
	return ""
}

// errorText is an event's error: "CODE: message".
func errorText(e *jetflow.EventInfo) string {
	if e.Error == nil {
		if e.Message != "" {
			return e.Message
		}
		return "no reason given"
	}
	if e.Error.Code == "" {
		return e.Error.Message
	}
	return e.Error.Code + ": " + e.Error.Message
}

// in is when the job runs again: "in 30s", or "now".
func in(e *jetflow.EventInfo) string {
	if e.RunAt == nil {
		return "now"
	}
	d := e.RunAt.Sub(e.Time)
	switch {
	case d <= 0:
		return "now"
	case d < 10*time.Second:
		return "in " + max(d.Round(100*time.Millisecond), 100*time.Millisecond).String()
	}
	return "in " + d.Round(time.Second).String()
}
