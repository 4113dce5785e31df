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
