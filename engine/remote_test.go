package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

func TestRemoteClaimReportSucceed(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), time.Second, testkit.Logger(t))
	// Nothing to claim: a zero snapshot after the wait.
	t0 := time.Now()
	none, err := rm.Claim(h.ctx, "w1", nil, []string{"remote.job"}, 300*time.Millisecond, "")
	if err != nil || none.Job != nil || time.Since(t0) < 300*time.Millisecond {
		t.Fatalf("empty claim: %v %+v after %s", err, none.Job, time.Since(t0))
	}
	// A job submitted while a claim waits wakes it at once.
	got := make(chan engine.Snapshot, 1)
	go func() {
		s, err := rm.Claim(h.ctx, "w1", nil, []string{"remote.job"}, 10*time.Second, "")
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
	if claimed.Job == nil || claimed.Job.ID != sub.Job.ID || claimed.Job.State != domain.StateClaimed || claimed.Job.LeaseAck == "" {
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
		if rn, err := rm.Renew(h.ctx, "w1", []string{sub.Job.ID}); err != nil || len(rn.Held) != 1 || len(rn.Lost) != 0 {
			t.Fatalf("renew: %+v %v", rn, err)
		}
	}
	if _, err := rm.Progress(h.ctx, sub.Job.ID, "w1", domain.Progress{Current: 1, Total: 2}); err != nil {
		t.Fatal(err)
	}
	done, err := rm.Succeed(h.ctx, sub.Job.ID, "w1", []byte(`{"ok": true}`))
	if err != nil || done.Job.State != domain.StateSucceeded || string(done.Job.Result) != `{"ok":true}` {
		t.Fatalf("succeed: %v %+v", err, done.Job)
	}
	h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvProgress, domain.EvSucceeded)
	waitNoWork(t, h, "default", "remote.job")
	h.verify()
}

// waitNoWork waits until a run consumer has nothing waiting or held.
func waitNoWork(t *testing.T, h *harness, queue, jobType string) {
	t.Helper()
	testkit.WaitDrained(t, 10*time.Second, func() (int, error) {
		c, err := h.st.JS.Consumer(h.ctx, streams.QueueStream(queue), engine.ConsumerName(jobType))
		if err != nil {
			return 0, err
		}
		info, err := c.Info(h.ctx)
		if err != nil {
			return 0, err
		}
		return info.NumAckPending + int(info.NumPending), nil
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
			s, err := rm.Claim(h.ctx, fmt.Sprintf("w%d", i), nil, []string{"contested"}, time.Second, "")
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
	h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvClaimed)
}

func TestRemoteLostHeartbeatsRequeue(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), time.Second, testkit.Logger(t))
	sub := h.submit(commands.SubmitRequest{Type: "remote.job"})
	first, err := rm.Claim(h.ctx, "silent", nil, []string{"remote.job"}, 5*time.Second, "")
	if err != nil || first.Job == nil {
		t.Fatalf("claim: %v", err)
	}
	if _, err := rm.Start(h.ctx, sub.Job.ID, "silent"); err != nil {
		t.Fatal(err)
	}
	// "silent" stops heartbeating; after the lease the item is redelivered
	// and the next claimer gets the job back.
	second, err := rm.Claim(h.ctx, "other", nil, []string{"remote.job"}, 10*time.Second, "")
	if err != nil || second.Job == nil || second.Job.ID != sub.Job.ID || second.Job.Worker != "other" {
		t.Fatalf("second claim: %v %+v", err, second.Job)
	}
	if _, err := rm.Succeed(h.ctx, sub.Job.ID, "silent", nil); !errors.Is(err, commands.ErrNotClaimant) {
		t.Fatalf("zombie report: %v", err)
	}
	if _, err := rm.Fail(h.ctx, sub.Job.ID, "other", domain.JobError{Code: "X", Message: "no"}, false); err != nil {
		t.Fatal(err)
	}
	j := h.get(sub.Job.ID)
	if j.State != domain.StateFailed || j.LeaseRequeues != 1 || j.Error.Code != "X" {
		t.Fatalf("job %+v", j)
	}
	h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvLeaseExpiredRequeue,
		domain.EvClaimed, domain.EvFailed)
	h.verify()
}

func TestPausedQueueDispatchesNothing(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), 5*time.Second, testkit.Logger(t))
	if _, err := h.st.SetQueuePaused(h.ctx, "missing", true); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("pause of an unknown queue: %v", err)
	}
	// A claim does not create a queue; an operator (or a submit) does.
	if err := h.st.Queues.Ensure(h.ctx, "pq"); err != nil {
		t.Fatal(err)
	}
	if none, err := rm.Claim(h.ctx, "w", []string{"pq"}, []string{"p"}, 0, ""); err != nil || none.Job != nil {
		t.Fatalf("first claim: %v %+v", err, none.Job)
	}
	rec, err := h.st.SetQueuePaused(h.ctx, "pq", true)
	if err != nil || !rec.Paused {
		t.Fatalf("pause: %v", err)
	}
	paused := h.submit(commands.SubmitRequest{Type: "p", Queue: "pq"})
	if s, err := rm.Claim(h.ctx, "w", []string{"pq"}, []string{"p"}, 500*time.Millisecond, ""); err != nil || s.Job != nil {
		t.Fatalf("claim from a paused queue: %v %+v", err, s.Job)
	}
	if j := h.get(paused.Job.ID); j.State != domain.StateQueued {
		t.Fatalf("job in a paused queue is %s", j.State)
	}
	if _, err := h.st.SetQueuePaused(h.ctx, "pq", false); err != nil {
		t.Fatal(err)
	}
	s, err := rm.Claim(h.ctx, "w", []string{"pq"}, []string{"p"}, 5*time.Second, "")
	if err != nil || s.Job == nil {
		t.Fatalf("claim after resume: %v", err)
	}
	stats, err := engine.Internal(h.st).QueueStats(h.ctx, "pq")
	if err != nil || stats.Paused || stats.Held != 1 {
		t.Fatalf("stats %+v %v", stats, err)
	}
}

// A worker of several types (on several queues) claims the oldest queued
// job of them all, whatever its type or queue.
func TestRemoteClaimsOldestFirst(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), 5*time.Second, testkit.Logger(t))
	var want []string
	for _, req := range []commands.SubmitRequest{{Type: "tb"}, {Type: "tb"}, {Type: "ta"}, {Type: "tc", Queue: "q2"}, {Type: "ta"}} {
		want = append(want, h.submit(req).Job.ID)
	}
	var got []string
	for range want {
		s, err := rm.Claim(h.ctx, "w", []string{"q2", "default"}, []string{"tc", "ta", "tb"}, 2*time.Second, "")
		if err != nil || s.Job == nil {
			t.Fatalf("claim %d: %v", len(got), err)
		}
		got = append(got, s.Job.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("claimed in the order\n %v\nwant the submit order\n %v", got, want)
	}
}

// A claim does not create the queues it names: a queue that does not exist
// has nothing to claim, until a submit creates it (a waiting claim then
// gets the job).
func TestRemoteClaimCreatesNoQueue(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), 5*time.Second, testkit.Logger(t))
	if s, err := rm.Claim(h.ctx, "w", []string{"nowhere"}, []string{"x"}, 0, ""); err != nil || s.Job != nil {
		t.Fatalf("claim on a missing queue: %v %+v", err, s.Job)
	}
	if _, err := h.st.JS.Stream(h.ctx, streams.QueueStream("nowhere")); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("the claim created the queue's stream: %v", err)
	}
	if _, err := h.st.Queue(h.ctx, "nowhere"); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("the claim created the queue's record: %v", err)
	}
	got := make(chan engine.Snapshot, 1)
	go func() {
		s, err := rm.Claim(h.ctx, "w", []string{"nowhere"}, []string{"x"}, 10*time.Second, "")
		if err != nil {
			t.Error(err)
		}
		got <- s
	}()
	time.Sleep(100 * time.Millisecond) // let the claim start waiting (either order must work)
	id := h.submit(commands.SubmitRequest{Type: "x", Queue: "nowhere"}).Job.ID
	select {
	case s := <-got:
		if s.Job == nil || s.Job.ID != id {
			t.Fatalf("waiting claim got %+v, want %s", s.Job, id)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("the waiting claim did not get the job of the new queue")
	}
	// Over the limits: refused before anything is created.
	types := make([]string, engine.MaxRemoteTypes+1)
	for i := range types {
		types[i] = fmt.Sprintf("t%d", i)
	}
	if _, err := rm.Claim(h.ctx, "w", nil, types, 0, ""); !errors.Is(err, commands.ErrInvalidInput) {
		t.Fatalf("claim of %d types: %v", len(types), err)
	}
}

// A run consumer deleted on the server (by an operator) is created again
// by the next claim instead of failing every claim of the gateway.
func TestRemoteRecreatesDeletedConsumer(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), 5*time.Second, testkit.Logger(t))
	first := h.submit(commands.SubmitRequest{Type: "gone"}).Job.ID
	if s, err := rm.Claim(h.ctx, "w", nil, []string{"gone"}, time.Second, ""); err != nil || s.Job == nil || s.Job.ID != first {
		t.Fatalf("first claim: %v", err)
	}
	if _, err := rm.Fail(h.ctx, first, "w", domain.JobError{Message: "done"}, false); err != nil {
		t.Fatal(err)
	}
	waitNoWork(t, h, "default", "gone")
	// A claim of one type and a claim of several recover on paths of their
	// own: each must get the job.
	for _, types := range [][]string{{"gone"}, {"gone", "other"}} {
		if err := h.st.JS.DeleteConsumer(h.ctx, streams.QueueStream("default"), engine.ConsumerName("gone")); err != nil {
			t.Fatal(err)
		}
		id := h.submit(commands.SubmitRequest{Type: "gone"}).Job.ID
		s, err := rm.Claim(h.ctx, "w", nil, types, 3*time.Second, "")
		if err != nil || s.Job == nil || s.Job.ID != id {
			t.Fatalf("claim %v after the consumer was deleted: %v, got %+v, want %s", types, err, s.Job, id)
		}
		if _, err := rm.Fail(h.ctx, id, "w", domain.JobError{Message: "done"}, false); err != nil {
			t.Fatal(err)
		}
		waitNoWork(t, h, "default", "gone")
	}
}

// A heartbeat that cannot read a claim (a transient error) keeps it: only
// a job that is gone or held by another is lost.
func TestRemoteRenewKeepsClaimsOnTransientErrors(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), 5*time.Second, testkit.Logger(t))
	id := h.submit(commands.SubmitRequest{Type: "beat"}).Job.ID
	if s, err := rm.Claim(h.ctx, "w", nil, []string{"beat"}, time.Second, ""); err != nil || s.Job == nil {
		t.Fatalf("claim: %v", err)
	}
	unknown := "01ARZ3NDEKTSV4RRFFQ69G5FAV"
	dead, cancel := context.WithCancel(h.ctx)
	cancel()
	rn, err := rm.Renew(dead, "w", []string{id})
	if err == nil || len(rn.Unchecked) != 1 || rn.Unchecked[0] != id || len(rn.Lost) != 0 || len(rn.Held) != 0 {
		t.Fatalf("renew with NATS unreachable: %+v %v", rn, err)
	}
	rn, err = rm.Renew(h.ctx, "w", []string{id, unknown})
	if err != nil || fmt.Sprint(rn.Held) != fmt.Sprint([]string{id}) || fmt.Sprint(rn.Lost) != fmt.Sprint([]string{unknown}) ||
		len(rn.Unchecked) != 0 {
		t.Fatalf("renew: %+v %v", rn, err)
	}
	rn, err = rm.Renew(h.ctx, "other", []string{id})
	if err != nil || len(rn.Held) != 0 || fmt.Sprint(rn.Lost) != fmt.Sprint([]string{id}) {
		t.Fatalf("renew by a worker that does not hold it: %+v %v", rn, err)
	}
}

// A child whose parent was cancelled is never handed to an HTTP worker: it
// is cancelled as soon as it is submitted (and a claim that got it anyway,
// submitted in a race with the parent's cancel, finds the parent ended,
// cancels the child and hands out nothing).
func TestRemoteClaimSkipsChildOfEndedParent(t *testing.T) {
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), time.Second, testkit.Logger(t))
	parent := h.submit(commands.SubmitRequest{Type: "nobody.coordinates"})
	if _, err := h.st.Cancel(h.ctx, parent.Job.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	child := h.submit(commands.SubmitRequest{Type: "remote.kid", Parent: parent.Job.ID})
	got, err := rm.Claim(h.ctx, "w1", nil, []string{"remote.kid"}, 300*time.Millisecond, "")
	if err != nil || got.Job != nil {
		t.Fatalf("claim handed out %+v (%v)", got.Job, err)
	}
	j := h.waitState(child.Job.ID, domain.StateCancelled, 5*time.Second)
	if j.Error == nil || j.Error.Message != "cancelled: parent job is no longer running" {
		t.Fatalf("child %+v", j.Error)
	}
	h.wantEvents(child.Job.ID, domain.EvSubmitted, domain.EvCancelled)
	h.verify()
}

// A remote worker that names no queues serves its types in every queue:
// the oldest job across them, and a queue created while its claim waits.
func TestRemoteWithNoQueuesServesEveryQueue(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), 5*time.Second, testkit.Logger(t))
	var want []string
	for _, req := range []commands.SubmitRequest{{Type: "ev", Queue: "q-b"}, {Type: "ev", Queue: "q-a"}, {Type: "ev"}, {Type: "other", Queue: "q-a"}} {
		want = append(want, h.submit(req).Job.ID)
	}
	var got []string
	for range 3 {
		c, err := rm.Claim(h.ctx, "w", nil, []string{"ev"}, time.Second, "")
		if err != nil || c.Job == nil {
			t.Fatalf("claim: %v", err)
		}
		got = append(got, c.Job.ID)
	}
	if fmt.Sprint(got) != fmt.Sprint(want[:3]) {
		t.Fatalf("claimed %v, want oldest first %v", got, want[:3])
	}
	// Nothing of type ev is left (type "other" is not the worker's).
	if c, err := rm.Claim(h.ctx, "w", nil, []string{"ev"}, 300*time.Millisecond, ""); err != nil || c.Job != nil {
		t.Fatalf("claim with nothing left: %v %+v", err, c.Job)
	}
	got2 := make(chan engine.Snapshot, 1)
	go func() {
		c, err := rm.Claim(h.ctx, "w", nil, []string{"ev"}, 10*time.Second, "")
		if err != nil {
			t.Error(err)
		}
		got2 <- c
	}()
	time.Sleep(200 * time.Millisecond) // let the claim wait (either order is correct)
	late := h.submit(commands.SubmitRequest{Type: "ev", Queue: "q-new"}).Job.ID
	select {
	case c := <-got2:
		if c.Job == nil || c.Job.ID != late {
			t.Fatalf("claim on a queue created while waiting: %+v", c.Job)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting claim did not get the job of a new queue")
	}
}
