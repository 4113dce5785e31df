package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/replay"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
)

// harness is one embedded server with a client-side Store and an engine
// (projector with a short lag, promoter, command server).
type harness struct {
	t   *testing.T
	srv *server.Server
	st  *engine.Store
	eng *engine.Engine
	ctx context.Context
}

func newHarness(t *testing.T) *harness { return newHarnessLag(t, 100*time.Millisecond) }

// newHarnessLag is newHarness with the projector's lag given.
func newHarnessLag(t *testing.T, lag time.Duration) *harness {
	t.Helper()
	srv := testkit.Server(t)
	h := &harness{t: t, srv: srv, ctx: testkit.Ctx(t)}
	h.st = testkit.Store(t, testkit.Conn(t, srv), "client")
	h.eng = engine.NewEngine(testkit.Store(t, testkit.Conn(t, srv), "engine"),
		engine.EngineConfig{ProjectorLag: lag, Log: testkit.Logger(t)})
	if err := h.eng.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.eng.Stop(context.Background()) })
	return h
}

// replaceEngine stops the harness's engine and starts another on a
// connection of its own, whose admitter, projector and the rest rebuild
// from the log (stopped at the test's end).
func (h *harness) replaceEngine() {
	h.t.Helper()
	h.eng.Stop(context.Background())
	eng2 := engine.NewEngine(testkit.Store(h.t, testkit.Conn(h.t, h.srv), "engine2"),
		engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Log: testkit.Logger(h.t)})
	if err := eng2.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { eng2.Stop(context.Background()) })
}

// runtime starts a worker runtime on its own connection.
func (h *harness) runtime(cfg engine.RuntimeConfig) *engine.Runtime {
	h.t.Helper()
	st := testkit.Store(h.t, testkit.Conn(h.t, h.srv), cfg.WorkerID)
	if cfg.Log == nil {
		cfg.Log = testkit.Logger(h.t)
	}
	rt, err := engine.NewRuntime(st, cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := rt.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { rt.Stop(context.Background()) })
	return rt
}

// heldWorker starts a worker (WorkerID w1) whose handler for typ sends
// each job it starts on the channel returned and holds it until the test
// ends.
func (h *harness) heldWorker(typ string) <-chan string {
	h.t.Helper()
	started, release := make(chan string, 1), make(chan struct{})
	h.runtime(engine.RuntimeConfig{WorkerID: "w1", Handlers: map[string]engine.Handler{
		typ: func(ctx context.Context, task *engine.Task) ([]byte, error) {
			started <- task.Job.ID
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		}}})
	h.t.Cleanup(func() { close(release) }) // before the runtime's Stop
	return started
}

func (h *harness) submit(req commands.SubmitRequest) engine.Snapshot {
	h.t.Helper()
	res, err := h.st.Submit(h.ctx, &req)
	if err != nil {
		h.t.Fatal(err)
	}
	return res.Snapshot
}

func (h *harness) get(id string) *domain.Job {
	h.t.Helper()
	snap, err := h.st.Record(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return snap.Job
}

func (h *harness) waitState(id string, want domain.State, timeout time.Duration) *domain.Job {
	h.t.Helper()
	var j *domain.Job
	testkit.WaitFor(h.t, timeout, func() error {
		snap, err := h.st.Record(h.ctx, id)
		if err != nil {
			return err
		}
		j = snap.Job
		if j.State != want {
			return fmt.Errorf("job %s is %s, want %s", id, j.State, want)
		}
		return nil
	})
	return j
}

// events is the job's history from the log.
func (h *harness) events(id string) []*domain.Event {
	h.t.Helper()
	var evs []*domain.Event
	if err := h.st.History(h.ctx, id, 0, false, func(e *domain.Event) error { evs = append(evs, e); return nil }); err != nil {
		h.t.Fatal(err)
	}
	return evs
}

func types(evs []*domain.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func (h *harness) wantEvents(id string, want ...string) {
	h.t.Helper()
	got := types(h.events(id))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		h.t.Fatalf("events of %s:\n got %v\nwant %v", id, got, want)
	}
}

// verify rebuilds every job from the log and requires the bucket to agree.
func (h *harness) verify() *projections.Report {
	h.t.Helper()
	rep, err := replay.Verify(h.ctx, h.st.JS, 2*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	if len(rep.Diffs) > 0 {
		h.t.Fatalf("log and jobs bucket differ: %+v", rep.Diffs)
	}
	return rep
}

// lastSeq is the last event sequence of the events stream.
func (h *harness) lastSeq() uint64 {
	h.t.Helper()
	info, err := h.st.Events.Info(h.ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return info.State.LastSeq
}

// counter counts handler runs per job.
type counter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *counter) add(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[id]++
	return c.runs[id]
}

func (c *counter) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[id]
}

func ptr[T any](v T) *T { return &v }

func dur(d time.Duration) *commands.Duration { v := commands.Duration(d); return &v }

func projectionsVerify(h *harness) (*projections.Report, error) {
	return replay.Verify(h.ctx, h.st.JS, time.Second)
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// newPurger is a Purger with the store's namespaces' retention, as the
// Engine makes it.
func newPurger(st *engine.Store, cfg maintenance.PurgerConfig) *maintenance.Purger {
	if cfg.Namespaces == nil {
		cfg.Namespaces = st.Types
	}
	return maintenance.NewPurger(engine.Internal(st), cfg)
}

// newTypeSweeper is a TypeSweeper of the store's registry, as the Engine
// makes it.
func newTypeSweeper(st *engine.Store, cfg maintenance.TypeSweeperConfig) *maintenance.TypeSweeper {
	cfg.Types = st.Types
	return maintenance.NewTypeSweeper(engine.Internal(st), cfg)
}
