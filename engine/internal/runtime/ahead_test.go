package runtime_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/runtime"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// With every slot busy and handlers fast next to a claim, the next job is
// claimed ahead: its claim lands while the slot is still taken, and its
// handler runs once the slot frees. When no slot frees in time, or the
// worker stops, it goes back to its queue without running, and runs later.
func TestClaimAhead(t *testing.T) {
	for _, end := range []string{"slot frees", "no slot in time", "worker stops"} {
		t.Run(end, func(t *testing.T) {
			srv := testkit.Server(t)
			ctx := testkit.Ctx(t)
			st := testkit.Store(t, testkit.Conn(t, srv), "client")
			claimed := make(chan string, 16)
			runtime.SetClaimedHook(t.Cleanup, func(id string) { claimed <- id })
			blocking, gate := make(chan struct{}, 1), make(chan struct{})
			ran := make(chan string, 16)
			rt, err := engine.NewRuntime(testkit.Store(t, testkit.Conn(t, srv), "w"), engine.RuntimeConfig{
				WorkerID: "w", Concurrency: 1, ShutdownGrace: 20 * time.Second, Log: testkit.Logger(t),
				Handlers: map[string]engine.Handler{
					"fast": func(_ context.Context, task *engine.Task) ([]byte, error) {
						ran <- task.Job.ID
						return nil, nil
					},
					"slow": func(context.Context, *engine.Task) ([]byte, error) {
						blocking <- struct{}{}
						<-gate
						return nil, nil
					},
				}})
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.Start(ctx); err != nil {
				t.Fatal(err)
			}
			rt.SetAhead(1) // as handlers far faster than a claim would make it
			stopped := make(chan struct{})
			t.Cleanup(func() {
				select {
				case <-gate:
				default:
					close(gate)
				}
				rt.Stop(context.Background())
			})
			submit := func(typ string) string {
				t.Helper()
				res, err := st.Submit(ctx, &commands.SubmitRequest{Type: typ})
				if err != nil {
					t.Fatal(err)
				}
				return res.Snapshot.Job.ID
			}
			waitClaimed := func(id string) {
				t.Helper()
				timeout := time.After(10 * time.Second)
				for {
					select {
					case got := <-claimed:
						if got == id {
							return
						}
					case <-timeout:
						t.Fatalf("%s not claimed", id)
					}
				}
			}
			// A fast job first: the runtime learns how long a claim and a
			// handler take.
			warm := submit("fast")
			waitClaimed(warm)
			if got := <-ran; got != warm {
				t.Fatalf("ran %s, want %s", got, warm)
			}
			slow := submit("slow")
			<-blocking // the only slot is taken
			id := submit("fast")
			waitClaimed(id) // claimed ahead, the slot still taken
			events := func() []string {
				var got []string
				if err := st.History(ctx, id, 0, false, func(e *domain.Event) error { got = append(got, e.Type); return nil }); err != nil {
					t.Fatal(err)
				}
				return got
			}
			waitEvents := func(want ...string) {
				t.Helper()
				testkit.WaitFor(t, 10*time.Second, func() error {
					if got := events(); !slices.Equal(got, want) {
						return fmt.Errorf("events %v, want %v", got, want)
					}
					return nil
				})
			}
			snap, err := st.Record(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if snap.Job.State != domain.StateRunning {
				t.Fatalf("claimed ahead: %s, want running", snap.Job.State)
			}
			switch end {
			case "slot frees":
				close(gate)
				waitEvents(domain.EvSubmitted, domain.EvStarted, domain.EvSucceeded)
			case "no slot in time":
				// Given back after its wait (1 s at least), without running,
				// and not claimed ahead again while the slot stays taken:
				// it waits for the slot in the fetch.
				waitEvents(domain.EvSubmitted, domain.EvStarted, domain.EvRequeued)
				if n := rt.AheadAllowed(); n != 0 {
					t.Fatalf("after a job found no slot in time, %d may be claimed ahead, want 0", n)
				}
				select {
				case got := <-ran:
					t.Fatalf("%s ran while the slot was taken", got)
				default:
				}
				close(gate)
				testkit.WaitFor(t, 10*time.Second, func() error {
					got := events()
					if want := []string{domain.EvSubmitted, domain.EvStarted, domain.EvRequeued, domain.EvStarted, domain.EvSucceeded}; !slices.Equal(got, want) {
						return fmt.Errorf("events %v, want %v", got, want)
					}
					return nil
				})
			case "worker stops":
				// Given back at once, while the slow job still runs in
				// Stop's grace.
				go func() { rt.Stop(context.Background()); close(stopped) }()
				waitEvents(domain.EvSubmitted, domain.EvStarted, domain.EvRequeued)
				select {
				case <-stopped:
					t.Fatal("Stop returned while a handler ran in its grace")
				default:
				}
				close(gate)
				<-stopped
				snap, err := st.Record(ctx, slow)
				if err != nil {
					t.Fatal(err)
				}
				if snap.Job.State != domain.StateSucceeded {
					t.Fatalf("slow job %s, want succeeded within the grace", snap.Job.State)
				}
				snap, err = st.Record(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if snap.Job.State != domain.StateQueued || snap.Job.Retries != 0 {
					t.Fatalf("given back: %s after %d retries, want queued after none", snap.Job.State, snap.Job.Retries)
				}
				return
			}
			if got := <-ran; got != id {
				t.Fatalf("ran %s, want %s", got, id)
			}
			select {
			case got := <-ran:
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
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "client")
	claimed := make(chan string, 16)
	runtime.SetClaimedHook(t.Cleanup, func(id string) { claimed <- id })
	blocking, release := make(chan struct{}, 2), make(chan struct{}, 2)
	ran := make(chan string, 16)
	rt, err := engine.NewRuntime(testkit.Store(t, testkit.Conn(t, srv), "w"), engine.RuntimeConfig{
		WorkerID: "w", Concurrency: 1, Log: testkit.Logger(t),
		Handlers: map[string]engine.Handler{
			"fast": func(_ context.Context, task *engine.Task) ([]byte, error) {
				ran <- task.Job.ID
				return nil, nil
			},
			"slow": func(context.Context, *engine.Task) ([]byte, error) {
				blocking <- struct{}{}
				<-release
				return nil, nil
			},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rt.SetAhead(1) // as handlers far faster than a claim would make it
	t.Cleanup(func() {
		release <- struct{}{}
		release <- struct{}{}
		rt.Stop(context.Background())
	})
	submit := func(typ string, timeout time.Duration) string {
		t.Helper()
		req := &commands.SubmitRequest{Type: typ}
		if timeout > 0 {
			d := commands.Duration(timeout)
			req.Timeout = &d
		}
		res, err := st.Submit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return res.Snapshot.Job.ID
	}
	waitClaimed := func(id string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case got := <-claimed:
				if got == id {
					return
				}
			case <-timeout:
				t.Fatalf("%s not claimed", id)
			}
		}
	}
	warm := submit("fast", 0)
	if got := <-ran; got != warm {
		t.Fatalf("ran %s, want %s", got, warm)
	}
	submit("slow", 0)
	<-blocking // the slot is taken
	ahead := submit("slow", 0)
	waitClaimed(ahead) // claimed ahead
	release <- struct{}{}
	<-blocking // the job claimed ahead runs in the slot
	const timeout = 1500 * time.Millisecond
	id := submit("fast", timeout)
	deadline := time.Now().Add(timeout + time.Second)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if time.Now().Before(deadline) {
			return fmt.Errorf("its timeout has not passed yet")
		}
		return nil
	})
	var got []string
	if err := st.History(ctx, id, 0, false, func(e *domain.Event) error { got = append(got, e.Type); return nil }); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(got, domain.EvFailed) || slices.Contains(got, domain.EvRetryScheduled) {
		t.Fatalf("events %v: it failed without running", got)
	}
	release <- struct{}{}
	testkit.WaitFor(t, 10*time.Second, func() error {
		snap, err := st.Record(ctx, id)
		if err != nil {
			return err
		}
		if snap.Job.State != domain.StateSucceeded || snap.Job.Retries != 0 {
			return fmt.Errorf("%s after %d retries, want succeeded after none", snap.Job.State, snap.Job.Retries)
		}
		return nil
	})
	if got := <-ran; got != id {
		t.Fatalf("ran %s, want %s", got, id)
	}
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
