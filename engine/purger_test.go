package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

func TestPurgerPurgesOnlyExpiredTerminalJobs(t *testing.T) {
	h := newHarness(t)
	h.coordWorker()
	h.setRetention("keep", time.Hour)
	old := h.cancelled()
	kept := h.submit(commands.SubmitRequest{Type: "demo.idle", Namespace: "keep"})
	if _, err := h.st.Cancel(h.ctx, kept.Job.ID, ""); err != nil {
		t.Fatal(err)
	}
	live := h.submit(commands.SubmitRequest{Type: "demo.idle"}) // queued: never purged
	parent := h.submit(commands.SubmitRequest{Type: "coord"})
	h.waitState(parent.Job.ID, domain.StateSucceeded, 20*time.Second)

	p := newPurger(h.st, engine.PurgerConfig{Retention: 300 * time.Millisecond, Max: 1, Log: testkit.Logger(t)})
	testkit.WaitFor(t, 5*time.Second, func() error {
		ids, err := engine.Expired(h.ctx, h.st, func(string) time.Duration { return 300 * time.Millisecond }, "default", 100)
		if err != nil || len(ids) != 2 {
			return fmt.Errorf("expired %v, %v; want the cancelled job and the parent (children go with it)", ids, err)
		}
		return nil
	})
	// Max 1 a pass: the oldest job first, then the parent with its 3
	// children (a parent is never split, even over Max).
	n1, err := p.Pass(h.ctx)
	if err != nil || n1 != 1 {
		t.Fatalf("first pass: %d, %v", n1, err)
	}
	n2, err := p.Pass(h.ctx)
	if err != nil || n2 != 4 {
		t.Fatalf("second pass: %d, %v", n2, err)
	}
	wantGone(t, h, old.Job.ID)
	wantGone(t, h, parent.Job.ID)
	for i := 1; i <= 3; i++ {
		wantGone(t, h, engine.ChildID("default", parent.Job.ID, i))
	}
	if n, err := p.Pass(h.ctx); err != nil || n != 0 {
		t.Fatalf("third pass: %d, %v", n, err)
	}
	if h.get(live.Job.ID).State != domain.StateQueued || h.get(kept.Job.ID).State != domain.StateCancelled {
		t.Fatal("a live job or one within its namespace's retention was purged")
	}
	h.verify()
}

func TestNamespaceRetentionMustBePositive(t *testing.T) {
	h := newHarness(t)
	before := h.lastSeq()
	_, err := h.st.Types.SetNamespace(h.ctx, "ns", domain.NamespaceSettings{Retention: domain.Period(-time.Hour)}, "test")
	if !errors.Is(err, commands.ErrInvalidInput) || h.lastSeq() != before {
		t.Fatalf("negative retention: %v", err)
	}
}

// A backlog is drained pass after pass, without waiting for the interval.
func TestPurgerDrainsABacklog(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for range 5 {
		ids = append(ids, h.cancelled().Job.ID)
	}
	p := newPurger(h.st, engine.PurgerConfig{Retention: time.Nanosecond, Interval: time.Hour, Max: 2, Log: testkit.Logger(t)})
	if err := p.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := p.Purged(); n != 5 {
			return fmt.Errorf("purged %d of 5", n)
		}
		return nil
	})
	for _, id := range ids {
		wantGone(t, h, id)
	}
	p.Stop(h.ctx)
	p.Stop(h.ctx) // twice is fine
}

// TestTwoPurgersPurgeEachJobOnce: the Leader runs one Purger at a time,
// and should two ever run at once (a leader that lost its term and does
// not know yet), each job is still purged once: the purge is appended on
// the job's last sequence, so the second decides again and finds it gone.
func TestTwoPurgersPurgeEachJobOnce(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for range 20 {
		ids = append(ids, h.cancelled().Job.ID)
	}
	other := testkit.Store(t, testkit.Conn(t, h.srv), "other-engine")
	cfg := engine.PurgerConfig{Retention: time.Nanosecond, Interval: time.Hour, Max: 100, Log: testkit.Logger(t)}
	p1, p2 := newPurger(h.st, cfg), newPurger(other, cfg)
	var wg sync.WaitGroup
	for _, p := range []*maintenance.Purger{p1, p2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := p.Pass(h.ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := p1.Purged() + p2.Purged(); n != 20 {
		t.Fatalf("purged %d + %d, want 20 in all", p1.Purged(), p2.Purged())
	}
	for _, id := range ids {
		wantGone(t, h, id)
		purges := 0
		// Read from the log itself: the history of a purged job is gone.
		if _, err := streams.ReadSubject(h.ctx, h.st.NC, streams.EventsStream, streams.EventFilter(id), 1, func(_ uint64, data []byte) error {
			ev, err := streams.DecodeEvent(data)
			if err == nil && ev.Type == domain.EvPurged {
				purges++
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if purges != 1 {
			t.Fatalf("job %s has %d job.purged events", id, purges)
		}
	}
}

// coordWorker runs "coord" jobs, which fan out to 3 "child" jobs.
func (h *harness) coordWorker() {
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4, Handlers: map[string]engine.Handler{
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(3, "child", func(i int) string { return strconv.Itoa(i) })}
		},
		"child": func(ctx context.Context, task *engine.Task) ([]byte, error) { return nil, nil },
	}})
}

// cancelledIn is a cancelled job of namespace ns.
func (h *harness) cancelledIn(ns string) string {
	h.t.Helper()
	sub := h.submit(commands.SubmitRequest{Type: "demo.idle", Namespace: ns})
	if _, err := h.st.Cancel(h.ctx, sub.Job.ID, "test"); err != nil {
		h.t.Fatal(err)
	}
	return sub.Job.ID
}

// waitPurged waits until the purger purged n jobs in all, then checks
// that each of ids is gone.
func waitPurged(t *testing.T, h *harness, p *maintenance.Purger, n int64, ids ...string) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if got := p.Purged(); got != n {
			return fmt.Errorf("purged %d, want %d", got, n)
		}
		return nil
	})
	for _, id := range ids {
		wantGone(t, h, id)
	}
}

// startScanned starts a Purger with cfg and waits for its first full
// scan; the Purger stops with the test.
func startScanned(t *testing.T, h *harness, cfg engine.PurgerConfig) *maintenance.Purger {
	t.Helper()
	cfg.Log = testkit.Logger(t)
	p := newPurger(h.st, cfg)
	if err := p.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background()) })
	testkit.WaitFor(t, 5*time.Second, func() error {
		if p.Scans() != 1 || p.Queued() != 0 {
			return fmt.Errorf("%d scans, %d queued", p.Scans(), p.Queued())
		}
		return nil
	})
	return p
}

// setRetention gives namespace ns a retention of its own.
func (h *harness) setRetention(ns string, r time.Duration) {
	h.t.Helper()
	if _, err := h.st.Types.SetNamespace(h.ctx, ns, domain.NamespaceSettings{Retention: domain.Period(r)}, "test"); err != nil {
		h.t.Fatal(err)
	}
}

// Between two full scans, a pass reads only the log: jobs that end after
// the first scan are purged once they are older than their retention,
// without another read of the whole bucket; one within it is kept.
func TestPurgerReadsTheLogBetweenScans(t *testing.T) {
	h := newHarness(t)
	h.setRetention("keep", time.Hour)
	kept := h.cancelledIn("keep") // seen by the first scan: its retention is followed in the log
	// A namespace with a shorter retention of its own and no job yet: the
	// log is read under its retention too.
	h.setRetention("brief", 100*time.Millisecond)
	p := startScanned(t, h, engine.PurgerConfig{Retention: 300 * time.Millisecond, Interval: 20 * time.Millisecond, FullScan: time.Hour})
	var ids []string
	for range 3 {
		ids = append(ids, h.cancelled().Job.ID)
	}
	later := h.cancelledIn("keep")
	ids = append(ids, h.cancelledIn("brief"))
	waitPurged(t, h, p, 4, ids...)
	if s := p.Scans(); s != 1 {
		t.Fatalf("%d full scans, want the first one only", s)
	}
	for _, id := range []string{kept, later} {
		if j := h.get(id); j.State != domain.StateCancelled {
			t.Fatalf("job %s within its namespace's retention is %s", id, j.State)
		}
	}
	h.verify()
}

// A namespace the reads of the log do not follow under its retention (a
// new retention, or one that changed) makes the next pass a full scan,
// which finds its expired jobs.
func TestPurgerScansAgainWhenARetentionChanges(t *testing.T) {
	h := newHarness(t)
	h.setRetention("keep", time.Hour)
	kept := h.cancelledIn("keep")
	p := startScanned(t, h, engine.PurgerConfig{Retention: 300 * time.Millisecond, Interval: 20 * time.Millisecond, FullScan: time.Hour})
	// A namespace that sets a retention of its own after the first scan:
	// no read of the log follows it, so the next pass scans again.
	h.setRetention("short", 100*time.Millisecond)
	short := h.cancelledIn("short")
	waitPurged(t, h, p, 1, short)
	if s := p.Scans(); s != 2 {
		t.Fatalf("%d full scans, want 2", s)
	}
	// A retention lowered: its jobs lie behind where the read of the
	// new retention is.
	h.setRetention("keep", 200*time.Millisecond)
	waitPurged(t, h, p, 2, kept)
	if s := p.Scans(); s != 3 {
		t.Fatalf("%d full scans, want 3", s)
	}
	h.verify()
}

// The jobs a pass took off its queue but did not look at (its Max was
// reached by a parent purged with its children) stay first in the queue:
// the log's read is past them.
func TestPurgerKeepsWhatAPassDidNotReach(t *testing.T) {
	h := newHarness(t)
	h.coordWorker()
	parent := h.submit(commands.SubmitRequest{Type: "coord"})
	h.waitState(parent.Job.ID, domain.StateSucceeded, 20*time.Second)
	a, b := h.cancelled().Job.ID, h.cancelled().Job.ID // ended after the parent: after it in the queue
	p := newPurger(h.st, engine.PurgerConfig{Retention: 200 * time.Millisecond, FullScan: time.Hour, Max: 2, Log: testkit.Logger(t)})
	testkit.WaitFor(t, 5*time.Second, func() error {
		ids, err := engine.Expired(h.ctx, h.st, func(string) time.Duration { return 200 * time.Millisecond }, "", 100)
		if err != nil || len(ids) != 3 {
			return fmt.Errorf("expired %v, %v; want the parent and two jobs", ids, err)
		}
		return nil
	})
	for i, want := range []int{4, 2, 0} { // the parent with its 3 children, then a and b
		if n, err := p.Pass(h.ctx); err != nil || n != want {
			t.Fatalf("pass %d: %d, %v; want %d", i+1, n, err, want)
		}
	}
	for _, id := range []string{parent.Job.ID, a, b} {
		wantGone(t, h, id)
	}
	if s := p.Scans(); s != 1 {
		t.Fatalf("%d full scans, want 1", s)
	}
}

// A parent refused while a child linked to it ran is purged once the
// child has ended and is as old as the retention: the log's read finds the
// child, and the child's parent is looked at again.
func TestPurgerTriesARefusedParentAgain(t *testing.T) {
	h := newHarness(t)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4, Handlers: map[string]engine.Handler{
		"quick": func(ctx context.Context, task *engine.Task) ([]byte, error) { return nil, nil },
	}})
	parent := h.submit(commands.SubmitRequest{Type: "quick"})
	h.waitState(parent.Job.ID, domain.StateSucceeded, 20*time.Second)
	child := h.submit(commands.SubmitRequest{Type: "nobody", Queue: "parked", Parent: parent.Job.ID})
	// Old enough that the first scan finds the parent expired, and that the
	// log's reads start after its end: only the child can bring it back.
	testkit.WaitFor(t, 5*time.Second, func() error {
		if ago := time.Since(h.get(parent.Job.ID).FinishedAt); ago < time.Second {
			return fmt.Errorf("the parent ended %s ago", ago)
		}
		return nil
	})
	// The first pass finds the parent and is refused.
	p := startScanned(t, h, engine.PurgerConfig{Retention: 300 * time.Millisecond, Interval: 20 * time.Millisecond, FullScan: time.Hour})
	if j := h.get(parent.Job.ID); j.State != domain.StateSucceeded {
		t.Fatalf("parent %s while its child runs", j.State)
	}
	if _, err := h.st.Cancel(h.ctx, child.Job.ID, "test"); err != nil {
		t.Fatal(err)
	}
	waitPurged(t, h, p, 2, parent.Job.ID, child.Job.ID)
	if s := p.Scans(); s != 1 {
		t.Fatalf("%d full scans, want 1", s)
	}
}

// flakyNamespaces is a registry whose next fail reads fail.
type flakyNamespaces struct {
	reg  maintenance.Namespaces
	fail atomic.Int32
}

func (f *flakyNamespaces) Namespaces(ctx context.Context) ([]*domain.NamespaceRecord, error) {
	if f.fail.Add(-1) >= 0 {
		return nil, errors.New("registry: no answer")
	}
	return f.reg.Namespaces(ctx)
}

// A registry that does not answer purges nothing, and loses nothing: the
// job left queued by the pass before (its Max reached) is purged by the
// pass after.
func TestPurgerKeepsItsQueueWhenTheRegistryFails(t *testing.T) {
	h := newHarness(t)
	reg := &flakyNamespaces{reg: h.st.Types}
	p := newPurger(h.st, engine.PurgerConfig{Retention: 200 * time.Millisecond, FullScan: time.Hour, Max: 1,
		Namespaces: reg, Log: testkit.Logger(t)})
	if n, err := p.Pass(h.ctx); err != nil || n != 0 || p.Scans() != 1 {
		t.Fatalf("first pass: %d, %v, %d scans", n, err, p.Scans())
	}
	a, b := h.cancelled().Job.ID, h.cancelled().Job.ID
	testkit.WaitFor(t, 10*time.Second, func() error { // both older than the retention and its slack (100 ms)
		if ago := time.Since(h.get(b).FinishedAt); ago < 400*time.Millisecond {
			return fmt.Errorf("b ended %s ago", ago)
		}
		return nil
	})
	if n, err := p.Pass(h.ctx); err != nil || n != 1 || p.Queued() != 1 { // both found in the log, Max 1
		t.Fatalf("second pass: %d, %v, %d queued", n, err, p.Queued())
	}
	reg.fail.Store(1)
	if n, err := p.Pass(h.ctx); err == nil || n != 0 || p.Queued() != 1 {
		t.Fatalf("a pass without the registry: %d, %v, %d queued", n, err, p.Queued())
	}
	if n, err := p.Pass(h.ctx); err != nil || n != 1 {
		t.Fatalf("the pass after: %d, %v", n, err)
	}
	wantGone(t, h, a)
	wantGone(t, h, b)
	if s := p.Scans(); s != 1 {
		t.Fatalf("%d full scans, want 1", s)
	}
}

// A job the log's read finds whose end, by the engine's clock, is later
// than the server stored it (the engine's clock ahead by more than the
// slack) is not expired yet when found; it is kept and purged once it
// is, without another full scan.
func TestPurgerKeepsAJobEndedAheadOfTheServersClock(t *testing.T) {
	h := newHarness(t)
	p := startScanned(t, h, engine.PurgerConfig{Retention: 300 * time.Millisecond, Interval: 20 * time.Millisecond, FullScan: time.Hour})
	id := h.submit(commands.SubmitRequest{Type: "demo.idle"}).Job.ID
	st := engine.Internal(h.st)
	cur, err := st.Current(h.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ahead := 2 * time.Second
	if _, _, err := st.Apply(h.ctx, "cancel", cur, func(j *domain.Job) (*domain.Event, error) {
		return commands.Cancel(j, "test", "test", time.Now().Add(ahead).UTC())
	}); err != nil {
		t.Fatal(err)
	}
	waitPurged(t, h, p, 1, id)
	if s := p.Scans(); s != 1 {
		t.Fatalf("%d full scans, want 1", s)
	}
}
