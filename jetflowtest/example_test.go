package jetflowtest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/jetflowtest"
)

// A handler tested end to end: the real server, engine and worker.
func TestGreet(t *testing.T) {
	env := jetflowtest.New(t)
	jetflow.Register(env.Worker, "greet", func(ctx context.Context, job *jetflow.Job[string]) (string, error) {
		return "hello " + job.Payload, nil
	})
	if err := env.Start(); err != nil {
		t.Fatal(err)
	}
	job, err := env.Client.Submit(context.Background(), "greet", "Ada")
	if err != nil {
		t.Fatal(err)
	}
	done, err := env.Wait(job.ID, 10*time.Second)
	if err != nil || done.State != jetflow.Succeeded || string(done.Result) != `"hello Ada"` {
		t.Fatalf("%v %+v", err, done)
	}
}

// A job that nobody runs is still queued when Wait gives up.
func TestWaitGivesUp(t *testing.T) {
	env := jetflowtest.New(t)
	job, err := env.Client.Submit(context.Background(), "nobody.runs.this", nil)
	if err != nil {
		t.Fatal(err)
	}
	if j, err := env.Wait(job.ID, 200*time.Millisecond); err == nil || j == nil || j.State != jetflow.Queued {
		t.Fatalf("%v %+v", err, j)
	}
}

func Example() {
	env, err := jetflowtest.Open(jetflowtest.Options{})
	if err != nil {
		panic(err)
	}
	defer env.Close()
	jetflow.Register(env.Worker, "double", func(ctx context.Context, job *jetflow.Job[int]) (int, error) {
		return 2 * job.Payload, nil
	})
	_ = env.Start()
	job, _ := env.Client.Submit(context.Background(), "double", 21)
	done, _ := env.Wait(job.ID, 10*time.Second)
	fmt.Println(done.State, string(done.Result))
	// Output: succeeded 42
}

// One handler, one job, through the real claim and recording: a handler
// that asks to be run later leaves its job scheduled, with no retry used.
func TestRunJob(t *testing.T) {
	env := jetflowtest.New(t)
	ok := jetflowtest.RunJob(t, env, "greet", func(ctx context.Context, job *jetflow.Job[string]) (string, error) {
		return "hello " + job.Payload, nil
	}, "Ada")
	if ok.State != jetflow.Succeeded || string(ok.Result) != `"hello Ada"` || ok.Attempts != 1 {
		t.Fatalf("%+v", ok)
	}
	jetflowtest.RequireEvents(t, env.Client, ok.ID, "job.submitted", "job.started", "job.succeeded")

	later := jetflowtest.RunJob(t, env, "gpu", func(ctx context.Context, job *jetflow.Job[int]) (int, error) {
		return 0, jetflow.RetryLater(time.Hour, "GPU busy")
	}, 7)
	if later.State != jetflow.Scheduled || later.Retries != 0 || later.RunAt == nil {
		t.Fatalf("%+v", later)
	}
	evs := jetflowtest.RequireEvents(t, env.Client, later.ID, "job.submitted", "job.started", "job.retry_later")
	if evs[2].Message != "GPU busy" {
		t.Fatalf("retry_later %+v", evs[2])
	}

	bad := jetflowtest.RunJob(t, env, "fails", func(ctx context.Context, job *jetflow.Job[int]) (int, error) {
		return 0, jetflow.WithCode("NOPE", fmt.Errorf("no"))
	}, 1)
	if bad.State != jetflow.Failed || bad.Error == nil || bad.Error.Code != "NOPE" {
		t.Fatalf("%+v", bad)
	}
	if got := jetflowtest.RequireSubmitted(t, env.Client, "fails", jetflow.ListFilter{State: jetflow.Failed}); len(got) != 1 || got[0].ID != bad.ID {
		t.Fatalf("RequireSubmitted: %+v", got)
	}
}
