package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/runtime"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// summary decodes a fan-out parent's result.
func summary(t *testing.T, j *domain.Job) commands.Summary {
	t.Helper()
	var s commands.Summary
	if err := json.Unmarshal(j.Result, &s); err != nil {
		t.Fatalf("result %q: %v", j.Result, err)
	}
	return s
}

func countType(evs []*domain.Event, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func childReqs(n int, jobType string, payload func(i int) string) []*commands.SubmitRequest {
	out := make([]*commands.SubmitRequest, n)
	for i := range out {
		out[i] = &commands.SubmitRequest{Type: jobType, Payload: commands.RawJSON(payload(i)), MaxRetries: ptr(0)}
	}
	return out
}

func TestFanOutChildren(t *testing.T) {
	h := newHarness(t)
	var childRuns atomic.Int32
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 8, Handlers: map[string]engine.Handler{
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(20, "child", func(i int) string { return strconv.Itoa(i) })}
		},
		"child": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			childRuns.Add(1)
			return task.Job.Spec.Payload, nil
		},
	}})
	sub := h.submit(commands.SubmitRequest{Type: "coord"})
	j := h.waitState(sub.Job.ID, domain.StateSucceeded, 20*time.Second)
	if s := summary(t, j); s.Total != 20 || s.Succeeded != 20 || s.Failed != 0 {
		t.Fatalf("summary %+v", s)
	}
	if j.Fanout == nil || j.Fanout.Counts.Succeeded != 20 || childRuns.Load() != 20 {
		t.Fatalf("fanout %+v, child runs %d", j.Fanout, childRuns.Load())
	}
	evs := h.events(sub.Job.ID)
	if countType(evs, domain.EvSucceeded) != 1 || countType(evs, domain.EvWaiting) != 1 {
		t.Fatalf("parent events %v", types(evs))
	}
	// Every child has the parent, its piece number and its derived id.
	for n := 1; n <= 20; n++ {
		c := h.get(engine.ChildID("default", sub.Job.ID, n))
		if c.Spec.Parent != sub.Job.ID || c.Spec.Piece != n || c.State != domain.StateSucceeded || string(c.Result) != strconv.Itoa(n-1) {
			t.Fatalf("child %d: %+v", n, c)
		}
	}
	h.verify()
}

func TestFanOutTenThousandBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 batches")
	}
	h := newHarness(t)
	const n = 10000
	var runs atomic.Int64
	coord := func(ctx context.Context, task *engine.Task) ([]byte, error) {
		f := &engine.FanOut{BatchType: "piece", Batches: make([][]byte, n)}
		for i := range f.Batches {
			f.Batches[i] = []byte(strconv.Itoa(i))
		}
		return nil, f
	}
	piece := func(ctx context.Context, b *engine.BatchTask) error {
		runs.Add(1)
		if b.Piece%1000 == 0 {
			return &engine.PermanentError{Err: errors.New("every thousandth fails")}
		}
		return nil
	}
	// Eight workers, each its own connection and runtime.
	for w := 0; w < 8; w++ {
		h.runtime(engine.RuntimeConfig{WorkerID: fmt.Sprintf("w%d", w), Concurrency: 4,
			Handlers: map[string]engine.Handler{"coord": coord},
			Batches:  map[string]engine.BatchHandler{"piece": piece}})
	}
	sub := h.submit(commands.SubmitRequest{Type: "coord"})
	j := h.waitState(sub.Job.ID, domain.StateFailed, 60*time.Second)
	s := summary(t, j)
	if s.Total != n || s.Succeeded != n-10 || s.Failed != 10 || s.Cancelled != 0 || runs.Load() != n {
		t.Fatalf("summary %+v, runs %d", s, runs.Load())
	}
	if len(s.Errors) != 1 || s.Errors[0].Count != 10 || j.Error.Code != "FANOUT_FAILED" {
		t.Fatalf("errors %+v, job error %+v", s.Errors, j.Error)
	}
	evs := h.events(sub.Job.ID)
	if countType(evs, domain.EvFailed)+countType(evs, domain.EvSucceeded) != 1 {
		t.Fatalf("parent ended %d times", countType(evs, domain.EvFailed)+countType(evs, domain.EvSucceeded))
	}
	if countType(evs, domain.EvFanIn) < 1 {
		t.Fatal("no progress while the batches ran")
	}
	h.verify()
}

// Batches delivered twice, and outcomes recorded twice (as after a crash
// between the record and the ack), are counted once.
func TestFanOutDuplicatesCountOnce(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	var runs atomic.Int32
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4,
		Handlers: map[string]engine.Handler{"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{BatchType: "piece", Batches: [][]byte{[]byte(`1`), []byte(`2`), []byte(`3`)}}
		}},
		Batches: map[string]engine.BatchHandler{"piece": func(ctx context.Context, b *engine.BatchTask) error {
			runs.Add(1)
			if b.Piece == 3 {
				<-release
			}
			return nil
		}}})
	sub := h.submit(commands.SubmitRequest{Type: "coord"})
	// Pieces 1 and 2 done; piece 3 held.
	testkit.WaitFor(t, 10*time.Second, func() error {
		j := h.get(sub.Job.ID)
		if j.Fanout == nil || j.Fanout.Counts.Succeeded != 2 {
			return fmt.Errorf("fanout %+v", j.Fanout)
		}
		return nil
	})
	// Copies of batch 1's item (no message id: the stream keeps them), and
	// a repeated outcome of piece 2 under a new message id.
	item, _ := streams.Marshal(&domain.BatchItem{Parent: sub.Job.ID, Piece: 1, Type: "piece", Queue: "default", MaxRetries: 3, Timeout: time.Minute})
	for i := 0; i < 3; i++ {
		if _, err := h.st.JS.Publish(h.ctx, streams.BatchSubject("default", "piece", sub.Job.ID), item); err != nil {
			t.Fatal(err)
		}
	}
	again, _ := streams.EncodeEvent(&domain.Event{Type: domain.PcSucceeded, JobID: sub.Job.ID, Piece: 2, Time: time.Now()})
	if _, err := h.st.JS.PublishMsg(h.ctx, &nats.Msg{Subject: streams.PieceSubject(sub.Job.ID), Data: again}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if runs.Load() < 6 {
			return fmt.Errorf("%d runs", runs.Load())
		}
		return nil
	})
	if j := h.get(sub.Job.ID); j.State != domain.StateWaiting {
		t.Fatalf("parent %s with piece 3 still running", j.State)
	}
	close(release)
	j := h.waitState(sub.Job.ID, domain.StateSucceeded, 10*time.Second)
	if s := summary(t, j); s.Total != 3 || s.Succeeded != 3 {
		t.Fatalf("summary %+v", s)
	}
	h.verify()
}

func TestFanOutPolicies(t *testing.T) {
	h := newHarness(t)
	// Children fail when their payload says so; "slow" children wait for
	// their context (so fail-fast has something to cancel).
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 16, Handlers: map[string]engine.Handler{
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			var spec struct {
				Policy string  `json:"policy"`
				Ratio  float64 `json:"ratio"`
				Fail   []int   `json:"fail"`
				Slow   bool    `json:"slow"`
				N      int     `json:"n"`
			}
			_ = json.Unmarshal(task.Job.Spec.Payload, &spec)
			fails := map[int]bool{}
			for _, f := range spec.Fail {
				fails[f] = true
			}
			return nil, &engine.FanOut{Policy: spec.Policy, MaxFailureRatio: spec.Ratio,
				Children: childReqs(spec.N, "kid", func(i int) string {
					switch {
					case fails[i+1]:
						return `"fail"`
					case spec.Slow:
						return `"slow"`
					}
					return `"ok"`
				})}
		},
		"kid": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			switch string(task.Job.Spec.Payload) {
			case `"fail"`:
				return nil, &engine.PermanentError{Err: errors.New("kid failed")}
			case `"slow"`:
				<-ctx.Done()
				return nil, context.Cause(ctx)
			}
			return []byte(`1`), nil
		},
	}})
	run := func(payload string, want domain.State) (*domain.Job, commands.Summary) {
		t.Helper()
		sub := h.submit(commands.SubmitRequest{Type: "coord", Payload: commands.RawJSON(payload)})
		j := h.waitState(sub.Job.ID, want, 20*time.Second)
		return j, summary(t, j)
	}
	_, s := run(`{"policy":"all","n":10,"fail":[4]}`, domain.StateFailed)
	if s.Succeeded != 9 || s.Failed != 1 || s.Errors[0].Message != "permanent: kid failed" {
		t.Fatalf("all: %+v", s)
	}
	_, s = run(`{"policy":"tolerate","ratio":0.2,"n":10,"fail":[1,2]}`, domain.StateSucceeded)
	if s.Succeeded != 8 || s.Failed != 2 {
		t.Fatalf("tolerate within the ratio: %+v", s)
	}
	_, s = run(`{"policy":"tolerate","ratio":0.2,"n":10,"fail":[1,2,3]}`, domain.StateFailed)
	if s.Failed != 3 {
		t.Fatalf("tolerate over the ratio: %+v", s)
	}
	// Fail fast: one child fails at once, nine slow ones are cancelled.
	j, s := run(`{"policy":"fail_fast","n":10,"fail":[5],"slow":true}`, domain.StateFailed)
	if s.Failed != 1 {
		t.Fatalf("fail fast: %+v", s)
	}
	for n := 1; n <= 10; n++ {
		id := engine.ChildID("default", j.ID, n)
		want := domain.StateCancelled
		if n == 5 {
			want = domain.StateFailed
		}
		h.waitState(id, want, 10*time.Second)
	}
	h.verify()
}

func TestCancelParentCascades(t *testing.T) {
	h := newHarness(t)
	const n = 1000
	h.runtime(engine.RuntimeConfig{WorkerID: "coordinator", Handlers: map[string]engine.Handler{
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(n, "queued.kid", func(int) string { return "null" })}
		}}})
	sub := h.submit(commands.SubmitRequest{Type: "coord"})
	h.waitState(sub.Job.ID, domain.StateWaiting, 30*time.Second)
	t0 := time.Now()
	if _, err := h.st.Cancel(h.ctx, sub.Job.ID, "not needed"); err != nil {
		t.Fatal(err)
	}
	t.Logf("cancel with %d children took %s", n, time.Since(t0))
	for i := 1; i <= n; i++ {
		if j := h.get(engine.ChildID("default", sub.Job.ID, i)); j.State != domain.StateCancelled {
			t.Fatalf("child %d is %s after the parent's cancel returned", i, j.State)
		}
	}
	h.noneRunsLate("queued.kid")
}

// noneRunsLate starts a worker for jobType once its jobs' parent was
// cancelled, and fails the test if any of them runs; then verifies.
func (h *harness) noneRunsLate(jobType string) {
	h.t.Helper()
	var ran atomic.Int32
	h.runtime(engine.RuntimeConfig{WorkerID: "late", Concurrency: 16, Handlers: map[string]engine.Handler{
		jobType: func(context.Context, *engine.Task) ([]byte, error) { ran.Add(1); return nil, nil }}})
	waitNoWork(h.t, h, "default", jobType)
	if ran.Load() != 0 {
		h.t.Fatalf("%d children ran after their parent was cancelled", ran.Load())
	}
	h.verify()
}

// The parent is cancelled while its coordinator is still making its
// children (before it waits for them): the coordinator's waiting is refused,
// and it cancels the children it made; none of them runs.
func TestCancelWhileCoordinatorMakesChildren(t *testing.T) {
	h := newHarness(t)
	const n = 3000
	h.runtime(engine.RuntimeConfig{WorkerID: "coordinator", Handlers: map[string]engine.Handler{
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(n, "queued.kid", func(int) string { return "null" })}
		}}})
	sub := h.submit(commands.SubmitRequest{Type: "coord"})
	testkit.WaitFor(t, 30*time.Second, func() error {
		_, err := h.st.Record(h.ctx, engine.ChildID("default", sub.Job.ID, 1))
		return err
	})
	if _, err := h.st.Cancel(h.ctx, sub.Job.ID, "stop"); err != nil {
		t.Fatal(err)
	}
	h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvCancelled)
	// The coordinator cancels up to 3000 children, 32 at a time, each a
	// log append and a record write. On a 2-core machine running other
	// race-enabled tests the count can stand still for 20 s (seen with
	// three copies of this test at once; all finished within 30 s).
	testkit.WaitDrained(t, 45*time.Second, func() (int, error) {
		kids, err := h.st.List(h.ctx, engine.Filter{Parent: sub.Job.ID})
		if err != nil {
			return 0, err
		}
		live := 0
		for _, k := range kids {
			if k.State != domain.StateCancelled {
				live++
			}
		}
		return live, nil
	})
	h.noneRunsLate("queued.kid")
}

// Cancelling a parent cancels its grandchildren too (through its children's
// own cancels), and a parent of batches: the running batches see their
// context cancelled, and none of the rest runs.
func TestCancelCascadesToGrandchildrenAndBatches(t *testing.T) {
	h := newHarness(t)
	var batchRuns atomic.Int32
	causes := make(chan error, 8)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4, Handlers: map[string]engine.Handler{
		"root": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(2, "mid", func(int) string { return "null" })}
		},
		"mid": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(3, "leaf.nobody.runs", func(int) string { return "null" })}
		},
		"batches": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			f := &engine.FanOut{BatchType: "slow.batch"}
			for i := 0; i < 200; i++ {
				f.Batches = append(f.Batches, []byte(`null`))
			}
			return nil, f
		}},
		Batches: map[string]engine.BatchHandler{"slow.batch": func(ctx context.Context, b *engine.BatchTask) error {
			batchRuns.Add(1)
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return context.Cause(ctx)
		}}})

	root := h.submit(commands.SubmitRequest{Type: "root"})
	h.waitState(root.Job.ID, domain.StateWaiting, 20*time.Second)
	for i := 1; i <= 2; i++ {
		h.waitState(engine.ChildID("default", root.Job.ID, i), domain.StateWaiting, 20*time.Second)
	}
	if _, err := h.st.Cancel(h.ctx, root.Job.ID, "stop it all"); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		mid := engine.ChildID("default", root.Job.ID, i)
		if j := h.get(mid); j.State != domain.StateCancelled {
			t.Fatalf("child %d is %s", i, j.State)
		}
		for k := 1; k <= 3; k++ {
			if j := h.get(engine.ChildID("default", mid, k)); j.State != domain.StateCancelled {
				t.Fatalf("grandchild %d/%d is %s after the cancel returned", i, k, j.State)
			}
		}
	}

	parent := h.submit(commands.SubmitRequest{Type: "batches"})
	h.waitState(parent.Job.ID, domain.StateWaiting, 20*time.Second)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := batchRuns.Load(); n != 4 {
			return fmt.Errorf("%d batches running", n)
		}
		return nil
	})
	if _, err := h.st.Cancel(h.ctx, parent.Job.ID, "enough"); err != nil {
		t.Fatal(err)
	}
	// The batches no worker took are gone when the cancel returns.
	qs, err := h.st.JS.Stream(h.ctx, streams.BatchStream("default"))
	if err != nil {
		t.Fatal(err)
	}
	left, err := qs.Info(h.ctx, jetstream.WithSubjectFilter(streams.BatchSubject("default", "slow.batch", parent.Job.ID)))
	if err != nil {
		t.Fatal(err)
	}
	if len(left.State.Subjects) != 0 {
		t.Fatalf("batches left after the cancel: %v", left.State.Subjects)
	}
	for i := 0; i < 4; i++ {
		select {
		case c := <-causes:
			if !errors.Is(c, engine.ErrJobCancelled) {
				t.Fatalf("batch context ended with %v", c)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of 4 running batches saw the cancel", i)
		}
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		info, err := h.consumerInfo(streams.BatchStream("default"), engine.BatchConsumerName("slow.batch"))
		if err != nil {
			return err
		}
		if info.NumAckPending != 0 || info.NumPending != 0 {
			return fmt.Errorf("batches: %d held, %d waiting, %d pulls waiting", info.NumAckPending, info.NumPending, info.NumWaiting)
		}
		return nil
	})
	if n := batchRuns.Load(); n != 4 {
		t.Fatalf("%d batches ran; only the 4 running at the cancel should have", n)
	}
	h.verify()
}

func TestNestedFanOut(t *testing.T) {
	h := newHarness(t)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 8, Handlers: map[string]engine.Handler{
		"root": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(3, "mid", func(int) string { return "null" })}
		},
		"mid": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{BatchType: "leaf", Batches: [][]byte{[]byte(`1`), []byte(`2`)}}
		}},
		Batches: map[string]engine.BatchHandler{"leaf": func(context.Context, *engine.BatchTask) error { return nil }}})
	sub := h.submit(commands.SubmitRequest{Type: "root"})
	j := h.waitState(sub.Job.ID, domain.StateSucceeded, 20*time.Second)
	if s := summary(t, j); s.Succeeded != 3 {
		t.Fatalf("root %+v", s)
	}
	for i := 1; i <= 3; i++ {
		mid := h.get(engine.ChildID("default", sub.Job.ID, i))
		if mid.State != domain.StateSucceeded || mid.Fanout.Counts.Succeeded != 2 {
			t.Fatalf("mid %d: %+v", i, mid)
		}
	}
	h.verify()
}

// Two counters at once (as during a leader handover): the parent still
// completes exactly once, and the last pieces finishing together on
// different workers make no difference.
func TestFanInExactlyOnceWithTwoCounters(t *testing.T) {
	h := newHarness(t)
	other := maintenance.NewFanIn(engine.Internal(testkit.Store(t, testkit.Conn(t, h.srv), "second-counter")), maintenance.FanInConfig{Log: testkit.Logger(t)})
	if err := other.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	defer other.Stop(context.Background())
	type roundState struct {
		gate    chan struct{}
		arrived atomic.Int32
	}
	var current atomic.Pointer[roundState]
	kids := map[string]engine.Handler{"kid": func(ctx context.Context, task *engine.Task) ([]byte, error) {
		r := current.Load()
		r.arrived.Add(1)
		<-r.gate // all children of the round finish at the same moment
		return nil, nil
	}}
	for w := 0; w < 4; w++ {
		h.runtime(engine.RuntimeConfig{WorkerID: fmt.Sprintf("w%d", w), Concurrency: 1, Handlers: kids})
	}
	h.runtime(engine.RuntimeConfig{WorkerID: "c", Handlers: map[string]engine.Handler{
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(4, "kid", func(int) string { return "null" })}
		}}})
	for round := 0; round < 5; round++ {
		r := &roundState{gate: make(chan struct{})}
		current.Store(r)
		gate, arrived := r.gate, &r.arrived
		sub := h.submit(commands.SubmitRequest{Type: "coord"})
		testkit.WaitFor(t, 10*time.Second, func() error {
			if arrived.Load() != 4 {
				return fmt.Errorf("%d children running", arrived.Load())
			}
			return nil
		})
		close(gate)
		h.waitState(sub.Job.ID, domain.StateSucceeded, 10*time.Second)
		if n := countType(h.events(sub.Job.ID), domain.EvSucceeded); n != 1 {
			t.Fatalf("round %d: parent succeeded %d times", round, n)
		}
	}
	h.verify()
}

func TestReaper(t *testing.T) {
	h := newHarness(t)
	rp := maintenance.NewReaper(engine.Internal(testkit.Store(t, testkit.Conn(t, h.srv), "reaper")), maintenance.ReaperConfig{
		Interval: time.Hour, Grace: 200 * time.Millisecond, StallTimeout: time.Hour, Log: testkit.Logger(t)})

	// A running job whose worker died and that nobody else runs.
	running := h.submit(commands.SubmitRequest{Type: "orphaned", Timeout: dur(300 * time.Millisecond)})
	if _, _, err := h.st.Apply(h.ctx, "claim", running, func(j *domain.Job) (*domain.Event, error) {
		return commands.Start(j, "dead", 1, time.Now())
	}); err != nil {
		t.Fatal(err)
	}
	// A queued job with a queue timeout and no worker.
	queued := h.submit(commands.SubmitRequest{Type: "nobody", QueueTimeout: dur(300 * time.Millisecond)})
	// A queued job with no queue timeout: never reaped.
	patient := h.submit(commands.SubmitRequest{Type: "nobody"})
	// A parent whose pieces stalled (its own stall timeout).
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Handlers: map[string]engine.Handler{
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{StallTimeout: time.Second, Children: childReqs(2, "never.run", func(int) string { return "null" })}
		}}})
	parent := h.submit(commands.SubmitRequest{Type: "coord"})
	h.waitState(parent.Job.ID, domain.StateWaiting, 10*time.Second)

	testkit.WaitFor(t, 15*time.Second, func() error {
		if err := rp.Scan(h.ctx); err != nil {
			return err
		}
		for _, id := range []string{running.Job.ID, queued.Job.ID, parent.Job.ID} {
			if j := h.get(id); !j.State.Terminal() {
				return fmt.Errorf("%s (%s) is %s", id, j.Spec.Type, j.State)
			}
		}
		return nil
	})
	for id, code := range map[string]string{running.Job.ID: runtime.CodeTimeout, queued.Job.ID: "QUEUE_TIMEOUT", parent.Job.ID: "STALLED"} {
		if j := h.get(id); j.State != domain.StateFailed || j.Error == nil || j.Error.Code != code {
			t.Fatalf("%s: %s %+v", id, j.State, j.Error)
		}
	}
	h.wantEvents(parent.Job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvWaiting, domain.EvStalled)
	for i := 1; i <= 2; i++ { // the stalled parent's children are cancelled with it
		h.waitState(engine.ChildID("default", parent.Job.ID, i), domain.StateCancelled, 10*time.Second)
	}
	if j := h.get(patient.Job.ID); j.State != domain.StateQueued {
		t.Fatalf("patient job %s", j.State)
	}
	// A job that finished is never touched, whatever its times say. (Each
	// job's own events are compared: the cascade's piece events may still
	// be landing on the parent's piece subject.)
	ids := []string{running.Job.ID, queued.Job.ID, patient.Job.ID, parent.Job.ID,
		engine.ChildID("default", parent.Job.ID, 1), engine.ChildID("default", parent.Job.ID, 2)}
	before := map[string]int{}
	for _, id := range ids {
		before[id] = len(h.events(id))
	}
	if err := rp.Scan(h.ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if n := len(h.events(id)); n != before[id] {
			t.Fatalf("a second scan wrote %d events of job %s", n-before[id], id)
		}
	}
	h.verify()
}

func TestQueuePosition(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, h.submit(commands.SubmitRequest{Type: "line", Queue: "pos"}).Job.ID)
	}
	for i, id := range ids {
		pos, err := engine.Internal(h.st).QueuePosition(h.ctx, h.get(id))
		if err != nil || pos != i {
			t.Fatalf("job %d: position %d, %v", i, pos, err)
		}
	}
	// A worker takes two; the others move up.
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), 30*time.Second, testkit.Logger(t))
	for i := 0; i < 2; i++ {
		if s, err := rm.Claim(h.ctx, "w", []string{"pos"}, []string{"line"}, time.Second, ""); err != nil || s.Job == nil {
			t.Fatalf("claim: %v", err)
		}
	}
	for i, id := range ids[2:] {
		pos, err := engine.Internal(h.st).QueuePosition(h.ctx, h.get(id))
		if err != nil || pos != i {
			t.Fatalf("after claims, job %d: position %d, %v", i+2, pos, err)
		}
	}
	if pos, _ := engine.Internal(h.st).QueuePosition(h.ctx, h.get(ids[0])); pos != -1 {
		t.Fatalf("claimed job has position %d", pos)
	}
	// A job cancelled while queued leaves its work item behind; it is not
	// ahead of anyone.
	if _, err := h.st.Cancel(h.ctx, ids[2], "changed my mind"); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids[3:] {
		if pos, err := engine.Internal(h.st).QueuePosition(h.ctx, h.get(id)); err != nil || pos != i {
			t.Fatalf("after a cancel, job %d: position %d, %v", i+3, pos, err)
		}
	}
	// A job of another type on the same queue waits for its own workers,
	// not behind these.
	other := h.submit(commands.SubmitRequest{Type: "other.line", Queue: "pos"})
	if pos, err := engine.Internal(h.st).QueuePosition(h.ctx, other.Job); err != nil || pos != 0 {
		t.Fatalf("job of another type: position %d, %v", pos, err)
	}
}

// A queue stream made before batch streams captures its queue's batches
// itself: a fan-out of batches on it runs there (its batch consumer on that
// stream, no batch stream made beside it) and its stats count them.
func TestBatchesOnAQueueStreamMadeBeforeBatchStreams(t *testing.T) {
	h := newHarness(t)
	const queue = "older"
	cfg := (streams.Topology{}).QueueConfig(queue)
	cfg.Subjects = []string{streams.LegacyQueueSubject(queue)}
	if _, err := h.st.JS.CreateStream(h.ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int64
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Queue: queue, Concurrency: 4,
		Handlers: map[string]engine.Handler{"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			f := &engine.FanOut{BatchType: "old.piece", Batches: make([][]byte, 20)}
			for i := range f.Batches {
				f.Batches[i] = []byte(strconv.Itoa(i))
			}
			return nil, f
		}},
		Batches: map[string]engine.BatchHandler{"old.piece": func(ctx context.Context, b *engine.BatchTask) error {
			runs.Add(1)
			return nil
		}}})
	sub := h.submit(commands.SubmitRequest{Type: "coord", Queue: queue})
	j := h.waitState(sub.Job.ID, domain.StateSucceeded, 30*time.Second)
	if s := summary(t, j); s.Total != 20 || s.Succeeded != 20 || runs.Load() != 20 {
		t.Fatalf("summary %+v, runs %d", s, runs.Load())
	}
	if _, err := h.st.JS.Stream(h.ctx, streams.BatchStream(queue)); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("a batch stream beside a queue stream that holds the batches: %v", err)
	}
	if _, err := h.consumerInfo(streams.QueueStream(queue), engine.BatchConsumerName("old.piece")); err != nil {
		t.Fatalf("the batch consumer on the queue stream: %v", err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		st, err := engine.Internal(h.st).QueueStats(h.ctx, queue)
		if err != nil {
			return err
		}
		if st.Waiting != 0 || st.Held != 0 {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	h.verify()
}
