package runtime_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/runtime"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// aheadRig is a runtime with one slot, claiming one job ahead whatever
// its estimate says, and two handlers: "fast" reports its job on ran;
// "slow" reports on blocking that it runs, then waits for a token on
// release (or for release to be closed).
type aheadRig struct {
	t                 *testing.T
	ctx               context.Context
	st                *engine.Store
	rt                *engine.Runtime
	claimed, ran      chan string
	blocking, release chan struct{}
	freed             sync.Once
}

func newAheadRig(t *testing.T) *aheadRig {
	srv := testkit.Server(t)
	g := &aheadRig{t: t, ctx: testkit.Ctx(t), st: testkit.Store(t, testkit.Conn(t, srv), "client"),
		claimed: make(chan string, 16), ran: make(chan string, 16),
		blocking: make(chan struct{}, 2), release: make(chan struct{}, 2)}
	runtime.SetClaimedHook(t.Cleanup, func(id string) { g.claimed <- id })
	rt, err := engine.NewRuntime(testkit.Store(t, testkit.Conn(t, srv), "w"), engine.RuntimeConfig{
		WorkerID: "w", Concurrency: 1, ShutdownGrace: 20 * time.Second, Log: testkit.Logger(t),
		Handlers: map[string]engine.Handler{
			"fast": func(_ context.Context, task *engine.Task) ([]byte, error) {
				g.ran <- task.Job.ID
				return nil, nil
			},
			"slow": func(context.Context, *engine.Task) ([]byte, error) {
				g.blocking <- struct{}{}
				<-g.release
				return nil, nil
			},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(g.ctx); err != nil {
		t.Fatal(err)
	}
	g.rt = rt
	rt.SetAhead(1) // as handlers far faster than a claim would make it
	t.Cleanup(func() {
		g.freeAll()
		rt.Stop(context.Background())
	})
	return g
}

// freeAll lets every slow handler end.
func (g *aheadRig) freeAll() { g.freed.Do(func() { close(g.release) }) }

func (g *aheadRig) submit(typ string, timeout time.Duration) string {
	g.t.Helper()
	req := &commands.SubmitRequest{Type: typ}
	if timeout > 0 {
		d := commands.Duration(timeout)
		req.Timeout = &d
	}
	res, err := g.st.Submit(g.ctx, req)
	if err != nil {
		g.t.Fatal(err)
	}
	return res.Snapshot.Job.ID
}

func (g *aheadRig) waitClaimed(id string) {
	g.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case got := <-g.claimed:
			if got == id {
				return
			}
		case <-timeout:
			g.t.Fatalf("%s not claimed", id)
		}
	}
}

func (g *aheadRig) waitRan(id string) {
	g.t.Helper()
	if got := <-g.ran; got != id {
		g.t.Fatalf("ran %s, want %s", got, id)
	}
}

func (g *aheadRig) events(id string) []string {
	g.t.Helper()
	var got []string
	if err := g.st.History(g.ctx, id, 0, false, func(e *domain.Event) error { got = append(got, e.Type); return nil }); err != nil {
		g.t.Fatal(err)
	}
	return got
}

func (g *aheadRig) waitEvents(id string, want ...string) {
	g.t.Helper()
	testkit.WaitFor(g.t, 10*time.Second, func() error {
		if got := g.events(id); !slices.Equal(got, want) {
			return fmt.Errorf("events %v, want %v", got, want)
		}
		return nil
	})
}

func (g *aheadRig) waitState(id string, want domain.State) {
	g.t.Helper()
	testkit.WaitFor(g.t, 10*time.Second, func() error {
		snap, err := g.st.Record(g.ctx, id)
		if err != nil {
			return err
		}
		if snap.Job.State != want || snap.Job.Retries != 0 {
			return fmt.Errorf("%s after %d retries, want %s after none", snap.Job.State, snap.Job.Retries, want)
		}
		return nil
	})
}

// With every slot busy and handlers fast next to a claim, the next job is
// claimed ahead: its claim lands while the slot is still taken, and its
// handler runs once the slot frees. When no slot frees in time, or the
// worker stops, it goes back to its queue without running, and runs later.
func TestClaimAhead(t *testing.T) {
	for _, end := range []string{"slot frees", "no slot in time", "worker stops"} {
		t.Run(end, func(t *testing.T) {
			g := newAheadRig(t)
			// A fast job first: the runtime learns how long a claim takes.
			warm := g.submit("fast", 0)
			g.waitClaimed(warm)
			g.waitRan(warm)
			slow := g.submit("slow", 0)
			<-g.blocking // the only slot is taken
			id := g.submit("fast", 0)
			g.waitClaimed(id) // claimed ahead, the slot still taken
			// As the log has it: the claim's record is written once its
			// handler has run store.ClaimRecordAfter, or by its outcome.
			snap, err := g.st.Current(g.ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Job.State != domain.StateRunning {
				t.Fatalf("claimed ahead: %s, want running", snap.Job.State)
			}
			switch end {
			case "slot frees":
				g.freeAll()
				g.waitEvents(id, domain.EvSubmitted, domain.EvStarted, domain.EvSucceeded)
			case "no slot in time":
				// Given back after its wait (1 s at least), without running,
				// and not claimed ahead again while the slot stays taken:
				// it waits for the slot in the fetch.
				g.waitEvents(id, domain.EvSubmitted, domain.EvStarted, domain.EvRequeued)
				if n := g.rt.AheadAllowed(); n != 0 {
					t.Fatalf("after a job found no slot in time, %d may be claimed ahead, want 0", n)
				}
				select {
				case got := <-g.ran:
					t.Fatalf("%s ran while the slot was taken", got)
				default:
				}
				g.freeAll()
				g.waitEvents(id, domain.EvSubmitted, domain.EvStarted, domain.EvRequeued, domain.EvStarted, domain.EvSucceeded)
			case "worker stops":
				// Given back at once, while the slow job still runs in
				// Stop's grace.
				stopped := make(chan struct{})
				go func() { g.rt.Stop(context.Background()); close(stopped) }()
				g.waitEvents(id, domain.EvSubmitted, domain.EvStarted, domain.EvRequeued)
				select {
				case <-stopped:
					t.Fatal("Stop returned while a handler ran in its grace")
				default:
				}
				g.freeAll()
				<-stopped
				snap, err := g.st.Record(g.ctx, slow)
				if err != nil {
					t.Fatal(err)
				}
				if snap.Job.State != domain.StateSucceeded {
					t.Fatalf("slow job %s, want succeeded within the grace", snap.Job.State)
				}
				g.waitState(id, domain.StateQueued)
				return
			}
			g.waitRan(id)
			select {
			case got := <-g.ran:
				t.Fatalf("%s ran twice", got)
			default:
			}
		})
	}
}

// A job never fails on its execution timeout without having run, claimed
// ahead or waiting behind one that was: here the only slot runs a job that
// was claimed ahead, and the next job, with a timeout of 1.5 s, must wait
// unclaimed, or be claimed ahead and given back, not time out.
func TestNoTimeoutWithoutRunning(t *testing.T) {
	g := newAheadRig(t)
	warm := g.submit("fast", 0)
	g.waitRan(warm)
	g.submit("slow", 0)
	<-g.blocking // the slot is taken
	ahead := g.submit("slow", 0)
	g.waitClaimed(ahead) // claimed ahead
	g.release <- struct{}{}
	<-g.blocking // the job claimed ahead runs in the slot
	const timeout = 1500 * time.Millisecond
	id := g.submit("fast", timeout)
	deadline := time.Now().Add(timeout + time.Second)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if time.Now().Before(deadline) {
			return fmt.Errorf("its timeout has not passed yet")
		}
		return nil
	})
	if got := g.events(id); slices.Contains(got, domain.EvFailed) || slices.Contains(got, domain.EvRetryScheduled) {
		t.Fatalf("events %v: it failed without running", got)
	}
	g.freeAll()
	g.waitState(id, domain.StateSucceeded)
	g.waitRan(id)
}

// A job whose claim is slow does not hold back the start of a job fetched
// after it when a slot is free: a slot waits for an earlier claim only
// about two claims' time.
func TestASlowClaimHoldsBackNoOtherStart(t *testing.T) {
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "client")
	stall := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-stall:
		default:
			close(stall)
		}
	})
	var first string
	stalled := make(chan struct{})
	runtime.SetClaimedHook(t.Cleanup, func(id string) {
		if id == first {
			close(stalled)
			<-stall // its claim landed; it waits here as a slow claim would
		}
	})
	ran := make(chan string, 4)
	rt, err := engine.NewRuntime(testkit.Store(t, testkit.Conn(t, srv), "w"), engine.RuntimeConfig{
		WorkerID: "w", Concurrency: 4, Log: testkit.Logger(t),
		Handlers: map[string]engine.Handler{"work": func(_ context.Context, task *engine.Task) ([]byte, error) {
			ran <- task.Job.ID
			return nil, nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "work"})
	if err != nil {
		t.Fatal(err)
	}
	first = res.Snapshot.Job.ID
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-stalled
	res, err = st.Submit(ctx, &commands.SubmitRequest{Type: "work"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-ran:
		if got != res.Snapshot.Job.ID {
			t.Fatalf("ran %s, want %s", got, res.Snapshot.Job.ID)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the second job did not start while the first one's claim was slow")
	}
	close(stall)
	if got := <-ran; got != first {
		t.Fatalf("ran %s, want %s", got, first)
	}
}
