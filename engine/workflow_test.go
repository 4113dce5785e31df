package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// step is a step of a test workflow: name, type, dependencies, policy.
func step(name, typ string, deps ...string) commands.WorkflowStepRequest {
	return commands.WorkflowStepRequest{Name: name, DependsOn: deps,
		Job: commands.SubmitRequest{Type: typ, Payload: commands.RawJSON(`{"step":"` + name + `"}`), MaxRetries: ptr(0)}}
}

func (h *harness) submitWorkflow(req commands.WorkflowRequest) engine.WorkflowSubmitted {
	h.t.Helper()
	res, err := h.st.SubmitWorkflow(h.ctx, &req)
	if err != nil {
		h.t.Fatal(err)
	}
	return res
}

// stepID is the job id of the named step.
func stepID(t *testing.T, res engine.WorkflowSubmitted, name string) string {
	t.Helper()
	for i, st := range res.Job.Spec.Workflow.Steps {
		if st.Name == name {
			return res.IDs[i]
		}
	}
	t.Fatalf("no step %s", name)
	return ""
}

// statuses are the steps' statuses as the workflow's view shows them.
func (h *harness) statuses(id string) map[string]string {
	h.t.Helper()
	v, err := h.st.ViewWorkflow(h.ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range v.Steps {
		out[s.Name] = s.Status
	}
	return out
}

// count is how many events of type typ the job's history has.
func (h *harness) count(id, typ string) int {
	n := 0
	for _, e := range h.events(id) {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// order records the steps in the order their handlers ran.
type order struct {
	mu   sync.Mutex
	runs []string
}

func (o *order) add(s string) {
	o.mu.Lock()
	o.runs = append(o.runs, s)
	o.mu.Unlock()
}

func (o *order) list() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.runs)
}

// A diamond: a, then b and c side by side, then d, which sees b's and c's
// results by name. Each step after a waits in pending (its hold names the
// steps it waits for) and is admitted once; the workflow succeeds with a
// summary, and the log and the bucket agree.
func TestWorkflowDiamond(t *testing.T) {
	h := newHarness(t)
	var ran order
	var dInputs map[string][]byte
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4, Handlers: map[string]engine.Handler{
		"wf.step": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			name := task.Job.Spec.Step.Name
			ran.add(name)
			in, err := task.Inputs(ctx)
			if err != nil {
				return nil, err
			}
			if name == "d" {
				dInputs = in
			}
			return json.Marshal(map[string]any{"from": name, "inputs": len(in)})
		}}})
	res := h.submitWorkflow(commands.WorkflowRequest{Name: "diamond", Steps: []commands.WorkflowStepRequest{
		step("a", "wf.step"), step("b", "wf.step", "a"), step("c", "wf.step", "a"), step("d", "wf.step", "b", "c")}})
	if !res.Created || len(res.IDs) != 4 || res.Job.State != domain.StateWaiting {
		t.Fatalf("submitted %+v, state %s", res.IDs, res.Job.State)
	}
	d := h.get(stepID(t, res, "d"))
	if d.State != domain.StatePending && d.State != domain.StateQueued && !d.State.Terminal() && d.State != domain.StateRunning {
		t.Fatalf("d is %s", d.State)
	}
	wf := h.waitState(res.Job.ID, domain.StateSucceeded, 20*time.Second)
	var sum commands.WorkflowSummary
	if err := json.Unmarshal(wf.Result, &sum); err != nil || sum.Total != 4 || sum.Succeeded != 4 {
		t.Fatalf("result %s (%v)", wf.Result, err)
	}
	if c := wf.Fanout.Counts; c.Succeeded != 4 || c.Failed != 0 {
		t.Fatalf("counts %+v", c)
	}
	runs := ran.list()
	if len(runs) != 4 || runs[0] != "a" || runs[3] != "d" {
		t.Fatalf("ran %v: want a first, d last", runs)
	}
	if len(dInputs) != 2 || string(dInputs["b"]) != `{"from":"b","inputs":1}` || string(dInputs["c"]) != `{"from":"c","inputs":1}` {
		t.Fatalf("d's inputs %q", dInputs)
	}
	h.wantEvents(stepID(t, res, "a"), domain.EvSubmitted, domain.EvStarted, domain.EvSucceeded)
	for _, name := range []string{"b", "c", "d"} {
		h.wantEvents(stepID(t, res, name), domain.EvSubmitted, domain.EvAdmitted, domain.EvStarted, domain.EvSucceeded)
	}
	first := h.events(stepID(t, res, "d"))[0]
	if first.To != domain.StatePending || first.Hold == nil || first.Hold.Limit != domain.LimitDeps || fmt.Sprint(first.Hold.Steps) != "[b c]" {
		t.Fatalf("d's first event %+v, hold %+v", first, first.Hold)
	}
	evs := types(h.events(res.Job.ID))
	if evs[0] != domain.EvSubmitted || evs[1] != domain.EvWaiting || evs[len(evs)-1] != domain.EvSucceeded {
		t.Fatalf("workflow's events %v", evs)
	}
	if got := h.statuses(res.Job.ID); fmt.Sprint(got) != "map[a:succeeded b:succeeded c:succeeded d:succeeded]" {
		t.Fatalf("statuses %v", got)
	}
	h.verify()
}

// Policy fail (the default): a step that fails for good fails the
// workflow; a step that waited for it is skipped, a running one is
// cancelled, and an "always" step (a clean-up) still runs, after which the
// workflow ends failed, naming the step.
func TestWorkflowFailsAtOnce(t *testing.T) {
	h := newHarness(t)
	slow := make(chan struct{})
	var cleaned order
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4, Handlers: map[string]engine.Handler{
		"wf.ok": func(ctx context.Context, task *engine.Task) ([]byte, error) { return []byte(`1`), nil },
		"wf.bad": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			<-slow // until the slow step runs
			return nil, errors.New("boom")
		},
		"wf.slow": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			close(slow)
			<-ctx.Done()
			return nil, ctx.Err()
		},
		"wf.cleanup": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			cleaned.add(task.Job.Spec.Step.Name)
			return []byte(`"clean"`), nil
		}}})
	cleanup := step("cleanup", "wf.cleanup", "bad", "slow")
	cleanup.OnFailure = domain.OnFailureAlways
	res := h.submitWorkflow(commands.WorkflowRequest{Steps: []commands.WorkflowStepRequest{
		step("bad", "wf.bad"), step("after", "wf.ok", "bad"), step("slow", "wf.slow"), cleanup}})
	wf := h.waitState(res.Job.ID, domain.StateFailed, 20*time.Second)
	if wf.Error == nil || wf.Error.Code != "WORKFLOW_FAILED" || !contains(wf.Error.Message, "step bad failed: boom") {
		t.Fatalf("error %+v", wf.Error)
	}
	want := "map[after:skipped bad:failed cleanup:succeeded slow:cancelled]"
	if got := h.statuses(res.Job.ID); fmt.Sprint(got) != want {
		t.Fatalf("statuses %v, want %s", got, want)
	}
	if fmt.Sprint(cleaned.list()) != "[cleanup]" {
		t.Fatalf("cleanup ran %v", cleaned.list())
	}
	h.wantEvents(stepID(t, res, "after"), domain.EvSubmitted, domain.EvCancelled)
	h.verify()
}

func contains(s, sub string) bool {
	return len(s) >= len(sub) && (s == sub || len(sub) == 0 || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// Policy skip: a failed step's dependents (and theirs) are skipped; the
// other branch runs to its end; then the workflow ends failed.
func TestWorkflowSkipsDependents(t *testing.T) {
	h := newHarness(t)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4, Handlers: map[string]engine.Handler{
		"wf.ok":  func(ctx context.Context, task *engine.Task) ([]byte, error) { return []byte(`1`), nil },
		"wf.bad": func(ctx context.Context, task *engine.Task) ([]byte, error) { return nil, errors.New("nope") }}})
	res := h.submitWorkflow(commands.WorkflowRequest{OnFailure: domain.OnFailureSkip, Steps: []commands.WorkflowStepRequest{
		step("a", "wf.bad"), step("a2", "wf.ok", "a"), step("a3", "wf.ok", "a2"),
		step("b", "wf.ok"), step("b2", "wf.ok", "b"), step("join", "wf.ok", "a3", "b2")}})
	h.waitState(res.Job.ID, domain.StateFailed, 20*time.Second)
	want := "map[a:failed a2:skipped a3:skipped b:succeeded b2:succeeded join:skipped]"
	if got := h.statuses(res.Job.ID); fmt.Sprint(got) != want {
		t.Fatalf("statuses %v, want %s", got, want)
	}
	wf := h.get(res.Job.ID)
	var sum commands.WorkflowSummary
	if err := json.Unmarshal(wf.Result, &sum); err != nil || sum.Succeeded != 2 || sum.Failed != 1 || sum.Skipped != 3 {
		t.Fatalf("summary %s", wf.Result)
	}
	h.verify()
}

// Cancelling a workflow cancels every step that did not end (its cascade),
// the running one's handler too; none of the pending ones ever runs.
func TestWorkflowCancelCascades(t *testing.T) {
	h := newHarness(t)
	started := make(chan struct{}, 1)
	var later order
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Handlers: map[string]engine.Handler{
		"wf.block": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			started <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		},
		"wf.ok": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			later.add(task.Job.ID)
			return nil, nil
		}}})
	res := h.submitWorkflow(commands.WorkflowRequest{Steps: []commands.WorkflowStepRequest{
		step("first", "wf.block"), step("second", "wf.ok", "first"), step("third", "wf.ok", "second")}})
	<-started
	if _, err := h.st.Cancel(h.ctx, res.Job.ID, "enough"); err != nil {
		t.Fatal(err)
	}
	for _, id := range res.IDs {
		h.waitState(id, domain.StateCancelled, 10*time.Second)
	}
	if len(later.list()) != 0 {
		t.Fatalf("steps ran after the cancel: %v", later.list())
	}
	h.verify()
}

// A workflow with an idempotency key submitted twice is one workflow: the
// second submit returns it, with the same steps, and writes nothing.
func TestWorkflowIdempotencyKey(t *testing.T) {
	h := newHarness(t)
	req := commands.WorkflowRequest{IdempotencyKey: "nightly-2026-12-01", Steps: []commands.WorkflowStepRequest{
		step("a", "wf.none"), step("b", "wf.none", "a")}}
	first := h.submitWorkflow(req)
	last := h.lastSeq()
	second := h.submitWorkflow(req)
	if second.Created || second.Job.ID != first.Job.ID || fmt.Sprint(second.IDs) != fmt.Sprint(first.IDs) {
		t.Fatalf("second submit %+v created %v, first %+v", second.IDs, second.Created, first.IDs)
	}
	if h.lastSeq() != last {
		t.Fatalf("the repeat wrote events: %d -> %d", last, h.lastSeq())
	}
	if first.Job.ID != domain.KeyedID("default", "nightly-2026-12-01") {
		t.Fatalf("id %s is not derived from the key", first.Job.ID)
	}
}

// Bad workflows are refused before anything is written, with
// invalid-workflow naming the steps, or the step's field.
func TestWorkflowRefusedWritesNothing(t *testing.T) {
	h := newHarness(t)
	last := h.lastSeq()
	cases := []struct {
		req   commands.WorkflowRequest
		field string
		msg   string
		wf    bool
	}{
		{commands.WorkflowRequest{Steps: []commands.WorkflowStepRequest{step("a", "x", "c"), step("b", "x", "a"), step("c", "x", "b")}},
			"steps", "cycle a -> b -> c -> a", true},
		{commands.WorkflowRequest{Steps: []commands.WorkflowStepRequest{step("a", "x", "zz")}},
			"steps[0].depends_on", `depends on "zz", which is not a step`, true},
		{commands.WorkflowRequest{Steps: []commands.WorkflowStepRequest{step("a", "x"), step("a", "x")}},
			"steps[1].name", `step "a" is named twice`, true},
		{commands.WorkflowRequest{}, "steps", "at least one step", true},
		{commands.WorkflowRequest{Steps: []commands.WorkflowStepRequest{{Name: "a", Job: commands.SubmitRequest{Type: "x", MaxRetries: ptr(-1)}}}},
			"steps[0].max_retries", "must be 0-1000", false},
		{commands.WorkflowRequest{Steps: []commands.WorkflowStepRequest{{Name: "a", Job: commands.SubmitRequest{Type: "x", Payload: commands.RawJSON(`{`)}}}},
			"steps[0].payload", "not valid JSON", false},
	}
	for _, c := range cases {
		_, err := h.st.SubmitWorkflow(h.ctx, &c.req)
		var in *commands.InputError
		if !errors.As(err, &in) || in.Field != c.field || !contains(err.Error(), c.msg) || errors.Is(err, commands.ErrInvalidWorkflow) != c.wf {
			t.Errorf("%s: got %v (field %v), want field %s, %q, invalid-workflow %v", c.field, err, in, c.field, c.msg, c.wf)
		}
		if !errors.Is(err, commands.ErrInvalidInput) {
			t.Errorf("%v does not match ErrInvalidInput", err)
		}
	}
	if h.lastSeq() != last {
		t.Fatalf("refused workflows wrote events: %d -> %d", last, h.lastSeq())
	}
}

// Two counters at once, and the last two dependencies of a step ending at
// the same instant on two workers: the step is admitted exactly once.
func TestWorkflowAdmittedOnceWithTwoCounters(t *testing.T) {
	h := newHarness(t)
	other := maintenance.NewFanIn(engine.Internal(testkit.Store(t, testkit.Conn(t, h.srv), "second-counter")), maintenance.FanInConfig{Log: testkit.Logger(t)})
	if err := other.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	defer other.Stop(context.Background())
	const rounds = 5
	gate := make(chan struct{})
	var ready sync.WaitGroup
	handler := func(ctx context.Context, task *engine.Task) ([]byte, error) {
		if task.Job.Spec.Step.Name != "join" {
			ready.Done()
			<-gate
		}
		return nil, nil
	}
	for w := range 2 {
		h.runtime(engine.RuntimeConfig{WorkerID: fmt.Sprintf("w%d", w), Concurrency: 2 * rounds, Handlers: map[string]engine.Handler{"wf.gate": handler}})
	}
	var all []engine.WorkflowSubmitted
	ready.Add(2 * rounds)
	for range rounds {
		all = append(all, h.submitWorkflow(commands.WorkflowRequest{Steps: []commands.WorkflowStepRequest{
			step("left", "wf.gate"), step("right", "wf.gate"), step("join", "wf.gate", "left", "right")}}))
	}
	ready.Wait()
	close(gate) // every left and right ends at once
	for _, res := range all {
		h.waitState(res.Job.ID, domain.StateSucceeded, 20*time.Second)
		if n := h.count(stepID(t, res, "join"), domain.EvAdmitted); n != 1 {
			t.Fatalf("join admitted %d times", n)
		}
		if n := h.count(res.Job.ID, domain.EvSucceeded); n != 1 {
			t.Fatalf("workflow succeeded %d times", n)
		}
	}
	h.verify()
}

// A failed workflow resumed: the steps that succeeded are kept (not run
// again, their results the new run's inputs), the failed one and what
// depends on it run again; the new run names the old one. Under policy
// skip the side branch ends succeeded before the workflow fails, and is
// carried over; under policy fail it is running when b fails, is
// cancelled with the workflow, and runs again.
func TestWorkflowResume(t *testing.T) {
	for _, policy := range []string{domain.OnFailureSkip, domain.OnFailureFail} {
		t.Run(policy, func(t *testing.T) { testWorkflowResume(t, policy) })
	}
}

func testWorkflowResume(t *testing.T, policy string) {
	h := newHarness(t)
	runs := &counter{}
	var fail sync.Mutex
	failing := true
	sideRuns := make(chan struct{}, 1)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4, Handlers: map[string]engine.Handler{
		"wf.step": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			name := task.Job.Spec.Step.Name
			n := runs.add(name)
			fail.Lock()
			f := failing
			fail.Unlock()
			switch {
			case policy == domain.OnFailureFail && name == "side" && n == 1:
				sideRuns <- struct{}{}
				<-ctx.Done() // until the failing workflow cancels it
				return nil, context.Cause(ctx)
			case policy == domain.OnFailureFail && name == "b" && f:
				<-sideRuns // b fails while side runs
				return nil, errors.New("flaky")
			case name == "b" && f:
				return nil, errors.New("flaky")
			}
			in, err := task.Inputs(ctx)
			if err != nil {
				return nil, err
			}
			keys := make([]string, 0, len(in))
			for k := range in {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return json.Marshal(fmt.Sprintf("%s%v", name, keys))
		}}})
	res := h.submitWorkflow(commands.WorkflowRequest{OnFailure: policy, Steps: []commands.WorkflowStepRequest{
		step("a", "wf.step"), step("b", "wf.step", "a"), step("c", "wf.step", "b"), step("side", "wf.step", "a")}})
	h.waitState(res.Job.ID, domain.StateFailed, 20*time.Second)
	sideWas := domain.StateSucceeded
	if policy == domain.OnFailureFail {
		sideWas = domain.StateCancelled
	}
	h.waitState(stepID(t, res, "side"), sideWas, 20*time.Second)
	if _, err := h.st.RetryWorkflow(h.ctx, stepID(t, res, "a")); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("resume of a step: %v", err)
	}
	fail.Lock()
	failing = false
	fail.Unlock()
	again, err := h.st.RetryWorkflow(h.ctx, res.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !again.Created || again.Job.Spec.RetryOf != res.Job.ID {
		t.Fatalf("resumed run %+v", again.Job.Spec)
	}
	if repeat, err := h.st.RetryWorkflow(h.ctx, res.Job.ID); err != nil || repeat.Job.ID != again.Job.ID || repeat.Created {
		t.Fatalf("repeat of the resume: %v, %+v", err, repeat)
	}
	h.waitState(again.Job.ID, domain.StateSucceeded, 20*time.Second)
	sideCarried := policy == domain.OnFailureSkip
	if stepID(t, again, "a") != stepID(t, res, "a") || (stepID(t, again, "side") == stepID(t, res, "side")) != sideCarried {
		t.Fatalf("policy %s: a carried over, side carried %v: %v vs %v", policy, sideCarried, again.IDs, res.IDs)
	}
	wantSide := 1
	if !sideCarried {
		wantSide = 2
	}
	if runs.get("a") != 1 || runs.get("side") != wantSide || runs.get("b") != 2 || runs.get("c") != 1 {
		t.Fatalf("runs a=%d side=%d (want %d) b=%d c=%d", runs.get("a"), runs.get("side"), wantSide, runs.get("b"), runs.get("c"))
	}
	c := h.get(stepID(t, again, "c"))
	if string(c.Result) != `"c[b]"` {
		t.Fatalf("c's result %s", c.Result)
	}
	v, err := h.st.ViewWorkflow(h.ctx, again.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !v.Steps[0].Carried || v.Steps[1].Carried || v.Steps[3].Carried != sideCarried || v.RetryOf != res.Job.ID {
		t.Fatalf("view %+v", v)
	}
	if _, err := h.st.RetryWorkflow(h.ctx, again.Job.ID); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("resume of a succeeded workflow: %v", err)
	}
	h.verify()
}

// A step in a queue with limits waits for its dependencies first, then for
// a slot: its queue's admission admits it only once the workflow released
// it, and never more of them at once than the limit.
func TestWorkflowStepsInAQueueWithLimits(t *testing.T) {
	h := newHarness(t)
	if _, err := h.st.SetQueueLimits(h.ctx, "narrow", domain.QueueLimits{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	running, most := 0, 0
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Queue: "narrow", Concurrency: 4, Handlers: map[string]engine.Handler{
		"wf.step": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			mu.Lock()
			running++
			most = max(most, running)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			running--
			mu.Unlock()
			return nil, nil
		}}})
	steps := []commands.WorkflowStepRequest{step("a", "wf.step")}
	for i := range 4 {
		steps = append(steps, step(fmt.Sprintf("b%d", i), "wf.step", "a"))
	}
	res := h.submitWorkflow(commands.WorkflowRequest{Queue: "narrow", Steps: steps})
	h.waitState(res.Job.ID, domain.StateSucceeded, 30*time.Second)
	if most != 1 {
		t.Fatalf("%d steps ran at once in a queue of max_running 1", most)
	}
	for i := range 4 {
		evs := types(h.events(stepID(t, res, fmt.Sprintf("b%d", i))))
		if !slices.Contains(evs, domain.EvPending) || !slices.Contains(evs, domain.EvAdmitted) {
			t.Fatalf("b%d's events %v: want released (job.pending) then admitted", i, evs)
		}
	}
	h.verify()
}

// The leader's counter is rebuilt from the log: with no engine running,
// a dependency succeeds (its event and its piece event are in the log,
// no admission is); the engine started after finds the workflow, admits
// the dependent exactly once, and ends the workflow.
func TestWorkflowCounterRebuiltFromTheLog(t *testing.T) {
	h := newHarness(t)
	gate := make(chan struct{})
	started := make(chan struct{}, 1)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 2, Handlers: map[string]engine.Handler{
		"wf.gated": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			if task.Job.Spec.Step.Name == "first" {
				started <- struct{}{}
				<-gate
			}
			return []byte(`"` + task.Job.Spec.Step.Name + `"`), nil
		}}})
	res := h.submitWorkflow(commands.WorkflowRequest{Steps: []commands.WorkflowStepRequest{
		step("first", "wf.gated"), step("second", "wf.gated", "first")}})
	<-started
	h.eng.Stop(context.Background())
	close(gate)
	h.waitState(stepID(t, res, "first"), domain.StateSucceeded, 20*time.Second)
	if s := h.get(stepID(t, res, "second")); s.State != domain.StatePending {
		t.Fatalf("second is %s with no counter running", s.State)
	}
	eng := engine.NewEngine(testkit.Store(t, testkit.Conn(t, h.srv), "engine-2"),
		engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Log: testkit.Logger(t)})
	if err := eng.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	h.waitState(res.Job.ID, domain.StateSucceeded, 20*time.Second)
	if n := h.count(stepID(t, res, "second"), domain.EvAdmitted); n != 1 {
		t.Fatalf("second admitted %d times", n)
	}
	if got := h.statuses(res.Job.ID); fmt.Sprint(got) != "map[first:succeeded second:succeeded]" {
		t.Fatalf("statuses %v", got)
	}
	h.verify()
}

// A step just claimed by an in-process worker, whose record is written
// later (DeferRecord), is shown running in its workflow's view at once, as
// Read shows the job alone: the view folds a queued step's last event.
func TestWorkflowViewShowsAStepJustClaimed(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	started := h.heldWorker("wf.held")
	res := h.submitWorkflow(commands.WorkflowRequest{Name: "held", Steps: []commands.WorkflowStepRequest{
		step("a", "wf.held"), step("b", "wf.held", "a")}})
	if got := <-started; got != stepID(t, res, "a") {
		t.Fatalf("started %s, want step a", got)
	}
	if got := h.statuses(res.Job.ID); fmt.Sprint(got) != "map[a:running b:pending]" {
		t.Fatalf("statuses %v", got)
	}
}
