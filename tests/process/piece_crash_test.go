package process

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// A child's worker killed once the child's outcome and its record are
// written and before the piece event that tells its parent
// (complete:projected): no worker will tell the parent now. The Projector,
// which sees the child's job.succeeded, publishes the piece event (message
// id child-piece: one copy counts), so the parent succeeds, and the child
// ran once.
func TestChildOutcomeCrashPoint(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	ctx := testkit.Ctx(t)
	// The coordinator runs here, outside the crash: only the child's
	// worker has the crash point.
	coord := jetflow.NewWorker(s.client, jetflow.WorkerConfig{ID: "coord"})
	jetflow.Register(coord, "pc.parent", func(context.Context, *jetflow.Job[struct{}]) (any, error) {
		kids, err := jetflow.Children("pc.child", []any{map[string]int{"n": 1}}, jetflow.MaxRetries(0))
		if err != nil {
			return nil, jetflow.Permanent(err)
		}
		return nil, jetflow.FanOut(jetflow.FanOutSpec{Children: kids})
	})
	if err := coord.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { coord.Stop(context.Background()) })
	victim := s.worker("C", []string{"JETFLOW_CRASH_AT=complete:projected"}, "--exec", "pc.child=true")

	parent, err := s.client.Submit(ctx, "pc.parent", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantKilled(t, victim)
	kids, err := s.client.Children(ctx, parent.ID)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children: %v, %d", err, len(kids))
	}
	// Killed after its record: the child is done as the worker left it.
	if j, err := s.client.Get(ctx, kids[0].ID); err != nil || j.State != jetflow.Succeeded {
		t.Fatalf("child after its worker's crash: %v %+v", err, j)
	}
	if j := testkit.WaitTerminal(t, s.client, parent.ID, 30*time.Second); j.State != jetflow.Succeeded {
		t.Fatalf("parent %s", j.State)
	}
	s.wantEvents(kids[0].ID, evSubmitted, evStarted, evSucceeded)
	evs, err := s.client.Events(ctx, parent.ID)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if n := countOf(types, "job.succeeded"); n != 1 || !slices.Contains(types, "job.waiting") {
		t.Fatalf("parent's history %v", types)
	}
	s.verify()
}
