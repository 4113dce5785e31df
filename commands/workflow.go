package commands

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jetflow/jetflow/internal/domain"
)

// Workflows: the rules of a graph of steps (docs/workflows.md). A
// workflow is checked whole before anything is written (PrepareWorkflow);
// its job and its steps are created from what that returns; a step's
// dependencies decide when it is admitted or skipped (NextMove) and the
// steps' outcomes when the workflow ends (WorkflowVerdict).

// Limits of a workflow.
const (
	MaxWorkflowSteps = 10_000  // steps of one workflow
	MaxWorkflowEdges = 100_000 // depends_on entries of all its steps
	MaxStepDeps      = 1_000   // depends_on entries of one step
	maxStepNameLen   = 64
	maxWorkflowName  = 128
	// MaxWorkflowBytes bounds a workflow as submitted (an HTTP body, a
	// command); its job.submitted must also fit the event log's largest
	// message.
	MaxWorkflowBytes = 4 << 20
)

// ErrInvalidWorkflow: a workflow's graph is refused (a cycle, a step
// named twice or not at all, a dependency on no step, a limit passed, a
// policy that is none). It matches ErrInvalidInput; problem type
// invalid-workflow.
var ErrInvalidWorkflow = &registryError{slug: "invalid-workflow", base: ErrInvalidInput}

// workflowErr is an invalid-workflow refusal of field.
func workflowErr(field, format string, args ...any) error {
	return &InputError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidWorkflow}
}

// WorkflowRequest is a workflow to submit, as it arrives from the SDK, the
// CLI, the HTTP API or a command: its steps, each a job with the steps it
// depends on.
type WorkflowRequest struct {
	Namespace      string `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Name           string `json:"name,omitempty" msgpack:"name,omitempty"`
	IdempotencyKey string `json:"idempotency_key,omitempty" msgpack:"idempotency_key,omitempty"`
	// OnFailure is the steps' default policy: fail (default), skip or
	// always.
	OnFailure string `json:"on_failure,omitempty" msgpack:"on_failure,omitempty"`
	// Queue is the workflow job's queue and the default of its steps'.
	Queue string   `json:"queue,omitempty" msgpack:"queue,omitempty"`
	Tags  []string `json:"tags,omitempty" msgpack:"tags,omitempty"`
	// User is who the workflow and its steps run for (quotas).
	User  string                `json:"user,omitempty" msgpack:"user,omitempty"`
	Steps []WorkflowStepRequest `json:"steps" msgpack:"steps"`

	// RetryOf is set by the engine for a resumed run.
	RetryOf string `json:"-" msgpack:"-"`
}

// WorkflowStepRequest is one step: a name, the steps it depends on, its
// failure policy, and its job (every field of a submit, but namespace,
// parent, retry_of and idempotency_key, which the workflow decides).
type WorkflowStepRequest struct {
	Name      string
	DependsOn []string
	OnFailure string
	Job       SubmitRequest
}

// PreparedWorkflow is a workflow checked and resolved: its job's spec
// (with the graph), and each step's spec, defaults filled in.
type PreparedWorkflow struct {
	Spec  domain.Spec
	Steps []domain.Spec
}

// checkPolicy refuses a failure policy that is none.
func checkPolicy(field, p string) error {
	switch p {
	case "", domain.OnFailureFail, domain.OnFailureSkip, domain.OnFailureAlways:
		return nil
	}
	return &InputError{Field: field, Value: fmt.Sprintf("%q", p), Reason: "want fail, skip or always", Err: ErrInvalidWorkflow}
}

// validStepName reports whether s can name a step: 1-64 of [A-Za-z0-9_-].
func validStepName(s string) bool { return s != "" && len(s) <= maxStepNameLen && domain.IsPlain(s) }

// PrepareWorkflow checks a workflow whole, writing nothing: the graph
// (names, dependencies, cycles, limits, policies; an *InputError matching
// ErrInvalidWorkflow names the steps) and each step's job as a submit
// would (Spec: an *InputError whose field is steps[i].<field>). Step i's
// queue defaults to the workflow's.
func PrepareWorkflow(r *WorkflowRequest, now time.Time) (*PreparedWorkflow, error) {
	if err := checkWorkflowName(r.Name); err != nil {
		return nil, err
	}
	if err := checkPolicy("on_failure", r.OnFailure); err != nil {
		return nil, err
	}
	n := len(r.Steps)
	if n == 0 {
		return nil, workflowErr("steps", "a workflow has at least one step")
	}
	if n > MaxWorkflowSteps {
		return nil, workflowErr("steps", "%d steps: at most %d", n, MaxWorkflowSteps)
	}
	index := make(map[string]int, n)
	for i, st := range r.Steps {
		field := fmt.Sprintf("steps[%d].name", i)
		if !validStepName(st.Name) {
			if st.Name == "" {
				return nil, workflowErr(field, "is required")
			}
			return nil, &InputError{Field: field, Value: fmt.Sprintf("%q", st.Name), Reason: "want 1-64 of [A-Za-z0-9_-]", Err: ErrInvalidWorkflow}
		}
		if k, dup := index[st.Name]; dup {
			return nil, workflowErr(field, "step %q is named twice (steps[%d] and steps[%d])", st.Name, k, i)
		}
		index[st.Name] = i
	}
	g := domain.Workflow{Name: r.Name, OnFailure: r.OnFailure, Steps: make([]domain.WorkflowStep, n)}
	if g.OnFailure == "" {
		g.OnFailure = domain.OnFailureFail
	}
	edges := 0
	for i, st := range r.Steps {
		if err := checkPolicy(fmt.Sprintf("steps[%d].on_failure", i), st.OnFailure); err != nil {
			return nil, err
		}
		field := fmt.Sprintf("steps[%d].depends_on", i)
		if len(st.DependsOn) > MaxStepDeps {
			return nil, workflowErr(field, "step %q depends on %d steps: at most %d", st.Name, len(st.DependsOn), MaxStepDeps)
		}
		edges += len(st.DependsOn)
		if edges > MaxWorkflowEdges {
			return nil, workflowErr("steps", "more than %d dependencies in all", MaxWorkflowEdges)
		}
		after := make([]int, 0, len(st.DependsOn))
		seen := make(map[int]bool, len(st.DependsOn))
		for _, d := range st.DependsOn {
			k, ok := index[d]
			switch {
			case !ok:
				return nil, workflowErr(field, "step %q depends on %q, which is not a step of the workflow", st.Name, d)
			case k == i:
				return nil, workflowErr(field, "step %q depends on itself", st.Name)
			case seen[k]:
				return nil, workflowErr(field, "step %q depends on %q twice", st.Name, d)
			}
			seen[k] = true
			after = append(after, k)
		}
		g.Steps[i] = domain.WorkflowStep{Name: st.Name, After: after, OnFailure: st.OnFailure}
	}
	if cycle := findCycle(&g); cycle != nil {
		names := make([]string, len(cycle))
		for k, i := range cycle {
			names[k] = g.Steps[i].Name
		}
		return nil, workflowErr("steps", "cycle %s -> %s", strings.Join(names, " -> "), names[0])
	}
	wreq := SubmitRequest{Namespace: r.Namespace, Type: domain.WorkflowType, Queue: r.Queue,
		IdempotencyKey: r.IdempotencyKey, Tags: r.Tags, User: r.User, RetryOf: r.RetryOf}
	spec, err := wreq.Spec(now)
	if err != nil {
		return nil, err
	}
	spec.Workflow = &g
	out := &PreparedWorkflow{Spec: spec, Steps: make([]domain.Spec, n)}
	for i := range r.Steps {
		s, err := stepSpec(&r.Steps[i].Job, spec, now)
		if err != nil {
			return nil, StepError(i, err)
		}
		out.Steps[i] = s
	}
	return out, nil
}

// stepSpec resolves a step's job in workflow wf (Spec): the workflow's
// namespace and user, its queue unless the step names one.
func stepSpec(req *SubmitRequest, wf domain.Spec, now time.Time) (domain.Spec, error) {
	switch {
	case req.Namespace != "" && req.Namespace != wf.Namespace:
		return domain.Spec{}, valueErr("namespace", req.Namespace, "a step is in its workflow's namespace (%q)", wf.Namespace)
	case req.Parent != "":
		return domain.Spec{}, inputErr("parent", "a step's parent is its workflow")
	case req.RetryOf != "":
		return domain.Spec{}, inputErr("retry_of", "a step is retried with its workflow (POST /workflows/{id}/retry)")
	case req.IdempotencyKey != "":
		return domain.Spec{}, inputErr("idempotency_key", "a step's id comes from its workflow's: give the workflow an idempotency_key")
	case req.UniqueKey != "" || len(req.UniqueFields) > 0 || req.UniqueFor != nil || req.UniqueWhile != "":
		return domain.Spec{}, inputErr("unique_key", "a step's id comes from its workflow's: a step is not unique on its own")
	case len(req.Uploads) > 0 || len(req.Files) > 0:
		return domain.Spec{}, inputErr("files", "a step takes no input files")
	case req.User != "" && req.User != wf.User:
		return domain.Spec{}, valueErr("user", req.User, "a step runs for its workflow's user (%q)", wf.User)
	}
	r := *req
	r.Namespace, r.User = wf.Namespace, wf.User
	if r.Queue == "" {
		r.Queue = wf.Queue
	}
	return r.Spec(now)
}

// StepError names step i in an error about its job: an *InputError's field
// becomes steps[i].<field>; any other refusal says which step.
func StepError(i int, err error) error {
	prefix := fmt.Sprintf("steps[%d]", i)
	var in *InputError
	if errors.As(err, &in) {
		named := *in
		named.Field = prefix + "." + in.Field
		if in.Field == "" {
			named.Field = prefix
		}
		return &named
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// checkWorkflowName refuses a workflow name of more than maxWorkflowName
// bytes, or not valid UTF-8, or with control characters.
func checkWorkflowName(name string) error {
	switch {
	case len(name) > maxWorkflowName:
		return workflowErr("name", "%d bytes: at most %d", len(name), maxWorkflowName)
	case !utf8.ValidString(name):
		return workflowErr("name", "not valid UTF-8")
	case strings.ContainsFunc(name, unicode.IsControl):
		return workflowErr("name", "control characters")
	}
	return nil
}

// findCycle returns the steps of a cycle of the graph, in order (each
// depends on the next, the last on the first), or nil if it has none.
func findCycle(g *domain.Workflow) []int {
	n := len(g.Steps)
	// Kahn's algorithm removes every step not on a cycle or behind one.
	indeg := make([]int, n) // dependencies not yet removed
	dependents := Dependents(g)
	for i, st := range g.Steps {
		indeg[i] = len(st.After)
	}
	queue := make([]int, 0, n)
	for i := range indeg {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	removed := 0
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		removed++
		for _, d := range dependents[i] {
			if indeg[d]--; indeg[d] == 0 {
				queue = append(queue, d)
			}
		}
	}
	if removed == n {
		return nil
	}
	// Every step left depends on one that is left: walk dependencies from
	// the first one left until a step repeats.
	start := -1
	for i := range indeg {
		if indeg[i] > 0 {
			start = i
			break
		}
	}
	pos := map[int]int{}
	var path []int
	for i := start; ; {
		if k, ok := pos[i]; ok {
			// path goes from a step to its dependency; a cycle is named
			// in the order its steps would run, from its first step.
			return rotateMin(reverse(path[k:]))
		}
		pos[i] = len(path)
		path = append(path, i)
		next := -1
		for _, d := range g.Steps[i].After {
			if indeg[d] > 0 {
				next = d
				break
			}
		}
		i = next
	}
}

func reverse(s []int) []int {
	out := make([]int, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

func rotateMin(s []int) []int {
	m := 0
	for i, v := range s {
		if v < s[m] {
			m = i
		}
	}
	return append(append([]int(nil), s[m:]...), s[:m]...)
}

// Dependents lists, for each step, the steps that depend on it.
func Dependents(g *domain.Workflow) [][]int {
	out := make([][]int, len(g.Steps))
	for i, st := range g.Steps {
		for _, d := range st.After {
			out[d] = append(out[d], i)
		}
	}
	return out
}

// Layers are the steps by depth (a step is one layer below its deepest
// dependency): how the dashboard and `workflow get` lay a graph out.
func Layers(g *domain.Workflow) [][]int {
	depth := make([]int, len(g.Steps))
	order := topoOrder(g)
	maxDepth := 0
	for _, i := range order {
		for _, d := range g.Steps[i].After {
			depth[i] = max(depth[i], depth[d]+1)
		}
		maxDepth = max(maxDepth, depth[i])
	}
	out := make([][]int, maxDepth+1)
	for _, i := range order {
		out[depth[i]] = append(out[depth[i]], i)
	}
	for _, l := range out {
		sort.Ints(l)
	}
	return out
}

// topoOrder is an order of an acyclic graph's steps in which every step
// comes after its dependencies.
func topoOrder(g *domain.Workflow) []int {
	n := len(g.Steps)
	indeg := make([]int, n)
	dependents := Dependents(g)
	var queue []int
	for i, st := range g.Steps {
		indeg[i] = len(st.After)
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	out := make([]int, 0, n)
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		out = append(out, i)
		for _, d := range dependents[i] {
			if indeg[d]--; indeg[d] == 0 {
				queue = append(queue, d)
			}
		}
	}
	return out
}

// --- the events of a workflow and its steps ---

// SubmitWorkflow decides the first event of a workflow's job with the
// given id: pending while its steps are created (a hold no queue admits),
// its graph in its spec, its steps' specs on the event, its plan (its
// steps are its pieces).
func SubmitWorkflow(id string, w *PreparedWorkflow, now time.Time) (*domain.Event, error) {
	ev, err := Submit(id, w.Spec, true, now)
	if err != nil {
		return nil, err
	}
	if ev.To != domain.StatePending {
		// A workflow is not scheduled: run_at is its steps'.
		return nil, inputErr("run_at", "a workflow starts at once; give its steps a run_at")
	}
	ev.Steps = w.Steps
	ev.Plan = &domain.FanoutPlan{Kind: domain.FanoutWorkflow, Total: len(w.Steps), Policy: w.Spec.Workflow.OnFailure}
	ev.Hold = &domain.Hold{Limit: domain.LimitSteps, Max: len(w.Steps), Since: now}
	ev.Message = fmt.Sprintf("workflow of %d steps", len(w.Steps))
	if w.Spec.Workflow.Name != "" {
		ev.Message = fmt.Sprintf("workflow %s of %d steps", w.Spec.Workflow.Name, len(w.Steps))
	}
	return ev, nil
}

// SubmitStep decides the first event of step i of a workflow: pending
// with a hold naming the steps it waits for while it has a dependency
// that did not run yet (one carried over from a resumed run does not
// count), else as any submit (limited: its queue has limits).
func SubmitStep(id string, g *domain.Workflow, i int, spec domain.Spec, limited bool, now time.Time) (*domain.Event, error) {
	if !g.Held(i) {
		return Submit(id, spec, limited, now)
	}
	if err := Check(id, domain.StateNew, domain.StatePending, domain.EvSubmitted); err != nil {
		return nil, err
	}
	var waits []string
	for _, d := range g.Steps[i].After {
		if g.Steps[d].Carried == "" {
			waits = append(waits, g.Steps[d].Name)
		}
	}
	sp := spec
	return &domain.Event{
		Type: domain.EvSubmitted, JobID: id, Time: now, From: domain.StateNew, To: domain.StatePending,
		Level: domain.LevelInfo, Spec: &sp, RunAt: spec.RunAt,
		Hold:    &domain.Hold{Limit: domain.LimitDeps, Max: len(waits), Since: now, Steps: waits},
		Message: "waits for " + strings.Join(waits, ", "),
	}, nil
}

// StartWorkflow records that every step of a pending workflow exists: it
// waits for them (pending -> waiting).
func StartWorkflow(j *domain.Job, actor string, now time.Time) (*domain.Event, error) {
	if j.Spec.Workflow == nil {
		return nil, fmt.Errorf("job %s is not a workflow: %w", j.ID, ErrInvalidTransition)
	}
	ev, err := event(j, domain.EvWaiting, domain.StateWaiting, actor, now)
	if err != nil {
		return nil, err
	}
	ev.Message = fmt.Sprintf("waiting for %d steps", len(j.Spec.Workflow.Steps))
	return ev, nil
}

// AdmitStep lets a pending step whose dependencies allow it run: admitted
// (pending -> queued, or scheduled if its run_at is to come), or, in a
// queue with limits (held: the hold that names its queue's limit),
// released to its queue's admission, which admits it when a slot is free.
// A step that is not held for its dependencies is refused.
func AdmitStep(j *domain.Job, held *domain.Hold, actor string, now time.Time) (*domain.Event, error) {
	if j.State != domain.StatePending || j.Hold == nil || j.Hold.Limit != domain.LimitDeps {
		return nil, &TransitionError{JobID: j.ID, Event: domain.EvAdmitted, From: j.State, To: domain.StateQueued}
	}
	if held == nil {
		ev, err := Admit(j, domain.QueueLimits{}, actor, now) // a queue without limits
		if err == nil {
			ev.Message = "its dependencies succeeded"
		}
		return ev, err
	}
	ev, err := event(j, domain.EvPending, "", actor, now)
	if err != nil {
		return nil, err
	}
	h := *held
	h.Since = now
	ev.Hold = &h
	ev.Message = "its dependencies succeeded; " + HoldMessage(j.Spec.Queue, j.Spec.User, h)
	return ev, nil
}

// StopStep ends a step that must not run or go on: a pending one is
// skipped (cancelled with code SKIPPED), any other that has not ended is
// cancelled. A terminal step is refused (ErrTerminal).
func StopStep(j *domain.Job, reason, actor string, now time.Time) (*domain.Event, error) {
	ev, err := Cancel(j, reason, actor, now)
	if err != nil {
		return nil, err
	}
	if j.State == domain.StatePending {
		ev.Error = &domain.JobError{Code: domain.CodeSkipped, Message: "skipped: " + reason}
	}
	return ev, nil
}

// StepOutcome is how a step ended, as the workflow counter knows it.
type StepOutcome uint8

// Outcomes of a step.
const (
	StepOpen StepOutcome = iota // not ended (or not known to have)
	StepSucceeded
	StepFailed
	StepCancelled
	StepSkipped
)

// ended reports whether the step ended.
func (o StepOutcome) ended() bool { return o != StepOpen }

// Bad reports whether the step ended without succeeding.
func (o StepOutcome) Bad() bool { return o.ended() && o != StepSucceeded }

func (o StepOutcome) String() string {
	return [...]string{"open", "succeeded", "failed", "cancelled", "skipped"}[o]
}

// OutcomeOf is the outcome a piece event (or a terminal step's state and
// error code) says.
func OutcomeOf(state domain.State, code string) StepOutcome {
	switch state {
	case domain.StateSucceeded:
		return StepSucceeded
	case domain.StateFailed:
		return StepFailed
	case domain.StateCancelled:
		if code == domain.CodeSkipped {
			return StepSkipped
		}
		return StepCancelled
	}
	return StepOpen
}

// Failing is the first step (in graph order) whose failure under policy
// fail ends the workflow's run: it failed or was cancelled; -1 if none.
func Failing(g *domain.Workflow, out []StepOutcome) int {
	for i, o := range out {
		if (o == StepFailed || o == StepCancelled) && g.Policy(i) == domain.OnFailureFail {
			return i
		}
	}
	return -1
}

// stepMove is what an open step's dependencies call for.
type stepMove uint8

// Moves of an open step.
const (
	stepWait  stepMove = iota // its dependencies have not decided yet
	StepAdmit                 // they allow it: admit it (a held step)
	StepStop                  // they never will: skip it (or cancel it, if it runs)
)

// NextMove says what open step i's dependencies call for, failing being
// whether the workflow fails (Failing >= 0): an "always" step is admitted
// once every dependency ended, however; any other is stopped when the
// workflow fails or a dependency ended without succeeding, and admitted
// once every one succeeded. A step that was created runnable (not held)
// is never admitted here, only stopped.
func NextMove(g *domain.Workflow, out []StepOutcome, i int, failing bool) stepMove {
	if out[i].ended() {
		return stepWait
	}
	if g.Policy(i) == domain.OnFailureAlways {
		for _, d := range g.Steps[i].After {
			if !out[d].ended() {
				return stepWait
			}
		}
		if !g.Held(i) {
			return stepWait
		}
		return StepAdmit
	}
	if failing {
		return StepStop
	}
	all := true
	for _, d := range g.Steps[i].After {
		switch {
		case out[d].Bad():
			return StepStop
		case !out[d].ended():
			all = false
		}
	}
	if !all || !g.Held(i) {
		return stepWait
	}
	return StepAdmit
}

// WorkflowVerdict says whether a workflow's steps decide it, and how:
// once every step ended, succeeded if every one did; when a step's
// failure under policy fail makes it fail, at once, unless an "always"
// step is still to run (it ends once those ended). failed is the step
// the failure is about (-1 if none).
func WorkflowVerdict(g *domain.Workflow, out []StepOutcome) (done bool, failedStep int) {
	if f := Failing(g, out); f >= 0 {
		for i, o := range out {
			if !o.ended() && g.Policy(i) == domain.OnFailureAlways {
				return false, f
			}
		}
		return true, f
	}
	firstBad, firstSkipped := -1, -1
	for i, o := range out {
		switch {
		case !o.ended():
			return false, -1
		case o == StepSkipped:
			if firstSkipped < 0 {
				firstSkipped = i
			}
		case o.Bad() && firstBad < 0:
			firstBad = i
		}
	}
	if firstBad < 0 {
		firstBad = firstSkipped
	}
	return true, firstBad
}

// jsonSummary is a summary as a job's result.
func jsonSummary(s WorkflowSummary) []byte {
	b, _ := json.Marshal(s)
	return b
}

// WorkflowSummary is a workflow's result: how its steps ended.
type WorkflowSummary struct {
	Total     int            `json:"total"`
	Succeeded int            `json:"succeeded"`
	Failed    int            `json:"failed"`
	Cancelled int            `json:"cancelled"`
	Skipped   int            `json:"skipped"`
	Carried   int            `json:"carried,omitempty"` // succeeded in the run this one resumed
	Steps     map[string]int `json:"-"`
}

// summarizeSteps counts the outcomes.
func summarizeSteps(g *domain.Workflow, out []StepOutcome) WorkflowSummary {
	s := WorkflowSummary{Total: len(out)}
	for i, o := range out {
		switch o {
		case StepSucceeded:
			s.Succeeded++
			if g.Steps[i].Carried != "" {
				s.Carried++
			}
		case StepFailed:
			s.Failed++
		case StepCancelled:
			s.Cancelled++
		case StepSkipped:
			s.Skipped++
		}
	}
	return s
}

// FinishWorkflow decides a waiting workflow's outcome once its steps
// decide it (WorkflowVerdict): job.succeeded with the summary as result,
// or job.failed naming the step that failed it (errMsg: that step's
// error, if known). c is its counts as of the steps' outcomes.
func FinishWorkflow(j *domain.Job, out []StepOutcome, c domain.FanoutCounts, errMsg, actor string, now time.Time) (*domain.Event, error) {
	if j.State != domain.StateWaiting {
		return nil, &TransitionError{JobID: j.ID, Event: domain.EvSucceeded, From: j.State, To: domain.StateSucceeded}
	}
	g := j.Spec.Workflow
	if g == nil || len(out) != len(g.Steps) {
		return nil, fmt.Errorf("job %s is not a workflow of %d steps: %w", j.ID, len(out), ErrInvalidTransition)
	}
	done, bad := WorkflowVerdict(g, out)
	if !done {
		return nil, fmt.Errorf("workflow %s: not decided by its steps yet: %w", j.ID, ErrInvalidTransition)
	}
	sum := summarizeSteps(g, out)
	body := jsonSummary(sum)
	if bad < 0 {
		ev, err := Succeed(j, body, actor, now)
		if err == nil {
			ev.Counts = &c
			ev.Message = fmt.Sprintf("%d steps succeeded", sum.Succeeded)
		}
		return ev, err
	}
	ev, err := event(j, domain.EvFailed, domain.StateFailed, actor, now)
	if err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("step %s %s", g.Steps[bad].Name, out[bad])
	if errMsg != "" {
		msg += ": " + errMsg
	}
	msg += fmt.Sprintf(" (%d of %d steps succeeded, %d failed, %d cancelled, %d skipped)",
		sum.Succeeded, sum.Total, sum.Failed, sum.Cancelled, sum.Skipped)
	ev.Level = domain.LevelError
	ev.Error = &domain.JobError{Code: "WORKFLOW_FAILED", Message: msg}
	ev.Message = msg
	ev.Result = body
	ev.Counts = &c
	return ev, nil
}

// ResumeWorkflow is the run that resumes workflow j, which ended without
// succeeding: its graph, with each step that succeeded (succeeded[i], its
// job ids[i]) carried over unless it depends on a step that runs again;
// the others run again. Its steps' specs are the old run's (the caller
// sets Steps from its first event). A workflow that has not ended, or
// succeeded, is refused.
func ResumeWorkflow(j *domain.Job, ids []string, succeeded []bool) (*PreparedWorkflow, error) {
	if j.Spec.Workflow == nil {
		return nil, fmt.Errorf("job %s is not a workflow: %w", j.ID, ErrNotFound)
	}
	if !j.State.Terminal() || j.State == domain.StateSucceeded {
		return nil, fmt.Errorf("resume workflow %s: it is %s; only a failed or cancelled workflow is resumed: %w",
			j.ID, j.State, &TransitionError{JobID: j.ID, Event: "resume", From: j.State, To: domain.StatePending})
	}
	old := j.Spec.Workflow
	g := domain.Workflow{Name: old.Name, OnFailure: old.OnFailure, Steps: make([]domain.WorkflowStep, len(old.Steps))}
	again := make([]bool, len(old.Steps))
	for _, i := range topoOrder(old) {
		again[i] = !succeeded[i]
		for _, d := range old.Steps[i].After {
			again[i] = again[i] || again[d]
		}
	}
	for i, st := range old.Steps {
		g.Steps[i] = domain.WorkflowStep{Name: st.Name, After: append([]int(nil), st.After...), OnFailure: st.OnFailure}
		if !again[i] {
			g.Steps[i].Carried = ids[i]
		}
	}
	spec := j.Spec
	spec.Workflow = &g
	spec.RetryOf = j.ID
	spec.Key = ""
	spec.Tags = append([]string(nil), j.Spec.Tags...)
	return &PreparedWorkflow{Spec: spec}, nil
}

// MakingSteps reports whether a workflow in state s still has its steps
// made (pending: its job.submitted is written, its job.waiting is not).
func MakingSteps(s domain.State) bool { return s == domain.StatePending }

// EndedSucceeded reports whether a job in state s succeeded (a step whose
// dependents may run, or that a resumed run carries over).
func EndedSucceeded(s domain.State) bool { return s == domain.StateSucceeded }

// EndedFailed reports whether a job in state s failed.
func EndedFailed(s domain.State) bool { return s == domain.StateFailed }
