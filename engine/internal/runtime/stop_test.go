package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/runtime"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// A claim that lands as Stop begins: the record says running, so the job
// runs within the grace like any running handler. Only a claim landing
// after the grace, when Stop has already cancelled the runs it knew of, is
// given back at once without starting its handler.
func TestClaimLandingAsStopBegins(t *testing.T) {
	for _, tc := range []struct {
		name  string
		grace time.Duration
		until func(*runtime.Runtime) bool // holds the claim until this is true
		want  []string
		state domain.State
		ran   bool
	}{
		{"before the grace ends: runs", 10 * time.Second, (*runtime.Runtime).Stopping,
			[]string{domain.EvSubmitted, domain.EvStarted, domain.EvSucceeded}, domain.StateSucceeded, true},
		{"after the grace: given back", 50 * time.Millisecond, (*runtime.Runtime).GraceOver,
			[]string{domain.EvSubmitted, domain.EvStarted, domain.EvRequeued}, domain.StateQueued, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := testkit.Server(t)
			ctx := testkit.Ctx(t)
			st := testkit.Store(t, testkit.Conn(t, srv), "client")
			claimed, proceed := make(chan string, 1), make(chan struct{})
			runtime.SetClaimedHook(t.Cleanup, func(id string) {
				claimed <- id
				<-proceed
			})
			ran := make(chan struct{}, 1)
			rt, err := engine.NewRuntime(testkit.Store(t, testkit.Conn(t, srv), "w"), engine.RuntimeConfig{
				WorkerID: "w", ShutdownGrace: tc.grace, Log: testkit.Logger(t),
				Handlers: map[string]engine.Handler{"work": func(context.Context, *engine.Task) ([]byte, error) {
					ran <- struct{}{}
					return []byte(`"done"`), nil
				}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.Start(ctx); err != nil {
				t.Fatal(err)
			}
			res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "work"})
			if err != nil {
				t.Fatal(err)
			}
			id := res.Snapshot.Job.ID
			if got := <-claimed; got != id {
				t.Fatalf("claimed %s, want %s", got, id)
			}
			stopped := make(chan struct{})
			go func() { rt.Stop(context.Background()); close(stopped) }()
			testkit.WaitFor(t, 10*time.Second, func() error {
				if !tc.until(rt) {
					return fmt.Errorf("stop not far enough")
				}
				return nil
			})
			close(proceed)
			select {
			case <-stopped:
			case <-time.After(20 * time.Second):
				t.Fatal("Stop did not return")
			}
			// Stop waits a bounded time for a run given back after the
			// grace: its outcome may be recorded after Stop returned.
			testkit.WaitFor(t, 10*time.Second, func() error {
				snap, err := st.Record(ctx, id)
				if err != nil {
					return err
				}
				if snap.Job.State != tc.state || rt.Running() != 0 {
					return fmt.Errorf("job is %s, %d running", snap.Job.State, rt.Running())
				}
				return nil
			})
			if got := len(ran) == 1; got != tc.ran {
				t.Fatalf("handler ran: %v, want %v", got, tc.ran)
			}
			var got []string
			if err := st.History(ctx, id, 0, false, func(e *domain.Event) error { got = append(got, e.Type); return nil }); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("events %v, want %v", got, tc.want)
			}
		})
	}
}

// A batch whose handler is about to run when Stop's grace ends (Stop has
// cancelled the batches it knew of) is handed back without running, and
// another worker runs it.
func TestBatchLandingAfterTheGraceIsGivenBack(t *testing.T) {
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "client")
	eng := engine.NewEngine(testkit.Store(t, testkit.Conn(t, srv), "engine"),
		engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Log: testkit.Logger(t)})
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	held, proceed := make(chan string, 1), make(chan struct{})
	runtime.SetClaimedHook(t.Cleanup, func(key string) {
		if strings.Contains(key, "/") { // a batch: parent/piece
			select {
			case held <- key:
			default:
			}
			<-proceed
		}
	})
	ran := make(chan string, 4)
	batches := func(worker string) map[string]engine.BatchHandler {
		return map[string]engine.BatchHandler{"piece": func(context.Context, *engine.BatchTask) error {
			ran <- worker
			return nil
		}}
	}
	noRetry := 0
	start := func(cfg engine.RuntimeConfig) *engine.Runtime {
		cfg.Log = testkit.Logger(t)
		rt, err := engine.NewRuntime(testkit.Store(t, testkit.Conn(t, srv), cfg.WorkerID), cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := rt.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Stop(context.Background()) })
		return rt
	}
	first := start(engine.RuntimeConfig{WorkerID: "first", ShutdownGrace: 50 * time.Millisecond, Batches: batches("first"),
		Handlers: map[string]engine.Handler{"coord": func(context.Context, *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{BatchType: "piece", Batches: [][]byte{[]byte(`1`)}, BatchMaxRetries: &noRetry}
		}}})
	res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "coord"})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Snapshot.Job.ID
	if key := <-held; key != id+"/1" {
		t.Fatalf("held %s, want %s/1", key, id)
	}
	stopped := make(chan struct{})
	go func() { first.Stop(context.Background()); close(stopped) }()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if !first.GraceOver() {
			return fmt.Errorf("the grace is not over")
		}
		return nil
	})
	close(proceed)
	<-stopped
	start(engine.RuntimeConfig{WorkerID: "second", Batches: batches("second")})
	testkit.WaitFor(t, 20*time.Second, func() error {
		snap, err := st.Record(ctx, id)
		if err != nil {
			return err
		}
		if snap.Job.State != domain.StateSucceeded {
			return fmt.Errorf("parent is %s", snap.Job.State)
		}
		return nil
	})
	close(ran)
	var who []string
	for w := range ran {
		who = append(who, w)
	}
	if fmt.Sprint(who) != "[second]" {
		t.Fatalf("the batch ran on %v, want [second]", who)
	}
}

// A runtime quieted or stopped does not start again, and one quieted
// before it started never starts: Start says why (ErrShutdown).
func TestQuietOrStoppedRuntimeDoesNotStart(t *testing.T) {
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "w")
	for _, end := range []struct {
		name    string
		started bool
		end     func(*engine.Runtime)
	}{
		{"quieted before Start", false, (*engine.Runtime).Quiet},
		{"quieted", true, (*engine.Runtime).Quiet},
		{"stopped", true, func(rt *engine.Runtime) { rt.Stop(ctx) }},
	} {
		rt, err := engine.NewRuntime(st, engine.RuntimeConfig{WorkerID: "w", Log: testkit.Logger(t),
			Handlers: map[string]engine.Handler{"work": func(context.Context, *engine.Task) ([]byte, error) { return nil, nil }}})
		if err != nil {
			t.Fatal(err)
		}
		if end.started {
			if err := rt.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
		end.end(rt)
		if err := rt.Start(ctx); !errors.Is(err, runtime.ErrShutdown) {
			t.Fatalf("%s: Start: %v, want ErrShutdown", end.name, err)
		}
		rt.Stop(ctx)
	}
}
