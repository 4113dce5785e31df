package jetflow_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// A result over 256 KiB is kept in the files bucket as the attempt's own
// object, and the job's record and event name it (ResultRef): a dependent
// step reads it with Job.Output, Get and Wait give it whole with both
// clients, the workflow's view names it, a purge deletes it. A result over
// 16 MiB fails its attempt for good.
func TestLargeResults(t *testing.T) {
	t.Parallel()
	srv, ctx, admin := startEngine(t)

	type blob struct {
		Data string `json:"data"`
	}
	big := strings.Repeat("x", 2<<20)
	want := `{"data":"` + big + `"}`
	w := jetflow.NewWorker(admin, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	jetflow.Register(w, "big.make", func(ctx context.Context, job *jetflow.Job[int]) (blob, error) {
		return blob{Data: strings.Repeat("x", job.Payload)}, nil
	})
	jetflow.Register(w, "big.use", func(ctx context.Context, job *jetflow.Job[any]) (int, error) {
		var b blob
		if err := job.Output(ctx, "make", &b); err != nil {
			return 0, err
		}
		return len(b.Data), nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })

	wf := jetflow.NewWorkflow("large")
	wf.Chain(wf.Step("make", "big.make", len(big)), wf.Step("use", "big.use", nil))
	res, err := admin.SubmitWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if done, err := admin.Wait(wctx, res.ID); err != nil || done.State != jetflow.Succeeded {
		t.Fatalf("workflow: %+v %v", done, err)
	}
	makeID := res.Steps["make"]
	got, err := admin.Get(ctx, makeID)
	if err != nil {
		t.Fatal(err)
	}
	ref := got.ResultRef
	if ref == nil || !regexp.MustCompile(`^out/result-1-[0-9a-f]{16}\.json$`).MatchString(ref.Name) || ref.Size != int64(len(want)) || !strings.HasPrefix(ref.Digest, "SHA-256=") {
		t.Fatalf("result ref %+v", ref)
	}
	if string(got.Result) != want {
		t.Fatalf("Get's result: %d bytes, want %d", len(got.Result), len(want))
	}
	if done, err := admin.Wait(ctx, makeID); err != nil || string(done.Result) != want {
		t.Fatalf("Wait's result: %v", err)
	}
	use, err := admin.Get(ctx, res.Steps["use"])
	if err != nil || use.ResultRef != nil || string(use.Result) != "2097152" {
		t.Fatalf("use: %+v %v", use, err)
	}
	// The event names the object; the result is not in it.
	evs, err := admin.Events(ctx, makeID)
	if err != nil {
		t.Fatal(err)
	}
	succeeded := 0
	for _, ev := range evs {
		if ev.Type == "job.succeeded" {
			succeeded++
			if ev.Result != nil || ev.ResultRef == nil || *ev.ResultRef != *ref {
				t.Fatalf("job.succeeded: result %d bytes, ref %+v", len(ev.Result), ev.ResultRef)
			}
		}
	}
	if succeeded != 1 {
		t.Fatalf("%d job.succeeded events", succeeded)
	}
	info, err := admin.GetWorkflow(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s := info.Step("make"); s == nil || string(s.Result) != "null" || s.ResultRef == nil || *s.ResultRef != *ref {
		t.Fatalf("the workflow's step %+v", s)
	}

	// A reader's token (the command service) reads it whole too.
	tok, err := admin.CreateToken(ctx, jetflow.TokenSpec{Name: "big", Namespace: "default", Role: jetflow.RoleReader})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	if tg, err := cl.Get(ctx, makeID); err != nil || string(tg.Result) != want || tg.ResultRef == nil {
		t.Fatalf("token client's Get: %v", err)
	}

	// Over 16 MiB: the attempt fails for good, its retries unused.
	huge, err := admin.Submit(ctx, "big.make", 17<<20, jetflow.MaxRetries(3))
	if err != nil {
		t.Fatal(err)
	}
	done, err := admin.Wait(wctx, huge.ID)
	if err != nil || done.State != jetflow.Failed || done.Retries != 0 || done.Error == nil ||
		!strings.Contains(done.Error.Message, "more than the limit of 16777216") || done.ResultRef != nil {
		t.Fatalf("a result over the limit: %+v %v", done, err)
	}

	// A purge deletes the object.
	js, err := jetstream.New(testkit.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	obs, err := js.ObjectStore(ctx, streams.FilesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.GetInfo(ctx, makeID+"/"+ref.Name); err != nil {
		t.Fatalf("the result's object: %v", err)
	}
	if n, err := admin.PurgeJob(ctx, res.ID, "test"); err != nil || n != 3 {
		t.Fatalf("purged %d, %v; want the workflow and its 2 steps", n, err)
	}
	if _, err := obs.GetInfo(ctx, makeID+"/"+ref.Name); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Fatalf("the result's object after the purge: %v", err)
	}
}
