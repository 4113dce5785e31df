package jetflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/jetflowtest"
)

// exampleClient starts a whole jetflow in a temp dir (jetflowtest) and
// returns its client, and a function that tears it down.
func exampleClient() (*jetflow.Client, func()) {
	env, err := jetflowtest.Open(jetflowtest.Options{})
	if err != nil {
		log.Fatal(err)
	}
	return env.Client, env.Close
}

type Greeting struct {
	Name string `json:"name"`
}

// A worker registers a typed handler; a client submits a job and waits for
// its result.
func Example() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	w := jetflow.NewWorker(client, jetflow.WorkerConfig{})
	jetflow.Register(w, "greet", func(ctx context.Context, job *jetflow.Job[Greeting]) (string, error) {
		return "hello " + job.Payload.Name, nil
	})
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)

	job, err := client.Submit(ctx, "greet", Greeting{Name: "Ada"})
	if err != nil {
		log.Fatal(err)
	}
	done, err := client.Wait(ctx, job.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.State, string(done.Result), done.Attempts)
	// Output: succeeded "hello Ada" 1
}

func ExampleClient_Submit() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	job, err := client.Submit(ctx, "report.build", map[string]int{"month": 11},
		jetflow.Queue("reports"), jetflow.Delay(time.Hour), jetflow.MaxRetries(5), jetflow.Tags("monthly"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(job.State, job.Queue, job.MaxRetries, job.Tags)

	_, err = client.Submit(ctx, "report build", nil)
	fmt.Println(errors.Is(err, jetflow.ErrInvalidInput))
	// Output:
	// scheduled reports 5 [monthly]
	// true
}

func ExampleIdempotencyKey() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	a, _ := client.Submit(ctx, "charge", map[string]int{"cents": 500}, jetflow.IdempotencyKey("order-7"))
	b, _ := client.Submit(ctx, "charge", map[string]int{"cents": 500}, jetflow.IdempotencyKey("order-7"))
	fmt.Println(a.ID == b.ID)
	// Output: true
}

func ExampleClient_Cancel() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	job, _ := client.Submit(ctx, "nobody.runs.this", nil)
	cancelled, err := client.Cancel(ctx, job.ID, "changed my mind")
	fmt.Println(cancelled.State, err)
	again, err := client.Cancel(ctx, job.ID, "twice") // a no-op that writes nothing
	fmt.Println(again.State, again.Events, err)
	// Output:
	// cancelled <nil>
	// cancelled 2 <nil>
}

func ExampleClient_Events() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	w := jetflow.NewWorker(client, jetflow.WorkerConfig{})
	jetflow.Register(w, "flaky", func(ctx context.Context, job *jetflow.Job[any]) (int, error) {
		if job.Attempt == 1 {
			return 0, errors.New("first attempt fails")
		}
		return job.Attempt, nil
	})
	_ = w.Start(ctx)
	defer w.Stop(ctx)

	job, _ := client.Submit(ctx, "flaky", nil, jetflow.Backoff(0))
	_, _ = client.Wait(ctx, job.ID)
	events, _ := client.Events(ctx, job.ID)
	for _, e := range events {
		fmt.Println(e.Type, e.To)
	}
	// Output:
	// job.submitted queued
	// job.started running
	// job.retry_scheduled queued
	// job.started running
	// job.succeeded succeeded
}

func ExamplePermanent() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	w := jetflow.NewWorker(client, jetflow.WorkerConfig{})
	jetflow.Register(w, "parse", func(ctx context.Context, job *jetflow.Job[string]) (int, error) {
		return 0, jetflow.Permanent(jetflow.WithCode("SYNTAX", fmt.Errorf("cannot parse %q", job.Payload)))
	})
	_ = w.Start(ctx)
	defer w.Stop(ctx)

	job, _ := client.Submit(ctx, "parse", "1+")
	done, _ := client.Wait(ctx, job.ID)
	fmt.Println(done.State, done.Attempts, done.Error.Code)
	// Output: failed 1 SYNTAX
}

func ExampleRetryLater() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	w := jetflow.NewWorker(client, jetflow.WorkerConfig{})
	jetflow.Register(w, "gpu.embed", func(ctx context.Context, job *jetflow.Job[any]) (string, error) {
		if job.Attempt == 1 {
			return "", jetflow.RetryLater(0, "GPU busy")
		}
		return "embedded", nil
	})
	_ = w.Start(ctx)
	defer w.Stop(ctx)

	job, _ := client.Submit(ctx, "gpu.embed", nil, jetflow.MaxRetries(0))
	done, _ := client.Wait(ctx, job.ID)
	fmt.Println(done.State, done.Attempts, done.Retries)
	// Output: succeeded 2 0
}

func ExampleWorker_Use() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	w := jetflow.NewWorker(client, jetflow.WorkerConfig{})
	var seen []string
	w.Use(func(next jetflow.Handler) jetflow.Handler {
		return jetflow.HandlerFunc(func(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
			seen = append(seen, "before "+job.Type)
			res, err := next.Work(ctx, job)
			seen = append(seen, "after "+job.Type)
			return res, err
		})
	})
	jetflow.Register(w, "noop", func(ctx context.Context, job *jetflow.Job[any]) (any, error) { return nil, nil })
	_ = w.Start(ctx)
	job, _ := client.Submit(ctx, "noop", nil)
	_, _ = client.Wait(ctx, job.ID)
	w.Stop(ctx)
	fmt.Println(strings.Join(seen, ", "))
	// Output: before noop, after noop
}

func ExampleClient_List() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	for _, q := range []string{"a", "b", "a"} {
		_, _ = client.Submit(ctx, "nobody.runs.this", nil, jetflow.Queue(q))
	}
	jobs, _ := client.List(ctx, jetflow.ListFilter{Queue: "a", State: jetflow.Queued})
	fmt.Println(len(jobs))
	// Output: 2
}

// AuditVerify checks the hash chain of a job's events (and the signed
// checkpoints, when the engine writes them: keep its AuditPublicKey apart
// and pass it as the key to trust).
func ExampleClient_AuditVerify() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()
	job, err := client.Submit(ctx, "report.build", nil)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Cancel(ctx, job.ID, "not needed"); err != nil {
		log.Fatal(err)
	}
	rep, err := client.AuditVerify(ctx, jetflow.ReplayScope{Job: job.ID}, "")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(rep.Events, "events,", len(rep.Findings), "findings, ok:", rep.OK())
	// Output: 2 events, 0 findings, ok: true
}
