package process

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

func actors(evs []*jetflow.EventInfo) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Actor
		if strings.HasPrefix(e.Actor, "engine-") {
			out[i] = "engine"
		}
	}
	return out
}

// wantLeaseTakeover fails unless the job ran under first, lost its lease
// (written off by the engine's lease sweeper, or by then by the next
// claimer, whichever saw it first) and was taken over and finished by
// second.
func wantLeaseTakeover(t *testing.T, evs []*jetflow.EventInfo, first, second string) {
	t.Helper()
	got := actors(evs)[1:]
	if len(got) != 4 || got[0] != first || (got[1] != second && got[1] != "engine") || got[2] != second || got[3] != second {
		t.Fatalf("actors %v: want %s, then the engine or %s, then %s", got, first, second, second)
	}
}

// A worker process killed with SIGKILL in the middle of a job: its lease
// runs out, the job is requeued (job.lease_expired_requeue) and the next
// worker finishes it.
func TestKilledWorkerJobIsRequeued(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	a := s.worker("A", nil)
	job := s.sleep(5)
	s.waitRunning(job.ID, "A")
	a.Kill(t)
	s.worker("B", nil)
	done := testkit.WaitTerminal(t, s.client, job.ID, 30*time.Second)
	if done.State != jetflow.Succeeded || done.Worker != "B" || done.Attempts != 2 || done.LeaseRequeues != 1 {
		t.Fatalf("job %s under %s, attempts %d, lease requeues %d", done.State, done.Worker, done.Attempts, done.LeaseRequeues)
	}
	wantLeaseTakeover(t, s.wantEvents(job.ID, evSubmitted, evStarted, evRequeue, evStarted, evSucceeded), "A", "B")
	s.waitDrained("default")
	s.verify()
}

// After max_lease_requeues lost leases the job fails with
// job.lease_expired instead of going round again.
func TestMaxLeaseRequeuesFailsTheJob(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	job := s.sleep(600, jetflow.MaxLeaseRequeues(1))
	a := s.worker("A", nil)
	s.waitRunning(job.ID, "A")
	a.Kill(t)
	b := s.worker("B", nil)
	s.waitRunning(job.ID, "B")
	b.Kill(t)
	s.worker("C", nil)
	done := testkit.WaitTerminal(t, s.client, job.ID, 30*time.Second)
	wantLeaseExpired(t, done)
	s.wantEvents(job.ID, evSubmitted, evStarted, evRequeue, evStarted, domain.EvLeaseExpired)
	s.waitDrained("default")
	s.verify()
}

// A zombie: worker A is frozen (SIGSTOP) mid-job, its lease runs out, B
// takes the job over and finishes it; when A thaws, its handler is
// cancelled and its outcome refused: nothing it does is written.
func TestFrozenWorkerIsAZombie(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	a := s.worker("A", nil)
	job := s.sleep(5)
	s.waitRunning(job.ID, "A")
	a.Signal(t, syscall.SIGSTOP)
	s.worker("B", nil)
	done := testkit.WaitTerminal(t, s.client, job.ID, 30*time.Second)
	if done.State != jetflow.Succeeded || done.Worker != "B" {
		t.Fatalf("job %s under %s", done.State, done.Worker)
	}
	a.Signal(t, syscall.SIGCONT)
	a.WaitOutput(t, 20*time.Second, "attempt result discarded")
	wantLeaseTakeover(t, s.wantEvents(job.ID, evSubmitted, evStarted, evRequeue, evStarted, evSucceeded), "A", "B")
	s.waitDrained("default")
	s.verify()
}

// SIGTERM: the worker stops claiming, gives its handler the grace period,
// then requeues the job (job.requeued) and exits 0; another worker takes
// the job over at once, without waiting for a lease to run out.
func TestSigtermRequeuesRunningJobs(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	a := s.worker("A", nil, "--grace", "200ms", "--lease", "30s")
	job := s.sleep(5)
	s.waitRunning(job.ID, "A")
	a.Signal(t, syscall.SIGTERM)
	if code, sig := a.WaitExit(t, 20*time.Second); code != 0 {
		t.Fatalf("worker exited with code %d (signal %v)", code, sig)
	}
	j, err := s.client.Get(testkit.Ctx(t), job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.State != jetflow.Queued || j.Worker != "" {
		t.Fatalf("after the worker's exit the job is %s under %q", j.State, j.Worker)
	}
	// A lease of 30s: were the job not requeued, B would wait that long.
	s.worker("B", nil, "--lease", "30s")
	done := testkit.WaitTerminal(t, s.client, job.ID, 15*time.Second)
	if done.State != jetflow.Succeeded || done.Worker != "B" || done.LeaseRequeues != 0 {
		t.Fatalf("job %s under %s", done.State, done.Worker)
	}
	s.wantEvents(job.ID, evSubmitted, evStarted, domain.EvRequeued, evStarted, evSucceeded)
	s.waitDrained("default")
	s.verify()
}

// Every process killed at once, the engine's embedded NATS server with
// them, while one job waits for its retry and another for its run_at:
// after a restart both run when due, because delays are message schedules
// in the queue stream, not timers in a process.
func TestDelaysSurviveRestartOfEverything(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	w := s.worker("A", nil)
	ctx := testkit.Ctx(t)
	retry, err := s.client.Submit(ctx, "demo.fail", map[string]int{"times": 1}, jetflow.Backoff(8*time.Second), jetflow.Jitter(0))
	if err != nil {
		t.Fatal(err)
	}
	delayed, err := s.client.Submit(ctx, "demo.echo", map[string]int{"n": 7}, jetflow.Delay(8*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		j, err := s.client.Get(ctx, retry.ID)
		if err != nil {
			return err
		}
		if j.State != jetflow.Scheduled || j.Retries != 1 {
			return testkit.Errorf("retry job %s, retries %d", j.State, j.Retries)
		}
		return nil
	})
	w.Kill(t)
	s.serve.Kill(t)

	s.startServe()
	s.worker("B", nil)
	for _, id := range []string{retry.ID, delayed.ID} {
		if done := testkit.WaitTerminal(t, s.client, id, 30*time.Second); done.State != jetflow.Succeeded || done.Worker != "B" {
			t.Fatalf("job %s: %s under %s", id, done.State, done.Worker)
		}
	}
	evs := s.wantEvents(retry.ID, evSubmitted, evStarted, evRetry, evDue, evStarted, evSucceeded)
	if started, due := evs[4].Time, evs[2].RunAt; due == nil || started.Before(*due) {
		t.Fatalf("retry started at %s, due at %v", started, due)
	}
	evs = s.wantEvents(delayed.ID, evSubmitted, evDue, evStarted, evSucceeded)
	if runAt := evs[0].RunAt; runAt == nil || evs[2].Time.Before(*runAt) {
		t.Fatalf("delayed job started at %s, run_at %v", evs[2].Time, runAt)
	}
	s.waitDrained("default")
	s.verify()
}
