package engine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// A queue with priorities and a window of 20: 2,000 jobs of priority 0
// are queued (20 admitted, the rest pending), then 100 of priority 10.
// Starts run in admission order: the 20 admitted first, then by priority
// with every AgedEvery-th admission to the job pending longest; so the
// 100 high ones all start within the first 20 + 112 starts.
func TestPrioritiesOrderStarts(t *testing.T) {
	h := newHarness(t)
	const window, lows, highs = 20, 2_000, 100
	lim := domain.QueueLimits{Priorities: true, MaxQueued: window}
	if _, err := h.st.SetQueueLimits(h.ctx, "p", lim); err != nil {
		t.Fatal(err)
	}
	submit := func(n, priority int, prefix string) {
		for from := 0; from < n; from += 500 {
			var reqs []*commands.SubmitRequest
			for i := from; i < min(n, from+500); i++ {
				reqs = append(reqs, &commands.SubmitRequest{Type: "work", Queue: "p", Priority: priority,
					IdempotencyKey: fmt.Sprintf("%s%05d", prefix, i)})
			}
			for _, r := range h.st.SubmitBatch(h.ctx, reqs) {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			}
		}
	}
	counts := func(wantHolding, wantPending int) {
		t.Helper()
		testkit.WaitFor(t, 60*time.Second, func() error {
			c, err := h.st.AdmissionCountsOf(h.ctx, "p")
			if err != nil {
				return err
			}
			if got := c["p"]; got.Holding != wantHolding || got.Pending != wantPending {
				return fmt.Errorf("holding %d, pending %d", got.Holding, got.Pending)
			}
			return nil
		})
	}
	began := time.Now()
	submit(lows, 0, "low")
	t.Logf("%d submitted in %s", lows, time.Since(began))
	counts(window, lows-window) // the window is full: the rest wait
	submit(highs, 10, "high")
	counts(window, lows-window+highs)
	t.Logf("all pending after %s", time.Since(began))

	var mu sync.Mutex
	var order []int    // priorities in start order
	var ids []string   // jobs in start order
	var items []uint64 // their work items (queue stream sequences)
	enough := make(chan struct{})
	h.runtime(engine.RuntimeConfig{Queue: "p", WorkerID: "w", Concurrency: 1, Handlers: map[string]engine.Handler{
		"work": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			order = append(order, task.Job.Spec.Priority)
			ids, items = append(ids, task.Job.ID), append(items, task.Job.LeaseItem)
			if len(order) == 200 {
				close(enough)
			}
			return nil, nil
		}}})
	select {
	case <-enough:
		t.Logf("200 started after %s", time.Since(began))
	case <-time.After(120 * time.Second):
		mu.Lock()
		t.Logf("%d started", len(order))
		mu.Unlock()
		t.Fatal("200 starts took over 2 minutes")
	}
	mu.Lock()
	defer mu.Unlock()
	bound := window + highs*commands.AgedEvery/(commands.AgedEvery-1) + 1 // 20 + 112
	seen, last, agedLows := 0, 0, 0
	for i, p := range order[:200] {
		switch {
		case i < window && p != 0:
			t.Fatalf("start %d has priority %d: the window's 20 were admitted before the high ones came", i, p)
		case p == 10:
			seen++
			last = i + 1
		case i >= window && seen < highs:
			agedLows++
		}
	}
	if seen != highs || last > bound {
		logAdmissions(t, h, ids[:200], items[:200])
		t.Fatalf("%d of %d high jobs started within 200 starts, the last at start %d: want all within %d (order %v)", seen, highs, last, bound, order)
	}
	// Among the admissions while high ones waited, one in AgedEvery went
	// to the job pending longest.
	if agedLows < highs/commands.AgedEvery || agedLows > highs/(commands.AgedEvery-1)+1 {
		logAdmissions(t, h, ids[:200], items[:200])
		t.Fatalf("%d low jobs started among the high ones: want one in %d", agedLows, commands.AgedEvery)
	}
}

// logAdmissions logs, for a failure, each start with its work item and
// its admission (the job.admitted event's sequence): work items out of
// admission order are what broke the bound before (issue 22: batches of
// admissions written at once, one overtaking the other).
func logAdmissions(t *testing.T, h *harness, ids []string, items []uint64) {
	t.Helper()
	for i, id := range ids {
		var admitted uint64
		err := h.st.History(h.ctx, id, 0, false, func(ev *domain.Event) error {
			if ev.Type == domain.EvAdmitted {
				admitted = ev.Seq
			}
			return nil
		})
		t.Logf("start %d: job %s, work item %d, admitted at %d (err %v)", i+1, id, items[i], admitted, err)
	}
}

// TestReprioritizeOrdersPendingJobs: in a queue with priorities and a
// window of one, a pending job given a higher priority (job.reprioritized)
// starts before the jobs submitted ahead of it, also after the engine is
// replaced and its admission rebuilt from the log (where the job's last
// event is the job.reprioritized); the admitted job keeps its place; the
// same priority again writes nothing; a started job, an ended one and a
// priority out of range are refused, writing nothing.
func TestReprioritizeOrdersPendingJobs(t *testing.T) {
	h := newHarness(t)
	if _, err := h.st.SetQueueLimits(h.ctx, "rp", domain.QueueLimits{Priorities: true, MaxQueued: 1}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for range 6 {
		ids = append(ids, h.submit(commands.SubmitRequest{Type: "rp.work", Queue: "rp"}).Job.ID)
	}
	testkit.WaitFor(t, 15*time.Second, func() error {
		c, err := h.st.AdmissionCountsOf(h.ctx, "rp")
		if err != nil {
			return err
		}
		if got := c["rp"]; got.Holding != 1 || got.Pending != 5 {
			return fmt.Errorf("holding %d, pending %d", got.Holding, got.Pending)
		}
		return nil
	})
	h.waitState(ids[0], domain.StateQueued, 15*time.Second)
	for _, c := range []struct {
		i, priority int
	}{{4, 10}, {2, 5}, {0, 3}} {
		snap, err := h.st.Reprioritize(h.ctx, ids[c.i], c.priority)
		if err != nil || snap.Job.Spec.Priority != c.priority {
			t.Fatalf("reprioritize %d: %+v %v", c.i, snap.Job, err)
		}
	}
	evs := h.events(ids[4])
	last := evs[len(evs)-1]
	if last.Type != domain.EvReprioritized || last.Priority == nil || *last.Priority != 10 || last.To != "" || last.Actor == "" {
		t.Fatalf("last event of the reprioritized job: %+v", last)
	}
	before := h.lastSeq()
	if snap, err := h.st.Reprioritize(h.ctx, ids[4], 10); err != nil || snap.Job.Spec.Priority != 10 {
		t.Fatalf("same priority: %+v %v", snap.Job, err)
	}
	if _, err := h.st.Reprioritize(h.ctx, ids[1], 1001); !errors.Is(err, commands.ErrInvalidInput) {
		t.Fatalf("priority 1001: %v", err)
	}
	if _, err := h.st.Reprioritize(h.ctx, domain.NewID(), 1); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("unknown job: %v", err)
	}
	if h.lastSeq() != before {
		t.Fatal("a no-op or a refusal wrote an event")
	}

	var mu sync.Mutex
	var order []string
	release := make(chan struct{})
	h.runtime(engine.RuntimeConfig{Queue: "rp", WorkerID: "w", Concurrency: 1, Handlers: map[string]engine.Handler{
		"rp.work": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			mu.Lock()
			order = append(order, task.Job.ID)
			mu.Unlock()
			if task.Job.ID == ids[0] {
				<-release
			}
			return nil, nil
		}}})
	h.waitState(ids[0], domain.StateRunning, 15*time.Second)
	if _, err := h.st.Reprioritize(h.ctx, ids[0], 7); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("reprioritize a running job: %v", err)
	}
	// The first job's claim freed the window: this engine's admission,
	// told of the new priorities as they were appended, admits job 4.
	h.waitState(ids[4], domain.StateQueued, 15*time.Second)
	for _, i := range []int{1, 2, 3, 5} {
		if j := h.get(ids[i]); j.State != domain.StatePending {
			t.Fatalf("job %d %s", i, j.State)
		}
	}

	// The rest by another engine's admission, rebuilt from the log (job
	// 2's last event is its job.reprioritized).
	h.replaceEngine()
	close(release)
	for _, id := range ids {
		h.waitState(id, domain.StateSucceeded, 30*time.Second)
	}
	if _, err := h.st.Reprioritize(h.ctx, ids[0], 7); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("reprioritize an ended job: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{ids[0], ids[4], ids[2], ids[1], ids[3], ids[5]}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("start order %v, want %v", order, want)
	}
	h.verify()
}
