package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
)

func TestIndexOrderCountsAndCursors(t *testing.T) {
	t.Parallel()
	x := newIndex(nil, nil)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	job := func(id string, at time.Duration, state domain.State, queue string) *domain.Job {
		return &domain.Job{ID: id, State: state, CreatedAt: t0.Add(at), Spec: domain.Spec{Namespace: "default", Type: "t", Queue: queue}}
	}
	ids := []string{"01ARZ3NDEKTSV4RRFFQ69G5FA1", "01ARZ3NDEKTSV4RRFFQ69G5FA2", "01ARZ3NDEKTSV4RRFFQ69G5FA3", "01ARZ3NDEKTSV4RRFFQ69G5FA4"}
	x.replace(map[string]*summary{ids[0]: summarize(job(ids[0], 0, domain.StateQueued, "a"), 1)})
	// Out of order and with equal times: the order is (created_at, id).
	x.Put(job(ids[3], time.Second, domain.StateQueued, "a"), 5)
	x.Put(job(ids[2], time.Second, domain.StateQueued, "b"), 4)
	x.Put(job(ids[1], -time.Second, domain.StateQueued, "a"), 3)
	// An older revision does not replace a newer one.
	x.Put(job(ids[3], time.Second, domain.StateRunning, "a"), 6)
	x.Put(job(ids[3], time.Second, domain.StateQueued, "a"), 5)
	list := func(f engine.Filter, cur *Cursor, limit int) (string, *Cursor) {
		sums, next := x.List(f, cur, limit)
		var out []string
		for _, s := range sums {
			out = append(out, s.ID[len(s.ID)-1:])
		}
		return strings.Join(out, ""), next
	}
	if got, next := list(engine.Filter{}, nil, 10); got != "4312" || next != nil {
		t.Fatalf("order %s, next %v", got, next)
	}
	got, next := list(engine.Filter{}, nil, 2)
	if got != "43" || next == nil {
		t.Fatalf("page 1 %s", got)
	}
	// The cursor's job disappears: the next page starts after where it was.
	x.remove(ids[2], 7)
	if got, next := list(engine.Filter{}, next, 2); got != "12" || next != nil {
		t.Fatalf("page 2 %s %v", got, next)
	}
	if got, _ := list(engine.Filter{State: domain.StateRunning}, nil, 10); got != "4" {
		t.Fatalf("running %s", got)
	}
	if c := x.Counts("a", ""); c[domain.StateQueued] != 2 || c[domain.StateRunning] != 1 || c[domain.StateFailed] != 0 {
		t.Fatalf("counts %v", c)
	}
	if c := x.Counts("b", ""); c[domain.StateQueued] != 0 {
		t.Fatalf("counts of b after the removal %v", c)
	}
	if x.Len() != 3 || x.Get(ids[2]) != nil {
		t.Fatalf("len %d", x.Len())
	}
}

func TestStopEndsLongPollsAndIsIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := e.g.Start(e.ctx); err != nil { // started by the engine already
		t.Fatal(err)
	}
	wk := e.register(`{"name":"w","types":["never.submitted"]}`)
	id := e.submit(`{"type":"never.run"}`).ID
	claimed := make(chan resp, 1)
	go func() { claimed <- e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wk, "wait": 60}) }()
	waited := make(chan resp, 1)
	go func() { waited <- e.do("GET", "/api/v1/jobs/"+id, nil, "Prefer", "wait=60") }()
	events, _ := e.openSSE("/api/v1/jobs/" + id + "/events")
	next(t, events, "message")
	live, _ := e.openSSE("/api/v1/stream")
	next(t, live, "counts")
	time.Sleep(300 * time.Millisecond) // let the long polls start waiting
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.g.Stop(ctx)
	e.g.Stop(ctx)
	for i, ch := range []chan resp{claimed, waited} {
		select {
		case r := <-ch:
			if r.status != http.StatusOK {
				t.Fatalf("long poll after stop: %d %s", r.status, r.body)
			}
			if i == 0 {
				var c ClaimResponse
				if r.json(t, &c); c.Job != nil {
					t.Fatalf("claim after stop: %+v", c.Job)
				}
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a long poll outlived Stop")
		}
	}
	for _, ch := range []<-chan sseEvent{events, live} {
		select {
		case _, ok := <-ch:
			for ok {
				_, ok = <-ch
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a stream outlived Stop")
		}
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Fatalf("stop took %s", took)
	}
	// Started again, it serves long polls again.
	if err := e.g.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if c := e.claim(wk, 0.5); c.Job != nil || time.Since(t0) < 500*time.Millisecond {
		t.Fatalf("claim after a restart: %+v after %s", c.Job, time.Since(t0))
	}
	var l jobList
	e.do("GET", "/api/v1/jobs", nil).want(t, 200).json(t, &l)
	if len(l.Jobs) != 1 || l.Jobs[0].ID != id {
		t.Fatalf("list after a restart: %+v", l.Jobs)
	}
}

// TestIndexCatchUp: catchUp returns once the index holds every record the
// bucket had when it was called, and not before. Jobs submitted by another
// writer, 2,000 at once, are all in the index when catchUp returns; an
// index whose watch is behind makes catchUp wait.
func TestIndexCatchUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 2000
	reqs := make([]*commands.SubmitRequest, n)
	for i := range reqs {
		reqs[i] = &commands.SubmitRequest{Type: "catch.up", Payload: commands.RawJSON(`{}`)}
	}
	for i, r := range e.store.SubmitBatch(e.ctx, reqs) {
		if r.Err != nil {
			t.Fatalf("submit %d: %v", i, r.Err)
		}
	}
	if err := e.g.index.catchUp(e.ctx); err != nil {
		t.Fatal(err)
	}
	if c := e.g.index.Counts("default", ""); c[domain.StateQueued] != n {
		t.Fatalf("after catchUp the index counts %d queued jobs, want %d", c[domain.StateQueued], n)
	}

	// An index whose watch has not gone past the bucket's last sequence.
	x := newIndex(e.g.index.kv, nil)
	x.syncedOnce.Do(func() { close(x.synced) })
	st, err := x.kv.Status(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := st.(*jetstream.KeyValueBucketStatus).StreamInfo().State.LastSeq
	x.advance(last - 1)
	short, cancel := context.WithTimeout(e.ctx, 200*time.Millisecond)
	defer cancel()
	if err := x.catchUp(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("catchUp of an index one behind: %v, want it to wait", err)
	}
	done := make(chan error, 1)
	go func() { done <- x.catchUp(e.ctx) }()
	x.advance(last)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
