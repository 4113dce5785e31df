package process

import (
	"encoding/json"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

const (
	evSubmitted = domain.EvSubmitted
	evStarted   = domain.EvStarted
	evSucceeded = domain.EvSucceeded
	evRetry     = domain.EvRetryScheduled
	evDue       = domain.EvDue
	evRequeue   = domain.EvLeaseExpiredRequeue
	evCancelled = domain.EvCancelled
)

// A worker process killed between two writes of a claim or of an attempt's
// outcome (JETFLOW_CRASH_AT makes it SIGKILL itself there): another worker
// and the engine's projector repair what it left, and the job reaches
// exactly one terminal state with the history below.
func TestWorkerCrashPoints(t *testing.T) {
	echo := []string{evSubmitted, evStarted, evSucceeded}
	requeued := []string{evSubmitted, evStarted, evRequeue, evStarted, evSucceeded}
	retried := []string{evSubmitted, evStarted, evRetry, evStarted, evSucceeded}
	for _, tc := range []struct {
		name, point, typ, payload string
		backoff                   time.Duration
		want                      []string
		finisher                  string // who wrote the terminal event
	}{
		// job.started is in the log, the record still says queued: the item
		// comes back after the lease, the next worker sees the job held
		// under that very item and requeues it before claiming it.
		{"claim-appended", "claim:appended", "demo.echo", `{"n":1}`, 0, requeued, "B"},
		{"claim-projected", "claim:projected", "demo.echo", `{"n":1}`, 0, requeued, "B"},
		{"claim-done", "claim:done", "demo.echo", `{"n":1}`, 0, requeued, "B"},
		// A handler past store.ClaimRecordAfter: the claim's record was
		// written by the runtime, then the worker died.
		{"claim-recorded", "claim:recorded", "demo.sleep", `{"seconds":0.5}`, 0, requeued, "B"},
		// job.succeeded is in the log: the projector completes the record
		// and the redelivered item finds a finished job.
		{"complete-appended", "complete:appended", "demo.echo", `{"n":1}`, 0, echo, "A"},
		{"complete-projected", "complete:projected", "demo.echo", `{"n":1}`, 0, echo, "A"},
		{"complete-dispatched", "complete:dispatched", "demo.echo", `{"n":1}`, 0, echo, "A"},
		// A retry without delay: requeued in the log and the record, no
		// new item yet (the projector sends it), or a new item and the old
		// one unacked (one of the two claims, the other is dropped).
		{"retry-projected", "complete:projected", "demo.fail", `{"times":1}`, 0, retried, "B"},
		{"retry-dispatched", "complete:dispatched", "demo.fail", `{"times":1}`, 0, retried, "B"},
		// A retry after a backoff: its schedule was never published; the
		// projector publishes it and the promoter makes it due.
		{"retry-schedule-lost", "complete:projected", "demo.fail", `{"times":1}`, time.Second,
			[]string{evSubmitted, evStarted, evRetry, evDue, evStarted, evSucceeded}, "B"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startSystem(t)
			victim := s.worker("A", []string{"JETFLOW_CRASH_AT=" + tc.point})
			job, err := s.client.Submit(testkit.Ctx(t), tc.typ, json.RawMessage(tc.payload), jetflow.Backoff(tc.backoff), jetflow.Jitter(0))
			if err != nil {
				t.Fatal(err)
			}
			wantKilled(t, victim)
			s.worker("B", nil)
			done := testkit.WaitTerminal(t, s.client, job.ID, 30*time.Second)
			if done.State != jetflow.Succeeded || done.Worker != tc.finisher {
				t.Fatalf("job ended %s under %q, want succeeded under %s", done.State, done.Worker, tc.finisher)
			}
			evs := s.wantEvents(job.ID, tc.want...)
			if last := evs[len(evs)-1]; last.Actor != tc.finisher {
				t.Fatalf("%s written by %q, want %s", last.Type, last.Actor, tc.finisher)
			}
			s.waitDrained("default")
			s.wantEvents(job.ID, tc.want...) // and nothing was written since
			s.verify()
		})
	}
}

// The submitting process (the CLI) killed after job.submitted is in the
// log, or after the record too: the projector builds the record and sends
// the work item, the job runs once, and submitting again with the same
// idempotency key returns that job without writing anything.
func TestSubmitCrashPoints(t *testing.T) {
	for _, point := range []string{"submit:appended", "submit:projected"} {
		t.Run(strings.ReplaceAll(point, ":", "-"), func(t *testing.T) {
			t.Parallel()
			s := startSystem(t)
			s.worker("B", nil)
			const key = "order-42"
			_, sig, out := s.cli([]string{"JETFLOW_CRASH_AT=" + point}, "submit", "demo.echo", `{"order":42}`, "--key", key)
			if sig != syscall.SIGKILL {
				t.Fatalf("submit was not killed at %s:\n%s", point, out)
			}
			id := domain.KeyedID(domain.DefaultNS, key)
			// The record appears without any reader repairing it: the
			// projector built it (submit:appended) or it was there.
			ctx := testkit.Ctx(t)
			testkit.WaitFor(t, 20*time.Second, func() error {
				_, err := testkit.StoreOf(t, s.client).Record(ctx, id)
				return err
			})
			done := testkit.WaitTerminal(t, s.client, id, 30*time.Second)
			if done.State != jetflow.Succeeded || string(done.Result) != `{"order":42}` {
				t.Fatalf("job %+v", done)
			}
			s.wantEvents(id, evSubmitted, evStarted, evSucceeded)

			code, _, out := s.cli(nil, "submit", "demo.echo", `{"order":42}`, "--key", key, "--json")
			var again jetflow.JobInfo
			if err := json.Unmarshal([]byte(out), &again); code != 0 || err != nil || again.ID != id || again.State != jetflow.Succeeded {
				t.Fatalf("submit again exited %d: %s", code, out)
			}
			s.wantEvents(id, evSubmitted, evStarted, evSucceeded)
			s.waitDrained("default")
			s.verify()
		})
	}
}

// The CLI killed after job.cancelled is in the log, before the record and
// before it told the workers: a queued job is cancelled in its record by
// the projector; a running job's handler is cancelled by its worker, which
// notices at its next lease renewal, and its result is discarded.
func TestCancelCrashPoint(t *testing.T) {
	s := startSystem(t)
	crash := []string{"JETFLOW_CRASH_AT=cancel:appended"}
	ctx := testkit.Ctx(t)

	queued, err := s.client.Submit(ctx, "nobody.runs.this", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, sig, out := s.cli(crash, "cancel", queued.ID); sig != syscall.SIGKILL {
		t.Fatalf("cancel was not killed:\n%s", out)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		snap, err := testkit.StoreOf(t, s.client).Record(ctx, queued.ID)
		if err != nil {
			return err
		}
		if snap.Job.State != domain.StateCancelled {
			return testkit.Errorf("record says %s", snap.Job.State)
		}
		return nil
	})
	s.wantEvents(queued.ID, evSubmitted, evCancelled)

	w := s.worker("B", nil)
	running, err := s.client.Submit(ctx, "demo.sleep", map[string]int{"seconds": 600})
	if err != nil {
		t.Fatal(err)
	}
	s.waitRunning(running.ID, "B")
	if _, sig, out := s.cli(crash, "cancel", running.ID); sig != syscall.SIGKILL {
		t.Fatalf("cancel was not killed:\n%s", out)
	}
	w.WaitOutput(t, 20*time.Second, "attempt result discarded")
	if j := testkit.WaitTerminal(t, s.client, running.ID, 10*time.Second); j.State != jetflow.Cancelled {
		t.Fatalf("job %s", j.State)
	}
	// The worker settled the item: nothing is held or waiting.
	testkit.WaitFor(t, 10*time.Second, func() error {
		c, err := testkit.StoreOf(t, s.client).JS.Consumer(ctx, streams.QueueStream("default"), engine.ConsumerName("demo.sleep"))
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return testkit.Errorf("%d held, %d waiting", info.NumAckPending, info.NumPending)
		}
		return nil
	})
	s.wantEvents(running.ID, evSubmitted, evStarted, evCancelled)

	// Cancelling again writes nothing, and says so (exit 1).
	if code, _, out := s.cli(nil, "cancel", running.ID); code != 1 || !strings.Contains(out, "already cancelled: nothing to cancel") {
		t.Fatalf("second cancel exited %d: %s", code, out)
	}
	s.wantEvents(running.ID, evSubmitted, evStarted, evCancelled)
	if _, err := testkit.StoreOf(t, s.client).Cancel(ctx, running.ID, ""); !errors.Is(err, commands.ErrTerminal) {
		t.Fatalf("cancel of a cancelled job: %v", err)
	}
	s.verify()
}
