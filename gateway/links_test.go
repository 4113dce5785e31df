package gateway

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
)

// A cancel cascades to every unfinished descendant linked by parent,
// whatever made it (here, submits over HTTP): a queued child, a child an
// HTTP worker runs (its heartbeat hears it), a grandchild.
func TestCancelCascadesToLinkedChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["ln.kid"]}`)
	parent := e.submit(`{"type":"ln.parent"}`).ID
	queued := e.submit(map[string]any{"type": "ln.idle", "parent": parent}).ID
	running := e.submit(map[string]any{"type": "ln.kid", "parent": parent}).ID
	grand := e.submit(map[string]any{"type": "ln.idle", "parent": queued}).ID
	done := e.submit(map[string]any{"type": "ln.idle", "parent": parent}).ID
	e.do("POST", "/api/v1/jobs/"+done+"/cancel", nil).want(t, 200)
	e.run(wk, running)
	v := e.do("POST", "/api/v1/jobs/"+parent+"/cancel", `{"reason":"stop"}`).want(t, 200).job(t)
	if v.State != domain.StateCancelled {
		t.Fatalf("parent %s", v.State)
	}
	// Cancelled before the parent's cancel answers (a cancel cascades at
	// once; a grandchild through its own parent's cancel).
	for _, id := range []string{queued, running, grand} {
		if g := e.get(id); g.State != domain.StateCancelled || g.Error == nil || !strings.Contains(g.Error.Message, "parent job is cancelled") {
			t.Fatalf("descendant %s: %s %+v", id, g.State, g.Error)
		}
	}
	e.wantEvents(done, domain.EvSubmitted, domain.EvCancelled) // ended already: not cancelled twice
	var hb heartbeatResponse
	e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", nil).want(t, 200).json(t, &hb)
	if strings.Join(hb.Lost, ",") != running {
		t.Fatalf("heartbeat %+v", hb)
	}
	e.patch(running, map[string]any{"worker_id": wk, "state": "succeeded"}).problem(t, 409, engine.ProblemInvalidTransition)
	// A child submitted to a parent that ended without succeeding never
	// starts: it is cancelled at once.
	late := e.submit(map[string]any{"type": "ln.kid", "parent": parent}).ID
	if g := e.waitState(late, domain.StateCancelled); g.Attempts != 0 {
		t.Fatalf("late child %+v", g)
	}
	e.wantEvents(late, domain.EvSubmitted, domain.EvCancelled)
}

// A parent that fails cancels its linked children (in the background); one
// that succeeds leaves them to run.
func TestLinkedChildrenFollowTheirParentsEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["lf.parent","lf.kid"],"concurrency":4}`)
	failing := e.submit(`{"type":"lf.parent","max_retries":0}`).ID
	ok := e.submit(`{"type":"lf.parent"}`).ID
	e.run(wk, failing)
	e.run(wk, ok)
	k1 := e.submit(map[string]any{"type": "lf.kid", "parent": failing}).ID
	k2 := e.submit(map[string]any{"type": "lf.kid", "parent": ok}).ID
	e.patch(failing, map[string]any{"worker_id": wk, "state": "failed", "error": map[string]any{"message": "no"}}).want(t, 200)
	e.patch(ok, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, 200)
	e.waitState(k1, domain.StateCancelled)
	e.claimJob(wk, k2) // the child of a parent that succeeded runs
	e.patch(k2, map[string]any{"worker_id": wk, "state": "running"}).want(t, 200)
	e.patch(k2, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, 200)
	e.wantEvents(k2, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvSucceeded)
}

// A finished parent is not purged while a child linked to it is not
// finished; once it is, both go together.
func TestParentPurgedOnlyWithItsLinkedChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["lp.parent"]}`)
	parent := e.submit(`{"type":"lp.parent"}`).ID
	e.run(wk, parent)
	kid := e.submit(map[string]any{"type": "lp.kid", "parent": parent}).ID
	e.patch(parent, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, 200)
	before := e.eventCount()
	n, err := e.store.Purge(e.ctx, parent, "retention")
	if !errors.Is(err, commands.ErrInvalidTransition) || n != 0 || !strings.Contains(err.Error(), "children are not finished") {
		t.Fatalf("purge with a queued child: %d %v", n, err)
	}
	if e.eventCount() != before {
		t.Fatal("a refused purge wrote events")
	}
	// The retention pass leaves it too.
	ids, err := engine.Expired(e.ctx, e.store, func(string) time.Duration { return time.Nanosecond }, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	pr := engine.NewPurger(e.store, engine.PurgerConfig{Retention: time.Nanosecond})
	if _, err := pr.Pass(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.get(parent)
	e.get(kid)
	if len(ids) == 0 {
		t.Fatal("the finished parent is not expired")
	}
	e.do("POST", "/api/v1/jobs/"+kid+"/cancel", nil).want(t, 200)
	if n, err := e.store.Purge(e.ctx, parent, "retention"); err != nil || n != 2 {
		t.Fatalf("purge: %d %v", n, err)
	}
	e.do("GET", "/api/v1/jobs/"+parent, nil).problem(t, 410, engine.ProblemGone)
	e.do("GET", "/api/v1/jobs/"+kid, nil).problem(t, 410, engine.ProblemGone)
}
