package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/runtime"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestQuietWhileStarting: Quiet and Stop called while Start makes its
// consumers return at once; Start then ends unstarted (ErrShutdown), with
// the worker's presence left, and claims nothing.
func TestQuietWhileStarting(t *testing.T) {
	for _, end := range []string{"quiet", "stop"} {
		t.Run(end, func(t *testing.T) {
			srv := testkit.Server(t)
			ctx := testkit.Ctx(t)
			st := storetest.Open(t, testkit.Conn(t, srv), "client")
			wst := storetest.Open(t, testkit.Conn(t, srv), "w")
			reached, proceed := make(chan struct{}), make(chan struct{})
			var rt *runtime.Runtime
			runtime.SetConnectHook(t.Cleanup, func(r *runtime.Runtime) {
				if r == rt {
					close(reached)
					<-proceed
				}
			})
			rt, err := runtime.New(wst, runtime.Config{WorkerID: "w-" + end, Queue: "qs", Log: testkit.Logger(t),
				Handlers: map[string]runtime.Handler{"work": func(context.Context, *runtime.Task) ([]byte, error) { return nil, nil }}})
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan error, 1)
			go func() { started <- rt.Start(ctx) }()
			waitClosed(t, reached, "Start making its consumers")
			ended := make(chan struct{})
			go func() {
				if end == "quiet" {
					rt.Quiet()
				} else {
					rt.Stop(ctx)
				}
				close(ended)
			}()
			waitClosed(t, ended, end+" while Start makes its consumers")
			close(proceed)
			select {
			case err := <-started:
				if !errors.Is(err, runtime.ErrShutdown) {
					t.Fatalf("Start after %s: %v, want ErrShutdown", end, err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Start did not end")
			}
			if err := rt.Start(ctx); !errors.Is(err, runtime.ErrShutdown) {
				t.Fatalf("Start again: %v", err)
			}
			// It left the worker's presence: no record of the worker.
			testkit.WaitFor(t, 10*time.Second, func() error {
				if w, err := wst.Workers().Get(ctx, "w-"+end); err == nil {
					return fmt.Errorf("the worker's record is still there: %+v", w.WorkerRecord)
				}
				return nil
			})
			// And it claims nothing: a job of its type runs on another worker.
			res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "work", Queue: "qs"})
			if err != nil {
				t.Fatal(err)
			}
			other, err := runtime.New(storetest.Open(t, testkit.Conn(t, srv), "w2"), runtime.Config{WorkerID: "w2", Queue: "qs",
				Log: testkit.Logger(t), Handlers: map[string]runtime.Handler{"work": func(context.Context, *runtime.Task) ([]byte, error) { return nil, nil }}})
			if err != nil {
				t.Fatal(err)
			}
			if err := other.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Stop(context.Background()) })
			testkit.WaitFor(t, 10*time.Second, func() error {
				snap, err := st.Current(ctx, res.Job.ID)
				if err != nil {
					return err
				}
				if j := snap.Job; j.State != domain.StateSucceeded || j.Worker != "w2" {
					return fmt.Errorf("job %s on %q, want succeeded on w2", j.State, j.Worker)
				}
				return nil
			})
		})
	}
}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatalf("not within 5 s: %s", what)
	}
}
