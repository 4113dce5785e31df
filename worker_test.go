package jetflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

func testClient(t *testing.T) *jetflow.Client {
	t.Helper()
	srv := testkit.Server(t)
	client, err := jetflow.NewClient(testkit.Ctx(t), testkit.Conn(t, srv), jetflow.ClientOptions{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// A handler registered without OnQueue serves its type in every queue:
// those that exist when the worker starts and those created later. One
// registered with OnQueue serves that queue only.
func TestHandlerServesEveryQueue(t *testing.T) {
	t.Parallel()
	client := testClient(t)
	ctx := testkit.Ctx(t)
	early, err := client.Submit(ctx, "any.echo", 1, jetflow.Queue("early"))
	if err != nil {
		t.Fatal(err)
	}
	w := jetflow.NewWorker(client, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	echo := jetflow.HandlerFunc(func(_ context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
		return json.RawMessage(`"` + job.Queue + `"`), nil
	})
	w.Handle("any.echo", echo)
	w.Handle("only.b", echo, jetflow.OnQueue("b"))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	var ids []string
	for _, q := range []string{"default", "late-1", "late-2"} {
		j, err := client.Submit(ctx, "any.echo", 1, jetflow.Queue(q))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	onB, err := client.Submit(ctx, "only.b", 1, jetflow.Queue("b"))
	if err != nil {
		t.Fatal(err)
	}
	notOnC, err := client.Submit(ctx, "only.b", 1, jetflow.Queue("c"))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range append([]string{early.ID, onB.ID}, ids...) {
		done := testkit.WaitTerminal(t, client, id, 20*time.Second)
		if done.State != jetflow.Succeeded || string(done.Result) != `"`+done.Queue+`"` {
			t.Fatalf("job %s on %s: %s %s", id, done.Queue, done.State, done.Result)
		}
	}
	// only.b on queue c has no handler here: it waits.
	if j, err := client.Get(ctx, notOnC.ID); err != nil || j.State != jetflow.Queued {
		t.Fatalf("only.b on queue c: %v %+v", err, j)
	}
}

// A worker id must be usable as the key of its registry record.
func TestWorkerIDIsChecked(t *testing.T) {
	t.Parallel()
	client := testClient(t)
	w := jetflow.NewWorker(client, jetflow.WorkerConfig{ID: "has space", Logger: testkit.Logger(t)})
	w.Handle("t", jetflow.HandlerFunc(func(context.Context, *jetflow.RawJob) (json.RawMessage, error) { return nil, nil }))
	if err := w.Start(testkit.Ctx(t)); !errors.Is(err, jetflow.ErrInvalidInput) {
		t.Fatalf("start with a bad id: %v", err)
	}
}

// startEngine starts a server and an engine that checks tokens (Auth) on
// it, and returns them with a client of its own, unrestricted (admin).
func startEngine(t *testing.T) (*server.Server, context.Context, *jetflow.Client) {
	t.Helper()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	admin, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	eng := jetflow.NewEngine(admin, jetflow.EngineConfig{Auth: true, Logger: testkit.Logger(t)})
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	return srv, ctx, admin
}

// A quiet worker claims nothing more, while the handler it runs goes on
// and ends on it; a job submitted after Quiet goes to another worker.
func TestQuietWorkerClaimsNothingMore(t *testing.T) {
	t.Parallel()
	client := testClient(t)
	ctx := testkit.Ctx(t)
	release := make(chan struct{})
	started := make(chan string, 4)
	worker := func(id string) *jetflow.Worker {
		w := jetflow.NewWorker(client, jetflow.WorkerConfig{ID: id, Logger: testkit.Logger(t)})
		w.Handle("q.job", jetflow.HandlerFunc(func(_ context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
			started <- id
			<-release
			return json.RawMessage(`"` + id + `"`), nil
		}))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { w.Stop(context.Background()) })
		return w
	}
	a := worker("a")
	first, err := client.Submit(ctx, "q.job", 1)
	if err != nil {
		t.Fatal(err)
	}
	if who := <-started; who != "a" {
		t.Fatalf("first job started on %s", who)
	}
	a.Quiet()
	second, err := client.Submit(ctx, "q.job", 2)
	if err != nil {
		t.Fatal(err)
	}
	// A queue created after Quiet: a, which serves every queue, does not
	// start serving it.
	third, err := client.Submit(ctx, "q.job", 3, jetflow.Queue("late"))
	if err != nil {
		t.Fatal(err)
	}
	worker("b")
	for range 2 {
		if who := <-started; who != "b" {
			t.Fatalf("a job submitted after Quiet started on %s", who)
		}
	}
	close(release)
	for id, want := range map[string]string{first.ID: "a", second.ID: "b", third.ID: "b"} {
		j, err := client.Wait(ctx, id)
		if err != nil || j.State != jetflow.Succeeded || j.Worker != want {
			t.Fatalf("job %s: %v %+v, want succeeded on %s", id, err, j, want)
		}
	}
	if n := a.Running(); n != 0 {
		t.Fatalf("a runs %d handlers", n)
	}
	a.Stop(ctx)
	if err := a.Start(ctx); !errors.Is(err, jetflow.ErrShutdown) {
		t.Fatalf("Start of a stopped worker: %v, want ErrShutdown", err)
	}
}

// The queue watch starts a new queue's runtime without the worker's
// mutex: Quiet and Stop never wait behind that start. A runtime that
// started as the worker went quiet is quieted once registered (it claims
// nothing more); one that started as the worker stopped is stopped with
// the others, however many Stops run at once.
func TestNewQueueRuntimeStartingAsTheWorkerEnds(t *testing.T) {
	for _, end := range []string{"quiet", "two stops"} {
		t.Run(end, func(t *testing.T) {
			client := testClient(t)
			ctx := testkit.Ctx(t)
			queue := "late-" + strings.ReplaceAll(end, " ", "-")
			reached, proceed := make(chan struct{}), make(chan struct{})
			jetflow.SetStartedHook(t.Cleanup, func(q string) {
				if q == queue {
					close(reached)
					<-proceed
				}
			})
			worker := func(id string) *jetflow.Worker {
				w := jetflow.NewWorker(client, jetflow.WorkerConfig{ID: id, Logger: testkit.Logger(t)})
				w.Handle("q.job", jetflow.HandlerFunc(func(context.Context, *jetflow.RawJob) (json.RawMessage, error) {
					return nil, nil
				}))
				if err := w.Start(ctx); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { w.Stop(context.Background()) })
				return w
			}
			a := worker("a")
			// A job of a type nobody serves makes the queue: a's watch
			// starts a runtime for it and is held after its start.
			if _, err := client.Submit(ctx, "nobody.serves", 0, jetflow.Queue(queue)); err != nil {
				t.Fatal(err)
			}
			within(t, reached, "the watch starting the new queue's runtime")
			ended := make(chan struct{})
			switch end {
			case "quiet":
				go func() { a.Quiet(); close(ended) }()
				within(t, ended, "Quiet, while a runtime starts")
				close(proceed)
			case "two stops":
				stopped := make(chan struct{}, 2)
				for range 2 {
					go func() { a.Stop(context.Background()); stopped <- struct{}{} }()
				}
				close(proceed)
				for range 2 {
					within(t, stopped, "Stop")
				}
				if n := a.Running(); n != 0 {
					t.Fatalf("a runs %d handlers after Stop", n)
				}
				if err := a.Start(ctx); !errors.Is(err, jetflow.ErrShutdown) {
					t.Fatalf("Start after Stop: %v", err)
				}
			}
			// No runtime of a's claims in the queue: a job there runs on b.
			job, err := client.Submit(ctx, "q.job", 1, jetflow.Queue(queue))
			if err != nil {
				t.Fatal(err)
			}
			worker("b")
			if j, err := client.Wait(ctx, job.ID); err != nil || j.Worker != "b" {
				t.Fatalf("job submitted after %s: %v %+v, want it run by b", end, err, j)
			}
		})
	}
}

// within waits for ch, or fails the test naming what did not happen.
func within[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: not done within 20 s", what)
	}
}
