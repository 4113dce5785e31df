package jetflow_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

var errEnough = errors.New("enough")

// tailUntil follows f with cl until the events of every job of ids ended,
// and returns each job's event types in order.
func tailUntil(t *testing.T, ctx context.Context, cl *jetflow.Client, f jetflow.TailFilter, ids ...string) map[string][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	seen := map[string][]string{}
	ended := 0
	err := cl.Tail(ctx, f, func(e *jetflow.EventInfo) error {
		if e.Namespace != f.Namespace && f.Namespace != "" || e.Queue == "" || e.JobType == "" {
			return fmt.Errorf("event %+v outside the filter %+v", e, f)
		}
		seen[e.JobID] = append(seen[e.JobID], e.Type)
		if e.To.Terminal() {
			ended++
		}
		if ended == len(ids) {
			return errEnough
		}
		return nil
	})
	if !errors.Is(err, errEnough) {
		t.Fatalf("tail %+v: %v (seen %v)", f, err, seen)
	}
	return seen
}

// TestTailBothClients: a tail from a time gives every job event of its
// filter in log order, each with its job's namespace, queue and type,
// with both clients alike; a namespaced token follows its namespace only
// and naming another is refused; a tail from now starts after the log's
// end.
func TestTailBothClients(t *testing.T) {
	t.Parallel()
	e := newBothEnv(t)
	ctx := e.ctx
	start := time.Now().Add(-time.Second)
	a := must(e.d.Submit(ctx, "both.echo", 1, jetflow.Namespace("tla")))(t)
	b := must(e.d.Submit(ctx, "both.echo", 2, jetflow.Namespace("tlb")))(t)
	for _, id := range []string{a.ID, b.ID} {
		must(e.d.Wait(ctx, id))(t)
	}
	want := []string{"job.submitted", "job.started", "job.succeeded"}
	ds, ks := each(e, func(cl *jetflow.Client, _ string) map[string][]string {
		return tailUntil(t, ctx, cl, jetflow.TailFilter{Namespace: "tla", Since: start}, a.ID)
	})
	same(t, "Tail", ds, ks)
	if fmt.Sprint(ds[a.ID]) != fmt.Sprint(want) || len(ds) != 1 {
		t.Fatalf("tail of tla: %v, want %v of %s only", ds, want, a.ID)
	}
	all := tailUntil(t, ctx, e.d, jetflow.TailFilter{Type: "both.echo", Since: start}, a.ID, b.ID)
	if fmt.Sprint(all[a.ID]) != fmt.Sprint(want) || fmt.Sprint(all[b.ID]) != fmt.Sprint(want) {
		t.Fatalf("tail of every namespace: %v", all)
	}

	// A reader of tla: its namespace's events; another's is refused.
	tok := must(e.d.CreateToken(ctx, jetflow.TokenSpec{Name: "tail", Namespace: "tla", Role: jetflow.RoleReader}))(t)
	rc, err := jetflow.NewClient(ctx, testkit.Conn(t, e.srv), jetflow.ClientOptions{Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	if got := tailUntil(t, ctx, rc, jetflow.TailFilter{Since: start}, a.ID); len(got) != 1 || got[a.ID] == nil {
		t.Fatalf("a tla reader's tail: %v", got)
	}
	err = rc.Tail(ctx, jetflow.TailFilter{Namespace: "tlb", Since: start}, func(*jetflow.EventInfo) error { return nil })
	if !errors.Is(err, jetflow.ErrDenied) {
		t.Fatalf("a tla reader's tail of tlb: %v", err)
	}
	for _, bad := range []jetflow.TailFilter{{Queue: "a b"}, {Namespace: "a b"}, {Type: ".x"}} {
		da := e.d.Tail(ctx, bad, func(*jetflow.EventInfo) error { return nil })
		ka := e.k.Tail(ctx, bad, func(*jetflow.EventInfo) error { return nil })
		sameErr(t, fmt.Sprintf("Tail %+v", bad), da, ka, jetflow.ErrInvalidInput)
	}

	// From now: only what is appended after the tail began.
	got := make(chan *jetflow.EventInfo, 16)
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_ = e.k.Tail(tctx, jetflow.TailFilter{Namespace: "tla"}, func(ev *jetflow.EventInfo) error { got <- ev; return nil })
	}()
	// The tail begins at some instant after the go statement: a job is
	// submitted on every look until one of them is seen.
	mine := map[string]bool{}
	testkit.WaitFor(t, 20*time.Second, func() error {
		select {
		case ev := <-got:
			if ev.JobID == a.ID {
				t.Fatalf("a tail from now printed an old event: %+v", ev)
			}
			if mine[ev.JobID] {
				return nil
			}
			return fmt.Errorf("event of %s", ev.JobID)
		default:
			mine[must(e.d.Submit(ctx, "both.echo", 3, jetflow.Namespace("tla")))(t).ID] = true
			return errors.New("no event yet")
		}
	})
}
