package engine_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// running counts handlers running at once, in all and per user, and
// remembers the highest counts seen.
type running struct {
	mu       sync.Mutex
	now      map[string]int
	total    int
	maxUser  map[string]int
	maxTotal int
}

func newRunning() *running { return &running{now: map[string]int{}, maxUser: map[string]int{}} }

func (r *running) enter(user string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now[user]++
	r.total++
	r.maxUser[user] = max(r.maxUser[user], r.now[user])
	r.maxTotal = max(r.maxTotal, r.total)
}

// highs returns the highest counts seen: in all, and by user.
func (r *running) highs() (int, map[string]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]int, len(r.maxUser))
	for k, v := range r.maxUser {
		m[k] = v
	}
	return r.maxTotal, m
}

func (r *running) leave(user string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now[user]--
	r.total--
}

// sampleCounts asks the admitter every 50 ms and fails the test if a queue
// or a user ever holds more slots than its limits; it returns a stop
// function that reports how many samples it took.
func sampleCounts(t *testing.T, st *engine.Store, queue string, lim domain.QueueLimits) func() int {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			counts, err := st.AdmissionCountsOf(ctx, queue)
			if err != nil {
				continue // between two leaders, or rebuilding
			}
			c := counts[queue]
			n.Add(1)
			if lim.MaxRunning > 0 && c.Holding > lim.MaxRunning {
				t.Errorf("queue %s holds %d slots: limit %d", queue, c.Holding, lim.MaxRunning)
			}
			for u, uc := range c.Users {
				if lim.MaxRunningPerUser > 0 && uc.Holding > lim.MaxRunningPerUser {
					t.Errorf("user %q holds %d slots: limit %d", u, uc.Holding, lim.MaxRunningPerUser)
				}
			}
		}
	}()
	return func() int { cancel(); <-done; return int(n.Load()) }
}

func TestQuotaAdmitsFairlyWithinLimits(t *testing.T) {
	h := newHarness(t)
	lim := domain.QueueLimits{MaxRunning: 4, MaxRunningPerUser: 2}
	if _, err := h.st.SetQueueLimits(h.ctx, "q", lim); err != nil {
		t.Fatal(err)
	}
	run := newRunning()
	h.runtime(engine.RuntimeConfig{Queue: "q", WorkerID: "w", Concurrency: 16, Handlers: map[string]engine.Handler{
		"demo.sleep": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			run.enter(task.Job.Spec.User)
			defer run.leave(task.Job.Spec.User)
			select { // the job's work: 0.2 s
			case <-time.After(200 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil, nil
		}}})
	stop := sampleCounts(t, h.st, "q", lim)
	var reqs []*commands.SubmitRequest
	for i := range 30 {
		for _, u := range []string{"ann", "bob", "cyd"} {
			reqs = append(reqs, &commands.SubmitRequest{Type: "demo.sleep", Queue: "q", User: u, IdempotencyKey: fmt.Sprintf("%s-%d", u, i)})
		}
	}
	var ids []string
	for _, r := range h.st.SubmitBatch(h.ctx, reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Job.State.Terminal() {
			// Pending, or admitted already: the admitter may read the submit
			// from the log before the submitter wrote the record (each
			// job's job.admitted is checked below).
			t.Fatalf("job submitted to a queue with limits is %s", r.Job.State)
		}
		ids = append(ids, r.Job.ID)
	}
	for _, id := range ids {
		h.waitState(id, domain.StateSucceeded, 60*time.Second)
	}
	if n := stop(); n < 20 {
		t.Fatalf("only %d samples of the admitter's counts", n)
	}
	total, perUser := run.highs()
	if total > 4 {
		t.Errorf("%d handlers ran at once: queue limit 4", total)
	}
	for u, n := range perUser {
		if n > 2 {
			t.Errorf("user %s ran %d at once: limit 2", u, n)
		}
	}
	// Admissions interleave the users: in the order they were written, the
	// first 30 are 10 of each, give or take 2.
	type adm struct {
		user string
		seq  uint64
	}
	var adms []adm
	users := map[string]string{}
	for i, r := range reqs {
		users[ids[i]] = r.User
	}
	for _, id := range ids {
		for _, ev := range h.events(id) {
			if ev.Type == domain.EvAdmitted {
				adms = append(adms, adm{users[id], ev.Seq})
			}
		}
	}
	if len(adms) != 90 {
		t.Fatalf("%d admissions, want 90", len(adms))
	}
	sortBy(adms, func(a adm) uint64 { return a.seq })
	per := map[string]int{}
	for _, a := range adms[:30] {
		per[a.user]++
	}
	for _, u := range []string{"ann", "bob", "cyd"} {
		if per[u] < 8 || per[u] > 12 {
			t.Errorf("first 30 admissions by user: %v; want 10 each (±2)", per)
			break
		}
	}
	// A held job says why it waited.
	held := 0
	for _, id := range ids {
		for _, ev := range h.events(id) {
			if ev.Type == domain.EvPending && ev.Hold != nil {
				held++
			}
		}
	}
	if held == 0 {
		t.Error("no job.pending says why a job waited")
	}
	h.verify()
}

func sortBy[T any](xs []T, key func(T) uint64) {
	for i := 1; i < len(xs); i++ {
		for k := i; k > 0 && key(xs[k]) < key(xs[k-1]); k-- {
			xs[k], xs[k-1] = xs[k-1], xs[k]
		}
	}
}

// TestQuotaSlotReleasedEveryWay: one slot; the job holding it ends in every
// way a job can end but a crash (tests/process kills workers and engines),
// and each time the next pending job is admitted.
func TestQuotaSlotReleasedEveryWay(t *testing.T) {
	h := newHarness(t)
	if _, err := h.st.SetQueueLimits(h.ctx, "one", domain.QueueLimits{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	started := make(chan string, 10)
	h.runtime(engine.RuntimeConfig{Queue: "one", WorkerID: "w", Concurrency: 4, Lease: 2 * time.Second, Handlers: map[string]engine.Handler{
		"block": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			started <- task.Job.ID
			<-ctx.Done() // until cancelled or timed out
			return nil, ctx.Err()
		},
		"fail": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			started <- task.Job.ID
			return nil, &engine.PermanentError{Err: fmt.Errorf("no")}
		},
	}})
	zero := 0
	timeout := commands.Duration(time.Second)
	cancelled := h.submit(commands.SubmitRequest{Type: "block", Queue: "one"})
	timedOut := h.submit(commands.SubmitRequest{Type: "block", Queue: "one", Timeout: &timeout, MaxRetries: &zero})
	failed := h.submit(commands.SubmitRequest{Type: "fail", Queue: "one"})
	last := h.submit(commands.SubmitRequest{Type: "block", Queue: "one"})
	pendingCancel := h.submit(commands.SubmitRequest{Type: "block", Queue: "one"})
	// The first may be admitted already (the admitter can read a submit
	// from the log before its submitter wrote the record); the others wait.
	for _, s := range []engine.Snapshot{timedOut, failed, last, pendingCancel} {
		if s.Job.State != domain.StatePending {
			t.Fatalf("%s submitted %s, want pending", s.Job.ID, s.Job.State)
		}
	}
	wantStart := func(id string) {
		t.Helper()
		select {
		case got := <-started:
			if got != id {
				t.Fatalf("started %s, want %s (oldest first)", got, id)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s never started", id)
		}
	}
	wantStart(cancelled.Job.ID)
	// Cancel of a pending job is immediate and frees nothing.
	if _, err := h.st.Cancel(h.ctx, pendingCancel.Job.ID, "not needed"); err != nil {
		t.Fatal(err)
	}
	if j := h.get(pendingCancel.Job.ID); j.State != domain.StateCancelled {
		t.Fatalf("cancelled pending job is %s", j.State)
	}
	// Cancelled while running: the slot goes to the next.
	if _, err := h.st.Cancel(h.ctx, cancelled.Job.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	wantStart(timedOut.Job.ID)
	// Timed out (execution timeout, no retries): failed, slot released.
	h.waitState(timedOut.Job.ID, domain.StateFailed, 10*time.Second)
	wantStart(failed.Job.ID)
	h.waitState(failed.Job.ID, domain.StateFailed, 10*time.Second)
	wantStart(last.Job.ID)
	if _, err := h.st.Cancel(h.ctx, last.Job.ID, "done"); err != nil {
		t.Fatal(err)
	}
	h.waitState(last.Job.ID, domain.StateCancelled, 5*time.Second)
	testkit.WaitFor(t, 5*time.Second, func() error {
		c, err := h.st.AdmissionCountsOf(h.ctx, "one")
		if err != nil {
			return err
		}
		if c["one"].Holding != 0 || c["one"].Pending != 0 {
			return fmt.Errorf("counts %+v, want none held or pending", c["one"])
		}
		return nil
	})
	h.verify()
}

// TestQuotaAdmitterRebuildsFromTheLog: the engine that admits stops; the
// next one counts the running and pending jobs from the log (the pending
// ones' last event is their hold) and admits nothing they still hold.
func TestQuotaAdmitterRebuildsFromTheLog(t *testing.T) {
	h := newHarness(t)
	if _, err := h.st.SetQueueLimits(h.ctx, "rb", domain.QueueLimits{MaxRunning: 2}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	run := newRunning()
	h.runtime(engine.RuntimeConfig{Queue: "rb", WorkerID: "w", Concurrency: 8, Handlers: map[string]engine.Handler{
		"hold": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			run.enter("")
			defer run.leave("")
			<-release
			return nil, nil
		}}})
	var ids []string
	for range 10 {
		ids = append(ids, h.submit(commands.SubmitRequest{Type: "hold", Queue: "rb"}).Job.ID)
	}
	counts := func(st *engine.Store, want commands.Counts) {
		t.Helper()
		testkit.WaitFor(t, 15*time.Second, func() error {
			c, err := st.AdmissionCountsOf(h.ctx, "rb")
			if err != nil {
				return err
			}
			if got := c["rb"]; got.Holding != want.Holding || got.Pending != want.Pending {
				return fmt.Errorf("counts %+v, want %d running, %d pending", got, want.Holding, want.Pending)
			}
			return nil
		})
	}
	counts(h.st, commands.Counts{Holding: 2, Pending: 8})
	// Every pending job records why it waits (after a second: commands' holdAfter).
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, id := range ids {
			if j := h.get(id); j.State == domain.StatePending && (j.Hold == nil || j.Hold.Limit != domain.LimitQueue || j.Hold.Max != 2) {
				return fmt.Errorf("%s pending with hold %+v", id, j.Hold)
			}
		}
		return nil
	})
	h.replaceEngine()
	counts(h.st, commands.Counts{Holding: 2, Pending: 8})
	if total, _ := run.highs(); total != 2 {
		t.Fatalf("%d ran at once, limit 2", total)
	}
	close(release)
	for _, id := range ids {
		h.waitState(id, domain.StateSucceeded, 30*time.Second)
	}
	if total, _ := run.highs(); total != 2 {
		t.Fatalf("%d ran at once, limit 2", total)
	}
	counts(h.st, commands.Counts{})
	h.verify()
}

// TestQuotaTwoEnginesOneLimit: two engines, one limit; the leading one
// stops midway and the other takes over; the limits are never exceeded.
func TestQuotaTwoEnginesOneLimit(t *testing.T) {
	h := newHarness(t)
	lim := domain.QueueLimits{MaxRunning: 3, MaxRunningPerUser: 2}
	if _, err := h.st.SetQueueLimits(h.ctx, "two", lim); err != nil {
		t.Fatal(err)
	}
	eng2 := engine.NewEngine(testkit.Store(t, testkit.Conn(t, h.srv), "engine2"),
		engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Log: testkit.Logger(t)}) // the harness engine's leader TTL: the same election
	if err := eng2.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng2.Stop(context.Background()) })
	run := newRunning()
	var done atomic.Int64
	for _, w := range []string{"w1", "w2"} {
		h.runtime(engine.RuntimeConfig{Queue: "two", WorkerID: w, Concurrency: 8, Handlers: map[string]engine.Handler{
			"work": func(ctx context.Context, task *engine.Task) ([]byte, error) {
				run.enter(task.Job.Spec.User)
				defer run.leave(task.Job.Spec.User)
				select {
				case <-time.After(100 * time.Millisecond):
				case <-ctx.Done():
				}
				done.Add(1)
				return nil, nil
			}}})
	}
	stop := sampleCounts(t, h.st, "two", lim)
	var reqs []*commands.SubmitRequest
	for i := range 10 {
		for _, u := range []string{"a", "b", "c"} {
			reqs = append(reqs, &commands.SubmitRequest{Type: "work", Queue: "two", User: u, IdempotencyKey: fmt.Sprintf("%s%d", u, i)})
		}
	}
	var ids []string
	for _, r := range h.st.SubmitBatch(h.ctx, reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids = append(ids, r.Job.ID)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		if n := done.Load(); n < 8 {
			return fmt.Errorf("%d done", n)
		}
		return nil
	})
	leader := h.eng
	if !leader.Leader.Leading() {
		leader = eng2
	}
	leader.Stop(context.Background())
	for _, id := range ids {
		h.waitState(id, domain.StateSucceeded, 60*time.Second)
	}
	stop()
	total, perUser := run.highs()
	if total > 3 {
		t.Errorf("%d ran at once: limit 3", total)
	}
	for u, n := range perUser {
		if n > 2 {
			t.Errorf("user %s ran %d at once: limit 2", u, n)
		}
	}
	h.verify()
}

// TestQuotaRaisingAndRemovingLimits: raising a limit admits pending jobs at
// once, lowering one stops nothing that runs, and removing both admits
// every pending job.
func TestQuotaRaisingAndRemovingLimits(t *testing.T) {
	h := newHarness(t)
	if _, err := h.st.SetQueueLimits(h.ctx, "rl", domain.QueueLimits{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	run := newRunning()
	var now atomic.Int64
	h.runtime(engine.RuntimeConfig{Queue: "rl", WorkerID: "w", Concurrency: 16, Handlers: map[string]engine.Handler{
		"hold": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			run.enter("")
			now.Add(1)
			defer now.Add(-1)
			defer run.leave("")
			<-release
			return nil, nil
		}}})
	var ids []string
	for range 8 {
		ids = append(ids, h.submit(commands.SubmitRequest{Type: "hold", Queue: "rl"}).Job.ID)
	}
	running := func(want int64) {
		t.Helper()
		testkit.WaitFor(t, 10*time.Second, func() error {
			if n := now.Load(); n != want {
				return fmt.Errorf("%d running, want %d", n, want)
			}
			return nil
		})
	}
	running(1)
	if _, err := h.st.SetQueueLimits(h.ctx, "rl", domain.QueueLimits{MaxRunning: 3}); err != nil {
		t.Fatal(err)
	}
	running(3)
	// Lowering: the three keep running, none is admitted.
	if _, err := h.st.SetQueueLimits(h.ctx, "rl", domain.QueueLimits{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		c, err := h.st.AdmissionCountsOf(h.ctx, "rl")
		if err != nil {
			return err
		}
		if got := c["rl"]; got.Holding != 3 || got.Pending != 5 {
			return fmt.Errorf("after lowering: %+v, want 3 running, 5 pending", got)
		}
		return nil
	})
	if n := now.Load(); n != 3 {
		t.Fatalf("%d running after lowering the limit, want the 3 that ran", n)
	}
	// Removing every limit admits the five pending at once.
	if _, err := h.st.SetQueueLimits(h.ctx, "rl", domain.QueueLimits{}); err != nil {
		t.Fatal(err)
	}
	running(8)
	close(release)
	for _, id := range ids {
		h.waitState(id, domain.StateSucceeded, 10*time.Second)
	}
	// Submits to the queue no longer wait in pending.
	if s := h.submit(commands.SubmitRequest{Type: "hold", Queue: "rl"}); s.Job.State != domain.StateQueued {
		t.Fatalf("submit to a queue whose limits were removed: %s", s.Job.State)
	}
	h.verify()
}
