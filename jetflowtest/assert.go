package jetflowtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
)

// RunJob runs one job of jobType with payload through the real worker
// runtime (claim, the handler, the recording of its outcome) and returns
// the job as its first attempt left it: succeeded, failed, scheduled for a
// retry or a retry later, waiting for its pieces, or cancelled. It runs on
// env (a fresh one when env is nil), on a queue of its own, with a worker
// that serves that queue only and is stopped before RunJob returns. The job
// is submitted with MaxRetries(0) unless opts say otherwise.
func RunJob[T, R any](t testing.TB, env *Env, jobType string, fn func(context.Context, *jetflow.Job[T]) (R, error), payload T, opts ...jetflow.SubmitOption) *jetflow.JobInfo {
	t.Helper()
	if env == nil {
		env = New(t)
	}
	queue := fmt.Sprintf("runjob-%d", time.Now().UnixNano())
	w := jetflow.NewWorker(env.Client, jetflow.WorkerConfig{Queues: map[string]jetflow.QueueConfig{queue: {}}})
	jetflow.Register(w, jobType, fn, jetflow.OnQueue(queue))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatalf("jetflowtest.RunJob: start the worker: %v", err)
	}
	defer w.Stop(context.Background())
	all := append([]jetflow.SubmitOption{jetflow.MaxRetries(0)}, opts...)
	all = append(all, jetflow.Queue(queue))
	job, err := env.Client.Submit(ctx, jobType, payload, all...)
	if err != nil {
		t.Fatalf("jetflowtest.RunJob: submit: %v", err)
	}
	// The attempt's outcome is the first event that moves the job out of
	// running.
	var outcome error = fmt.Errorf("the job's history ended before its attempt's outcome")
	var outcomeSeq uint64
	err = env.Client.Follow(ctx, job.ID, func(e *jetflow.EventInfo) error {
		if e.From == jetflow.Running && e.To != "" {
			outcome, outcomeSeq = nil, e.Seq
			return errDone
		}
		return nil
	})
	if err != nil && err != errDone {
		t.Fatalf("jetflowtest.RunJob: follow job %s: %v", job.ID, err)
	}
	if outcome != nil {
		t.Fatalf("jetflowtest.RunJob: job %s: %v", job.ID, outcome)
	}
	// The record is projected from the log a moment after the event is
	// in it: wait until it has folded the outcome.
	for {
		done, err := env.Client.Get(ctx, job.ID)
		if err != nil {
			t.Fatalf("jetflowtest.RunJob: get job %s: %v", job.ID, err)
		}
		if done.Seq >= outcomeSeq {
			return done
		}
		select {
		case <-ctx.Done():
			t.Fatalf("jetflowtest.RunJob: job %s: its record never folded event %d: %v", job.ID, outcomeSeq, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

var errDone = fmt.Errorf("done")

// RequireSubmitted fails t unless at least one job of jobType matching f
// exists (f.Type is set to jobType), and returns them, newest first.
func RequireSubmitted(t testing.TB, client *jetflow.Client, jobType string, f jetflow.ListFilter) []*jetflow.JobInfo {
	t.Helper()
	f.Type = jobType
	jobs, err := client.List(context.Background(), f)
	if err != nil {
		t.Fatalf("jetflowtest.RequireSubmitted: %v", err)
	}
	if len(jobs) == 0 {
		t.Fatalf("jetflowtest.RequireSubmitted: no job of type %q matches %+v", jobType, f)
	}
	return jobs
}

// RequireEvents fails t unless job id's history is exactly the events of
// the types want (job.submitted, job.started, ...), in order, and returns
// the history.
func RequireEvents(t testing.TB, client *jetflow.Client, id string, want ...string) []*jetflow.EventInfo {
	t.Helper()
	evs, err := client.Events(context.Background(), id)
	if err != nil {
		t.Fatalf("jetflowtest.RequireEvents: job %s: %v", id, err)
	}
	got := make([]string, len(evs))
	for i, e := range evs {
		got[i] = e.Type
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("jetflowtest.RequireEvents: job %s:\n got  %s\n want %s", id, strings.Join(got, " "), strings.Join(want, " "))
	}
	return evs
}

// WaitFor calls cond until it returns nil, and fails t with cond's last
// error if that has not happened within timeout. It waits a little longer
// between calls each time (up to 50 ms): use it instead of sleeping.
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	delay := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("jetflowtest.WaitFor: not met after %s: %v", timeout, err)
		}
		time.Sleep(delay)
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}
