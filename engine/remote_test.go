package engine_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

func TestRemoteClaimReportSucceed(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), time.Second, testkit.Logger(t))
	// Nothing to claim: a zero snapshot after the wait.
	t0 := time.Now()
	none, err := rm.Claim(h.ctx, "w1", nil, []string{"remote.job"}, 300*time.Millisecond)
	if err != nil || none.Job != nil || time.Since(t0) < 300*time.Millisecond {
		t.Fatalf("empty claim: %v %+v after %s", err, none.Job, time.Since(t0))
	}
	// A job submitted while a claim waits wakes it at once.
	got := make(chan engine.Snapshot, 1)
	go func() {
		s, err := rm.Claim(h.ctx, "w1", nil, []string{"remote.job"}, 10*time.Second)
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	time.Sleep(100 * time.Millisecond) // let the claim start waiting (either order must work)
	sub := h.submit(commands.SubmitRequest{Type: "remote.job", Payload: commands.RawJSON(`{"n":1}`)})
	var claimed engine.Snapshot
	select {
	case claimed = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("claim did not wake up")
	}
	if claimed.Job == nil || claimed.Job.ID != sub.Job.ID || claimed.Job.State != streams.StateClaimed || claimed.Job.LeaseAck == "" {
		t.Fatalf("claimed %+v", claimed.Job)
	}
	if _, err := rm.Start(h.ctx, sub.Job.ID, "w2"); !errors.Is(err, commands.ErrNotClaimant) {
		t.Fatalf("start by another worker: %v", err)
	}
	if _, err := rm.Succeed(h.ctx, sub.Job.ID, "w1", []byte(`1`)); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("succeed before running: %v", err)
	}
	if _, err := rm.Start(h.ctx, sub.Job.ID, "w1"); err != nil {
		t.Fatal(err)
	}
	// Heartbeats past the lease keep the job.
	for i := 0; i < 4; i++ {
		time.Sleep(400 * time.Millisecond) // heartbeat cadence, not a wait for a condition
		if held, err := rm.Renew(h.ctx, "w1", []string{sub.Job.ID}); err != nil || len(held) != 1 {
			t.Fatalf("renew: %v %v", held, err)
		}
	}
	if _, err := rm.Progress(h.ctx, sub.Job.ID, "w1", streams.Progress{Current: 1, Total: 2}); err != nil {
		t.Fatal(err)
	}
	done, err := rm.Succeed(h.ctx, sub.Job.ID, "w1", []byte(`{"ok": true}`))
	if err != nil || done.Job.State != streams.StateSucceeded || string(done.Job.Result) != `{"ok":true}` {
		t.Fatalf("succeed: %v %+v", err, done.Job)
	}
	h.wantEvents(sub.Job.ID, streams.EvSubmitted, streams.EvClaimed, streams.EvStarted, streams.EvProgress, streams.EvSucceeded)
	waitNoWork(t, h, "default", "remote.job")
	h.verify()
}

// waitNoWork waits until a run consumer has nothing waiting or held.
func waitNoWork(t *testing.T, h *harness, queue, jobType string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() error {
		c, err := h.st.JS.Consumer(h.ctx, streams.QueueStream(queue), engine.ConsumerName(jobType))
		if err != nil {
			return err
		}
		info, err := c.Info(h.ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("%s: %d held, %d waiting", jobType, info.NumAckPending, info.NumPending)
		}
		return nil
	})
}

func TestRemoteTenClaimersOneJob(t *testing.T) {
	h := newHarness(t)
	sub := h.submit(commands.SubmitRequest{Type: "contested"})
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := 0
	for i := 0; i < 10; i++ {
		rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), 5*time.Second, testkit.Logger(t))
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s, err := rm.Claim(h.ctx, fmt.Sprintf("w%d", i), nil, []string{"contested"}, time.Second)
			if err != nil {
				t.Error(err)
				return
			}
			if s.Job != nil {
				mu.Lock()
				winners++
				mu.Unlock()
			}
		}(i)
	}
	wg.Wait()
	if winners != 1 {
		t.Fatalf("%d claimers got the job", winners)
	}
	h.wantEvents(sub.Job.ID, streams.EvSubmitted, streams.EvClaimed)
}

func TestRemoteLostHeartbeatsRequeue(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), time.Second, testkit.Logger(t))
	sub := h.submit(commands.SubmitRequest{Type: "remote.job"})
	first, err := rm.Claim(h.ctx, "silent", nil, []string{"remote.job"}, 5*time.Second)
	if err != nil || first.Job == nil {
		t.Fatalf("claim: %v", err)
	}
	if _, err := rm.Start(h.ctx, sub.Job.ID, "silent"); err != nil {
		t.Fatal(err)
	}
	// "silent" stops heartbeating; after the lease the item is redelivered
	// and the next claimer gets the job back.
	second, err := rm.Claim(h.ctx, "other", nil, []string{"remote.job"}, 10*time.Second)
	if err != nil || second.Job == nil || second.Job.ID != sub.Job.ID || second.Job.Worker != "other" {
		t.Fatalf("second claim: %v %+v", err, second.Job)
	}
	if _, err := rm.Succeed(h.ctx, sub.Job.ID, "silent", nil); !errors.Is(err, commands.ErrNotClaimant) {
		t.Fatalf("zombie report: %v", err)
	}
	if _, err := rm.Fail(h.ctx, sub.Job.ID, "other", streams.JobError{Code: "X", Message: "no"}, false); err != nil {
		t.Fatal(err)
	}
	j := h.get(sub.Job.ID)
	if j.State != streams.StateFailed || j.LeaseRequeues != 1 || j.Error.Code != "X" {
		t.Fatalf("job %+v", j)
	}
	h.wantEvents(sub.Job.ID, streams.EvSubmitted, streams.EvClaimed, streams.EvStarted, streams.EvLeaseExpiredRequeue,
		streams.EvClaimed, streams.EvFailed)
	h.verify()
}

func TestPausedQueueDispatchesNothing(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), 5*time.Second, testkit.Logger(t))
	if _, err := h.st.SetQueuePaused(h.ctx, "missing", true); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("pause of an unknown queue: %v", err)
	}
	// An empty claim creates the queue and its consumer.
	if none, err := rm.Claim(h.ctx, "w", []string{"pq"}, []string{"p"}, 0); err != nil || none.Job != nil {
		t.Fatalf("first claim: %v %+v", err, none.Job)
	}
	rec, err := h.st.SetQueuePaused(h.ctx, "pq", true)
	if err != nil || !rec.Paused {
		t.Fatalf("pause: %v", err)
	}
	paused := h.submit(commands.SubmitRequest{Type: "p", Queue: "pq"})
	if s, err := rm.Claim(h.ctx, "w", []string{"pq"}, []string{"p"}, 500*time.Millisecond); err != nil || s.Job != nil {
		t.Fatalf("claim from a paused queue: %v %+v", err, s.Job)
	}
	if j := h.get(paused.Job.ID); j.State != streams.StateQueued {
		t.Fatalf("job in a paused queue is %s", j.State)
	}
	if _, err := h.st.SetQueuePaused(h.ctx, "pq", false); err != nil {
		t.Fatal(err)
	}
	s, err := rm.Claim(h.ctx, "w", []string{"pq"}, []string{"p"}, 5*time.Second)
	if err != nil || s.Job == nil {
		t.Fatalf("claim after resume: %v", err)
	}
	stats, err := h.st.QueueStats(h.ctx, "pq")
	if err != nil || stats.Paused || stats.Held != 1 {
		t.Fatalf("stats %+v %v", stats, err)
	}
}
