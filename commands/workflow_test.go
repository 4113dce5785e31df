package commands_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// graph builds a workflow request from "name:dep,dep" specs.
func graph(specs ...string) *commands.WorkflowRequest {
	r := &commands.WorkflowRequest{}
	for _, s := range specs {
		name, deps, _ := strings.Cut(s, ":")
		st := commands.WorkflowStepRequest{Name: name, Job: commands.SubmitRequest{Type: "t"}}
		if deps != "" {
			st.DependsOn = strings.Split(deps, ",")
		}
		r.Steps = append(r.Steps, st)
	}
	return r
}

func TestPrepareWorkflowRefusals(t *testing.T) {
	many := func(n int, deps func(i int) string) *commands.WorkflowRequest {
		specs := make([]string, n)
		for i := range specs {
			specs[i] = fmt.Sprintf("s%d:%s", i, deps(i))
		}
		return graph(specs...)
	}
	wide := many(commands.MaxStepDeps+2, func(i int) string {
		if i < commands.MaxStepDeps+1 {
			return ""
		}
		names := make([]string, commands.MaxStepDeps+1)
		for k := range names {
			names[k] = fmt.Sprintf("s%d", k)
		}
		return strings.Join(names, ",")
	})
	// 101 steps each depending on the same 1000 roots: 101,000 edges.
	edges := many(1000+101, func(i int) string {
		if i < 1000 {
			return ""
		}
		names := make([]string, 1000)
		for k := range names {
			names[k] = fmt.Sprintf("s%d", k)
		}
		return strings.Join(names, ",")
	})
	cases := []struct {
		name  string
		req   *commands.WorkflowRequest
		field string
		want  string
	}{
		{"no steps", graph(), "steps", "at least one step"},
		{"too many steps", many(commands.MaxWorkflowSteps+1, func(int) string { return "" }), "steps", "10001 steps: at most 10000"},
		{"empty name", graph(":"), "steps[0].name", "is required"},
		{"bad name", graph("a b"), "steps[0].name", `"a b": want 1-64 of [A-Za-z0-9_-]`},
		{"long name", graph(strings.Repeat("x", 65)), "steps[0].name", "want 1-64"},
		{"duplicate", graph("a", "b", "a"), "steps[2].name", `step "a" is named twice (steps[0] and steps[2])`},
		{"unknown dependency", graph("a", "b:c"), "steps[1].depends_on", `step "b" depends on "c", which is not a step of the workflow`},
		{"self", graph("a:a"), "steps[0].depends_on", `step "a" depends on itself`},
		{"twice", graph("a", "b:a,a"), "steps[1].depends_on", `step "b" depends on "a" twice`},
		{"two-cycle", graph("a:b", "b:a"), "steps", "cycle a -> b -> a"},
		{"three-cycle", graph("x", "a:c,x", "b:a", "c:b"), "steps", "cycle a -> b -> c -> a"},
		{"cycle behind a root", graph("r", "p:r,q", "q:p", "tail:q"), "steps", "cycle p -> q -> p"},
		{"too many deps", wide, fmt.Sprintf("steps[%d].depends_on", commands.MaxStepDeps+1), "depends on 1001 steps: at most 1000"},
		{"too many edges", edges, "steps", "more than 100000 dependencies"},
		{"bad policy", &commands.WorkflowRequest{OnFailure: "retry", Steps: graph("a").Steps}, "on_failure", "want fail, skip or always"},
		{"bad step policy", func() *commands.WorkflowRequest {
			r := graph("a")
			r.Steps[0].OnFailure = "never"
			return r
		}(), "steps[0].on_failure", "want fail, skip or always"},
		{"long workflow name", &commands.WorkflowRequest{Name: strings.Repeat("n", 129), Steps: graph("a").Steps}, "name", "129 bytes: at most 128"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := commands.PrepareWorkflow(c.req, time.Now())
			var in *commands.InputError
			if !errors.As(err, &in) || in.Field != c.field || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want field %s with %q", err, c.field, c.want)
			}
			if !errors.Is(err, commands.ErrInvalidWorkflow) || !errors.Is(err, commands.ErrInvalidInput) {
				t.Fatalf("%v: want ErrInvalidWorkflow and ErrInvalidInput", err)
			}
			if commands.RegistrySlug(err) != "invalid-workflow" {
				t.Fatalf("slug %q", commands.RegistrySlug(err))
			}
		})
	}
}

// A step's job is checked as a submit, its field named steps[i].<field>;
// the fields a workflow decides are refused in a step.
func TestPrepareWorkflowStepFields(t *testing.T) {
	cases := []struct {
		job   commands.SubmitRequest
		field string
		want  string
	}{
		{commands.SubmitRequest{}, "steps[1].type", "is required"},
		{commands.SubmitRequest{Type: "t", Queue: "a b"}, "steps[1].queue", "want 1-64"},
		{commands.SubmitRequest{Type: "t", Payload: commands.RawJSON(`{`)}, "steps[1].payload", "not valid JSON"},
		{commands.SubmitRequest{Type: "t", Parent: domain.NewID()}, "steps[1].parent", "a step's parent is its workflow"},
		{commands.SubmitRequest{Type: "t", IdempotencyKey: "k"}, "steps[1].idempotency_key", "give the workflow an idempotency_key"},
		{commands.SubmitRequest{Type: "t", Namespace: "other"}, "steps[1].namespace", `a step is in its workflow's namespace ("default")`},
		{commands.SubmitRequest{Type: "t", RetryOf: domain.NewID()}, "steps[1].retry_of", "retried with its workflow"},
		{commands.SubmitRequest{Type: "t", User: "eve"}, "steps[1].user", "runs for its workflow's user"},
	}
	for _, c := range cases {
		r := graph("a")
		r.Steps = append(r.Steps, commands.WorkflowStepRequest{Name: "b", Job: c.job})
		_, err := commands.PrepareWorkflow(r, time.Now())
		var in *commands.InputError
		if !errors.As(err, &in) || in.Field != c.field || !strings.Contains(err.Error(), c.want) || errors.Is(err, commands.ErrInvalidWorkflow) {
			t.Errorf("%+v: got %v, want field %s with %q (not invalid-workflow)", c.job, err, c.field, c.want)
		}
	}
}

func TestPrepareWorkflowResolves(t *testing.T) {
	r := graph("fetch", "parse:fetch", "store:parse,fetch")
	r.Queue, r.Name, r.User = "etl", "nightly", "ada"
	r.Steps[2].Job.Queue = "db"
	r.Steps[1].OnFailure = domain.OnFailureSkip
	w, err := commands.PrepareWorkflow(r, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	g := w.Spec.Workflow
	if w.Spec.Type != domain.WorkflowType || w.Spec.Queue != "etl" || g.Name != "nightly" || g.OnFailure != domain.OnFailureFail {
		t.Fatalf("spec %+v graph %+v", w.Spec, g)
	}
	if fmt.Sprint(g.Steps[2].After) != "[1 0]" || g.Policy(1) != domain.OnFailureSkip || g.Policy(2) != domain.OnFailureFail {
		t.Fatalf("graph %+v", g.Steps)
	}
	if w.Steps[0].Queue != "etl" || w.Steps[2].Queue != "db" || w.Steps[1].User != "ada" || w.Steps[0].MaxRetries != commands.DefaultMaxRetries {
		t.Fatalf("step specs %+v", w.Steps)
	}
	if l := commands.Layers(g); fmt.Sprint(l) != "[[0] [1] [2]]" {
		t.Fatalf("layers %v", l)
	}
}

// out parses outcomes: . open, s succeeded, f failed, c cancelled, k skipped.
func out(s string) []commands.StepOutcome {
	m := map[rune]commands.StepOutcome{'.': commands.StepOpen, 's': commands.StepSucceeded, 'f': commands.StepFailed,
		'c': commands.StepCancelled, 'k': commands.StepSkipped}
	o := make([]commands.StepOutcome, 0, len(s))
	for _, r := range s {
		o = append(o, m[r])
	}
	return o
}

func prepared(t *testing.T, r *commands.WorkflowRequest) *domain.Workflow {
	t.Helper()
	w, err := commands.PrepareWorkflow(r, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return w.Spec.Workflow
}

// The moves of each step: graph a, b:a, c:a, d:b,c, cleanup:d (always).
func TestNextMove(t *testing.T) {
	r := graph("a", "b:a", "c:a", "d:b,c", "cleanup:d")
	r.Steps[4].OnFailure = domain.OnFailureAlways
	fail := prepared(t, r)
	r.OnFailure = domain.OnFailureSkip
	skip := prepared(t, r)
	moves := func(g *domain.Workflow, o []commands.StepOutcome) string {
		failing := commands.Failing(g, o) >= 0
		var b strings.Builder
		for i := range o {
			b.WriteByte("waS"[commands.NextMove(g, o, i, failing)])
		}
		return b.String()
	}
	cases := []struct {
		g    *domain.Workflow
		out  string
		want string // per step: w wait, a admit, S stop
	}{
		{fail, ".....", "wwwww"}, // a is created runnable
		{fail, "s....", "waaww"},
		{fail, "ss...", "wwaww"},
		{fail, "sss..", "wwwaw"},
		{fail, "ssss.", "wwwwa"},
		{fail, "f....", "wSSSw"}, // fail: every open step stops but the clean-up, which waits for d
		{fail, "fkkk.", "wwwwa"}, // ... and runs once d ended
		{skip, "f....", "wSSww"}, // skip: a's dependents stop; d waits for them
		{skip, "fkk..", "wwwSw"},
		{skip, "fkkk.", "wwwwa"},
		{skip, "ssf..", "wwwSw"},
		{fail, "ssc..", "wwwSw"}, // a cancelled step under fail fails the workflow
	}
	for _, c := range cases {
		if got := moves(c.g, out(c.out)); got != c.want {
			t.Errorf("%s (policy %s): moves %s, want %s", c.out, c.g.OnFailure, got, c.want)
		}
	}
}

func TestWorkflowVerdict(t *testing.T) {
	r := graph("a", "b:a", "clean:a")
	r.Steps[2].OnFailure = domain.OnFailureAlways
	g := prepared(t, r)
	plain := prepared(t, graph("a", "b"))
	cases := []struct {
		g    *domain.Workflow
		out  string
		done bool
		bad  int
	}{
		{g, "...", false, -1},
		{g, "ss.", false, -1},
		{g, "sss", true, -1},
		{g, "f..", false, 0}, // fails, but the clean-up is to run
		{g, "fk.", false, 0},
		{g, "fks", true, 0},
		{plain, "f.", true, 0}, // fail at once: nothing to wait for
		{plain, "sf", true, 1},
		{plain, "ks", true, 0},
	}
	for _, c := range cases {
		done, bad := commands.WorkflowVerdict(c.g, out(c.out))
		if done != c.done || bad != c.bad {
			t.Errorf("%s: verdict %v %d, want %v %d", c.out, done, bad, c.done, c.bad)
		}
	}
}

func TestFinishWorkflow(t *testing.T) {
	g := prepared(t, graph("a", "b:a"))
	j := &domain.Job{ID: "W", State: domain.StateWaiting, Spec: domain.Spec{Workflow: g}}
	ev, err := commands.FinishWorkflow(j, out("ss"), domain.FanoutCounts{Succeeded: 2}, "", "me", time.Now())
	if err != nil || ev.Type != domain.EvSucceeded || string(ev.Result) != `{"total":2,"succeeded":2,"failed":0,"cancelled":0,"skipped":0}` {
		t.Fatalf("%v %+v %s", err, ev, ev.Result)
	}
	ev, err = commands.FinishWorkflow(j, out("fk"), domain.FanoutCounts{Failed: 1, Cancelled: 1}, "disk full", "me", time.Now())
	if err != nil || ev.Type != domain.EvFailed || ev.Error.Message != "step a failed: disk full (0 of 2 steps succeeded, 1 failed, 0 cancelled, 1 skipped)" {
		t.Fatalf("%v %+v", err, ev.Error)
	}
	if _, err := commands.FinishWorkflow(j, out("s."), domain.FanoutCounts{}, "", "me", time.Now()); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("undecided: %v", err)
	}
	j.State = domain.StatePending
	if _, err := commands.FinishWorkflow(j, out("ss"), domain.FanoutCounts{}, "", "me", time.Now()); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("pending: %v", err)
	}
}

// A step is admitted from pending for its dependencies only; in a queue
// with limits it is released to the queue's admission instead; a step
// that must not run is skipped from pending, cancelled after.
func TestStepDecisions(t *testing.T) {
	deps := &domain.Hold{Limit: domain.LimitDeps, Steps: []string{"a"}}
	j := &domain.Job{ID: "S", State: domain.StatePending, Hold: deps}
	ev, err := commands.AdmitStep(j, nil, "me", time.Now())
	if err != nil || ev.Type != domain.EvAdmitted || ev.To != domain.StateQueued {
		t.Fatalf("%v %+v", err, ev)
	}
	ev, err = commands.AdmitStep(j, &domain.Hold{Limit: domain.LimitQueue, Max: 2}, "me", time.Now())
	if err != nil || ev.Type != domain.EvPending || ev.To != "" || ev.Hold.Blocks() || ev.Hold.Max != 2 {
		t.Fatalf("%v %+v", err, ev)
	}
	released := &domain.Job{ID: "S", State: domain.StatePending, Hold: ev.Hold}
	if _, err := commands.AdmitStep(released, nil, "me", time.Now()); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("admit of a released step: %v", err)
	}
	if _, err := commands.AdmitStep(&domain.Job{ID: "S", State: domain.StateQueued}, nil, "me", time.Now()); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("admit of a queued step: %v", err)
	}
	ev, err = commands.StopStep(j, "dependency a failed", "me", time.Now())
	if err != nil || ev.To != domain.StateCancelled || ev.Error == nil || ev.Error.Code != domain.CodeSkipped {
		t.Fatalf("%v %+v", err, ev)
	}
	ev, err = commands.StopStep(&domain.Job{ID: "S", State: domain.StateRunning}, "workflow fails", "me", time.Now())
	if err != nil || ev.To != domain.StateCancelled || ev.Error != nil {
		t.Fatalf("%v %+v", err, ev)
	}
	if _, err := commands.StopStep(&domain.Job{ID: "S", State: domain.StateSucceeded}, "x", "me", time.Now()); !errors.Is(err, commands.ErrTerminal) {
		t.Fatalf("stop of an ended step: %v", err)
	}
}

// A resumed run carries over the steps that succeeded, unless one they
// depend on runs again.
func TestResumeWorkflow(t *testing.T) {
	r := graph("a", "b:a", "c:b", "side:a", "clean:b")
	r.Steps[4].OnFailure = domain.OnFailureAlways
	g := prepared(t, r)
	j := &domain.Job{ID: "W", State: domain.StateFailed, Spec: domain.Spec{Namespace: "default", Key: "k", Workflow: g}}
	ids := []string{"A", "B", "C", "S", "CL"}
	w, err := commands.ResumeWorkflow(j, ids, []bool{true, false, false, true, true})
	if err != nil {
		t.Fatal(err)
	}
	var carried []string
	for _, st := range w.Spec.Workflow.Steps {
		carried = append(carried, st.Carried)
	}
	if fmt.Sprint(carried) != "[A   S ]" || w.Spec.RetryOf != "W" || w.Spec.Key != "" {
		t.Fatalf("carried %q, spec %+v", carried, w.Spec)
	}
	if g.Steps[0].Carried != "" {
		t.Fatal("the old graph was changed")
	}
	for _, st := range []domain.State{domain.StateWaiting, domain.StateSucceeded, domain.StatePending} {
		j.State = st
		if _, err := commands.ResumeWorkflow(j, ids, make([]bool, 5)); !errors.Is(err, commands.ErrInvalidTransition) {
			t.Fatalf("resume of a %s workflow: %v", st, err)
		}
	}
}

// A step on the wire is one object, its fields next to its job's, in JSON
// and msgpack alike; a field of neither is refused.
func TestWorkflowStepWire(t *testing.T) {
	body := `{"name":"wf","steps":[{"name":"a","type":"t","payload":{"x":1},"max_retries":2,"timeout":"30s"},` +
		`{"name":"b","type":"t","depends_on":["a"],"on_failure":"skip","queue":"q"}]}`
	var r commands.WorkflowRequest
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatal(err)
	}
	if r.Steps[0].Name != "a" || string(r.Steps[0].Job.Payload) != `{"x":1}` || *r.Steps[0].Job.MaxRetries != 2 ||
		time.Duration(*r.Steps[0].Job.Timeout) != 30*time.Second || fmt.Sprint(r.Steps[1].DependsOn) != "[a]" ||
		r.Steps[1].OnFailure != "skip" || r.Steps[1].Job.Queue != "q" {
		t.Fatalf("decoded %+v", r)
	}
	b, err := json.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var again commands.WorkflowRequest
	if err := json.Unmarshal(b, &again); err != nil {
		t.Fatal(err)
	}
	if b2, _ := json.Marshal(&again); string(b2) != string(b) {
		t.Fatalf("JSON round trip:\n%s\n%s", b2, b)
	}
	mp, err := msgpack.Marshal(&r)
	if err != nil {
		t.Fatal(err)
	}
	var fromMP commands.WorkflowRequest
	if err := msgpack.Unmarshal(mp, &fromMP); err != nil {
		t.Fatal(err)
	}
	if b3, _ := json.Marshal(&fromMP); string(b3) != string(b) {
		t.Fatalf("msgpack round trip:\n%s\n%s", b3, b)
	}
	for _, bad := range []string{
		`{"steps":[{"name":"a","type":"t","colour":"red"}]}`,
		`{"steps":[{"name":"a","type":"t","depends_on":"b"}]}`,
		`{"steps":[null]}`,
		`{"steps":[{"name":"a","type":"t","max_retries":"x"}]}`,
	} {
		var r commands.WorkflowRequest
		if err := json.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}

// FuzzWorkflowRequest: a workflow that decodes (JSON, or msgpack as a
// command) is checked without a panic: refused as invalid input, or
// prepared with one spec per step, acyclic, every dependency a step.
func FuzzWorkflowRequest(f *testing.F) {
	for _, s := range []string{`{"steps":[{"name":"a","type":"x"},{"name":"b","type":"x","depends_on":["a"]}]}`,
		`{"steps":[{"name":"a","type":"x","depends_on":["b"]},{"name":"b","type":"x","depends_on":["a"]}]}`,
		`{"on_failure":"skip","steps":[{"name":"a","type":"x","on_failure":"always","max_retries":2}]}`,
		`{"steps":[{"name":"a","type":"x","depends_on":["a","a"]}]}`, `{"steps":[null]}`, `{"steps":[{"bogus":1}]}`} {
		f.Add([]byte(s), false)
		var v any
		_ = json.Unmarshal([]byte(s), &v)
		b, _ := msgpack.Marshal(v)
		f.Add(b, true)
	}
	f.Fuzz(func(t *testing.T, data []byte, asMsgpack bool) {
		var r commands.WorkflowRequest
		var err error
		if asMsgpack {
			err = msgpack.Unmarshal(data, &r)
		} else {
			err = json.Unmarshal(data, &r)
		}
		if err != nil {
			return
		}
		w, err := commands.PrepareWorkflow(&r, time.Now())
		if err != nil {
			if !errors.Is(err, commands.ErrInvalidInput) {
				t.Fatalf("refused with %v, not invalid input", err)
			}
			return
		}
		if len(w.Steps) != len(r.Steps) || len(w.Spec.Workflow.Steps) != len(r.Steps) || commands.FindCycle(w.Spec.Workflow) != nil {
			t.Fatalf("prepared %d specs, %d graph steps of %d", len(w.Steps), len(w.Spec.Workflow.Steps), len(r.Steps))
		}
		for _, st := range w.Spec.Workflow.Steps {
			for _, d := range st.After {
				if d < 0 || d >= len(r.Steps) {
					t.Fatalf("dependency %d of %d steps", d, len(r.Steps))
				}
			}
		}
	})
}
