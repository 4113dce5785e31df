package jetflow_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestTokenClient: a client made with a token speaks the engine's command
// service: its submits go to the token's namespace and name it as their
// actor, it gets, lists, waits for, follows and cancels its namespace's
// jobs, another namespace's are not found, a bad token is denied, it sees
// its namespace's queues only and may not do what its role may not.
func TestTokenClient(t *testing.T) {
	t.Parallel()
	srv, ctx, admin := startEngine(t)
	w := jetflow.NewWorker(admin, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	jetflow.Register(w, "tok.echo", func(ctx context.Context, job *jetflow.Job[string]) (string, error) { return job.Payload, nil })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	tok, err := admin.CreateToken(ctx, jetflow.TokenSpec{Name: "ci", Namespace: "acme", Role: jetflow.RoleProducer})
	if err != nil {
		t.Fatal(err)
	}
	other, err := admin.Submit(ctx, "tok.park", nil, jetflow.Namespace("other"))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	job, err := cl.Submit(ctx, "tok.echo", "hi")
	if err != nil || job.Namespace != "acme" {
		t.Fatalf("submit: %+v %v", job, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	done, err := cl.Wait(wctx, job.ID)
	if err != nil || done.State != jetflow.Succeeded || string(done.Result) != `"hi"` {
		t.Fatalf("wait: %+v %v", done, err)
	}
	var seen []string
	if err := cl.Follow(wctx, job.ID, func(e *jetflow.EventInfo) error { seen = append(seen, e.Type); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(seen) < 3 || seen[len(seen)-1] != "job.succeeded" {
		t.Fatalf("followed %v", seen)
	}
	evs, err := cl.Events(ctx, job.ID)
	if err != nil || evs[0].Actor != "token:ci/"+tok.ID {
		t.Fatalf("events: %v, first by %q", err, evs[0].Actor)
	}
	jobs, err := cl.List(ctx, jetflow.ListFilter{})
	if err != nil || len(jobs) != 1 || jobs[0].ID != job.ID {
		t.Fatalf("list: %d jobs %v", len(jobs), err)
	}
	if _, err := cl.Get(ctx, other.ID); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("another namespace's job: %v, want ErrNotFound", err)
	}
	if _, err := cl.Cancel(ctx, other.ID, "no"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("cancel another namespace's job: %v, want ErrNotFound", err)
	}
	parked, err := cl.Submit(ctx, "tok.park", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := cl.Cancel(ctx, parked.ID, "done with it"); err != nil || c.State != jetflow.Cancelled {
		t.Fatalf("cancel: %+v %v", c, err)
	}
	if _, err := cl.Submit(ctx, "tok.echo", "x", jetflow.Namespace("other")); !errors.Is(err, jetflow.ErrDenied) {
		t.Fatalf("submit to another namespace: %v, want ErrDenied", err)
	}
	qs, err := cl.Queues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Name != "default" || qs[0].Jobs[jetflow.Succeeded] != 1 || qs[0].Slots != nil {
		t.Fatalf("queues of namespace acme: %+v %v", qs, err)
	}
	if _, err := cl.Tokens(ctx); !errors.Is(err, jetflow.ErrDenied) {
		t.Fatalf("a producer's tokens: %v, want ErrDenied", err)
	}
	bad, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Token: "jft_nope"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Get(ctx, job.ID); !errors.Is(err, jetflow.ErrDenied) {
		t.Fatalf("a bad token: %v, want ErrDenied", err)
	}
}
