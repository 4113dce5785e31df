package jetflow

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// Workflows: a graph of steps submitted as one (docs/workflows.md). Each
// step is a job of its own; a step runs once the steps it depends on
// succeeded, and sees their results by name (Job.Output).
//
//	wf := jetflow.NewWorkflow("nightly")
//	fetch := wf.Step("fetch", "etl.fetch", src)
//	parse := wf.Step("parse", "etl.parse", nil).After(fetch)
//	wf.Step("report", "etl.report", nil).After(parse)
//	res, err := client.SubmitWorkflow(ctx, wf)

// FailurePolicy is what a step's failure does to its workflow.
type FailurePolicy string

// Failure policies, for a workflow (its steps' default) and a step.
const (
	// FailWorkflow (the default): the workflow fails at once; its steps
	// that did not end are cancelled, but for RunAlways ones, which still
	// run.
	FailWorkflow FailurePolicy = domain.OnFailureFail
	// SkipDependents: the steps that depend on the failed one are skipped;
	// the others go on.
	SkipDependents FailurePolicy = domain.OnFailureSkip
	// RunAlways: the step runs once its dependencies ended, however they
	// ended (a clean-up); its own failure skips its dependents.
	RunAlways FailurePolicy = domain.OnFailureAlways
)

// Limits of a workflow.
const (
	MaxWorkflowSteps = commands.MaxWorkflowSteps
	MaxWorkflowEdges = commands.MaxWorkflowEdges
	MaxStepDeps      = commands.MaxStepDeps
)

// Workflow is a graph of steps to submit as one (Client.SubmitWorkflow).
// Its fields are the workflow's own; its steps are added with Step, Chain
// and Group.
type Workflow struct {
	Name           string
	Namespace      string // "": default
	Queue          string // its job's queue, and its steps' unless they name one
	IdempotencyKey string // a repeat returns the same workflow and steps
	OnFailure      FailurePolicy
	Tags           []string
	User           string

	steps  []*Step
	parsed []commands.WorkflowStepRequest // steps read by ParseWorkflow, before those added
	err    error
}

// NewWorkflow returns an empty workflow named name.
func NewWorkflow(name string) *Workflow { return &Workflow{Name: name} }

// Step is one step of a workflow: a job, the steps it depends on, its
// failure policy.
type Step struct {
	name      string
	req       *SubmitRequest
	after     []string
	onFailure FailurePolicy
}

// Name is the step's name.
func (s *Step) Name() string { return s.name }

// Step adds a step named name (1-64 of [A-Za-z0-9_-], unique in the
// workflow) that runs a job of jobType with payload and the options of a
// submit (Queue, MaxRetries, Timeout, ...; not Namespace, Parent or
// IdempotencyKey, which the workflow decides).
func (w *Workflow) Step(name, jobType string, payload any, opts ...SubmitOption) *Step {
	raw, err := marshalPayload(payload)
	if err != nil && w.err == nil {
		w.err = fmt.Errorf("step %s: %w", name, publicErr(err))
	}
	req := &SubmitRequest{Type: jobType, Payload: raw}
	for _, o := range opts {
		o(req)
	}
	s := &Step{name: name, req: req}
	w.steps = append(w.steps, s)
	return s
}

// After makes s depend on deps: it runs once they succeeded (for a
// RunAlways step, once they ended) and sees their results. It returns s.
func (s *Step) After(deps ...*Step) *Step {
	for _, d := range deps {
		s.after = append(s.after, d.name)
	}
	return s
}

// OnFailure sets the step's failure policy (the workflow's by default). It
// returns s.
func (s *Step) OnFailure(p FailurePolicy) *Step {
	s.onFailure = p
	return s
}

// Chain makes each step depend on the one before it (a sequence) and
// returns the last.
func (w *Workflow) Chain(steps ...*Step) *Step {
	for i := 1; i < len(steps); i++ {
		steps[i].After(steps[i-1])
	}
	if len(steps) == 0 {
		return nil
	}
	return steps[len(steps)-1]
}

// Group is a set of steps that run side by side; Then adds a step after
// all of them.
type Group []*Step

// Group returns steps as a Group.
func (w *Workflow) Group(steps ...*Step) Group { return Group(steps) }

// Then makes s depend on every step of the group and returns s.
func (g Group) Then(s *Step) *Step { return s.After(g...) }

// Steps are the steps added with Step, in the order added (not those
// ParseWorkflow read).
func (w *Workflow) Steps() []*Step { return w.steps }

// request is the workflow as the engine takes it.
func (w *Workflow) request() (*commands.WorkflowRequest, error) {
	if w.err != nil {
		return nil, w.err
	}
	r := &commands.WorkflowRequest{Namespace: w.Namespace, Name: w.Name, IdempotencyKey: w.IdempotencyKey,
		OnFailure: string(w.OnFailure), Queue: w.Queue, Tags: w.Tags, User: w.User,
		Steps: make([]commands.WorkflowStepRequest, len(w.parsed), len(w.parsed)+len(w.steps))}
	copy(r.Steps, w.parsed)
	for _, s := range w.steps {
		i := len(r.Steps)
		if len(s.req.Uploads) > 0 {
			return nil, publicErr(commands.StepError(i, &commands.InputError{Field: "files", Reason: "a step takes no input files"}))
		}
		r.Steps = append(r.Steps, commands.WorkflowStepRequest{Name: s.name, DependsOn: s.after, OnFailure: string(s.onFailure), Job: *s.req.command()})
	}
	return r, nil
}

// Validate checks the workflow as a submit would, without sending it: the
// graph (an *InputError matching ErrInvalidWorkflow names the steps of a
// cycle, a name used twice, a dependency on no step) and each step's
// options (an *InputError whose field is steps[i].<field>). Types and
// schemas are checked by the engine.
func (w *Workflow) Validate() error {
	r, err := w.request()
	if err != nil {
		return err
	}
	_, err = commands.PrepareWorkflow(r, time.Now())
	return publicErr(err)
}

// ParseWorkflow reads a workflow in its JSON format (docs/workflows.md,
// the body of POST /api/v1/workflows): a field that is none is refused,
// as is trailing data or more than 4 MiB. The graph and the steps are
// checked by Validate and when it is submitted.
func ParseWorkflow(data []byte) (*Workflow, error) {
	if len(data) > commands.MaxWorkflowBytes {
		return nil, fmt.Errorf("workflow: %d bytes: at most %d", len(data), commands.MaxWorkflowBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var r commands.WorkflowRequest
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("workflow: %w", err)
	}
	if err := dec.Decode(&struct{}{}); err != io.EOF {
		return nil, errors.New("workflow: data after the workflow's object")
	}
	return &Workflow{Name: r.Name, Namespace: r.Namespace, Queue: r.Queue, IdempotencyKey: r.IdempotencyKey,
		OnFailure: FailurePolicy(r.OnFailure), Tags: r.Tags, User: r.User, parsed: r.Steps}, nil
}

// ErrInvalidWorkflow matches (errors.Is) a workflow refused for its graph:
// problem type invalid-workflow.
var ErrInvalidWorkflow = commands.ErrInvalidWorkflow

// SubmittedWorkflow is a workflow as its submit (or resume) left it: its
// id, whether it was created (false: its idempotency key named an
// existing one), its steps' job ids by name, and its job.
type SubmittedWorkflow struct {
	ID      string            `json:"id"`
	Name    string            `json:"name,omitempty"`
	State   State             `json:"state"`
	RetryOf string            `json:"retry_of,omitempty"`
	Created bool              `json:"created"`
	Steps   map[string]string `json:"steps"`
	Job     *JobInfo          `json:"job"`
}

// WorkflowInfo is a workflow with each step's state.
type WorkflowInfo struct {
	ID         string          `json:"id"`
	Name       string          `json:"name,omitempty"`
	Namespace  string          `json:"namespace"`
	State      State           `json:"state"`
	OnFailure  FailurePolicy   `json:"on_failure"`
	RetryOf    string          `json:"retry_of,omitempty"`
	Error      *JobError       `json:"error"`
	Result     json.RawMessage `json:"result"`
	CreatedAt  time.Time       `json:"created_at"`
	FinishedAt *time.Time      `json:"finished_at"`
	// Counts are its steps by status (pending, queued, running, ...,
	// succeeded, failed, cancelled, skipped).
	Counts map[string]int `json:"counts"`
	Steps  []*StepInfo    `json:"steps"`
	// Layers are the step names by depth: a step is one layer below its
	// deepest dependency.
	Layers [][]string `json:"layers"`
}

// StepInfo is one step of a workflow and its job's state.
type StepInfo struct {
	Name      string        `json:"name"`
	ID        string        `json:"id"`
	Type      string        `json:"type"`
	Queue     string        `json:"queue"`
	DependsOn []string      `json:"depends_on"`
	OnFailure FailurePolicy `json:"on_failure"`
	// Status is the job's state, or "skipped" for a step that never ran
	// because its dependencies did not allow it ("missing" while its job
	// is not made yet).
	Status   string          `json:"status"`
	State    State           `json:"state,omitempty"`
	Carried  bool            `json:"carried,omitempty"` // succeeded in the run this one resumes
	Attempts int             `json:"attempts"`
	Error    *JobError       `json:"error"`
	Result   json.RawMessage `json:"result"`
	// ResultRef names a result too large for the step's record (Result
	// null): Client.Get of the step's job (ID) reads it whole.
	ResultRef  *FileInfo  `json:"result_ref,omitempty"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// Step returns the step named name, nil if there is none.
func (w *WorkflowInfo) Step(name string) *StepInfo {
	for _, s := range w.Steps {
		if s.Name == name {
			return s
		}
	}
	return nil
}

func submittedWorkflow(c *projections.WorkflowCreated) *SubmittedWorkflow {
	return &SubmittedWorkflow{ID: c.ID, Name: c.Name, State: State(c.State), RetryOf: c.RetryOf, Created: c.Created,
		Steps: c.Steps, Job: jobInfo(c.Job)}
}

func workflowInfo(v *projections.WorkflowView) *WorkflowInfo {
	out := &WorkflowInfo{ID: v.ID, Name: v.Name, Namespace: v.Namespace, State: State(v.State), OnFailure: FailurePolicy(v.OnFailure),
		RetryOf: v.RetryOf, Error: jobError(v.Error), Result: v.Result, CreatedAt: v.CreatedAt, FinishedAt: v.FinishedAt,
		Counts: v.Counts, Layers: v.Layers, Steps: make([]*StepInfo, len(v.Steps))}
	for i, s := range v.Steps {
		out.Steps[i] = &StepInfo{Name: s.Name, ID: s.ID, Type: s.Type, Queue: s.Queue, DependsOn: s.DependsOn,
			OnFailure: FailurePolicy(s.OnFailure), Status: s.Status, State: State(s.State), Carried: s.Carried,
			Attempts: s.Attempts, Error: jobError(s.Error), Result: s.Result, ResultRef: fileInfo(s.ResultRef),
			StartedAt: s.StartedAt, FinishedAt: s.FinishedAt}
	}
	return out
}

// workflows is what a backend does for workflows.
type workflows interface {
	submitWorkflow(ctx context.Context, req *commands.WorkflowRequest) (*projections.WorkflowCreated, error)
	getWorkflow(ctx context.Context, id string) (*projections.WorkflowView, error)
	retryWorkflow(ctx context.Context, id string) (*projections.WorkflowCreated, error)
}

// SubmitWorkflow submits a workflow: checked whole before anything is
// written (a cycle, a dependency on no step, a step named twice: an error
// matching ErrInvalidWorkflow that names the steps; a step's options or
// payload: the error a submit has, its field steps[i].<field>), then its
// job and every step's. Steps whose dependencies have not succeeded wait
// in Pending.
func (c *Client) SubmitWorkflow(ctx context.Context, w *Workflow) (*SubmittedWorkflow, error) {
	req, err := w.request()
	if err != nil {
		return nil, err
	}
	v, err := c.b.submitWorkflow(ctx, req)
	if err != nil {
		return nil, publicErr(err)
	}
	return submittedWorkflow(v), nil
}

// GetWorkflow returns a workflow with each step's state. A job that is not
// a workflow is not found (ErrNotFound).
func (c *Client) GetWorkflow(ctx context.Context, id string) (*WorkflowInfo, error) {
	v, err := c.b.getWorkflow(ctx, id)
	if err != nil {
		return nil, publicErr(err)
	}
	return workflowInfo(v), nil
}

// RetryWorkflow resumes a workflow that failed or was cancelled: a new
// workflow (retry_of names the old one) in which the steps that succeeded
// are kept (their results are the new run's), and the failed, cancelled
// and skipped ones, and what depends on them, run again. A repeat returns
// the same new run; a workflow that has not ended or succeeded is refused
// (ErrInvalidTransition).
func (c *Client) RetryWorkflow(ctx context.Context, id string) (*SubmittedWorkflow, error) {
	v, err := c.b.retryWorkflow(ctx, id)
	if err != nil {
		return nil, publicErr(err)
	}
	return submittedWorkflow(v), nil
}

// --- the direct backend ---

func (d direct) submitWorkflow(ctx context.Context, req *commands.WorkflowRequest) (*projections.WorkflowCreated, error) {
	res, err := d.store.SubmitWorkflow(ctx, req)
	if err != nil {
		return nil, err
	}
	return projections.ViewCreated(res.Job, res.IDs, res.Created), nil
}

func (d direct) getWorkflow(ctx context.Context, id string) (*projections.WorkflowView, error) {
	return d.store.ViewWorkflow(ctx, id)
}

func (d direct) retryWorkflow(ctx context.Context, id string) (*projections.WorkflowCreated, error) {
	res, err := d.store.RetryWorkflow(ctx, id)
	if err != nil {
		return nil, err
	}
	return projections.ViewCreated(res.Job, res.IDs, res.Created), nil
}

// --- a step's inputs, as its handler sees them ---

// ErrNotAStep is the error of Output on a job that is not a workflow's
// step, or of a step that does not depend on the step asked for.
var ErrNotAStep = errors.New("jetflow: not a dependency of this step")

// Step is the name of the workflow step this job runs ("" for a job that
// is not a step).
func (j *Job[T]) Step() string {
	if j.task == nil || j.task.Job.Spec.Step == nil {
		return ""
	}
	return j.task.Job.Spec.Step.Name
}

// Inputs are the results of the step's dependencies, by step name (nil for
// a job that is not a step), read at the first call.
func (j *Job[T]) Inputs(ctx context.Context) (map[string]json.RawMessage, error) {
	if j.task == nil {
		return nil, errors.New("jetflow: inputs outside a handler")
	}
	m, err := j.task.Inputs(ctx)
	if err != nil || m == nil {
		return nil, publicErr(err)
	}
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = rawOrNull(v)
	}
	return out, nil
}

// Output decodes the result of dependency step into v (a pointer, as for
// json.Unmarshal). A step this one does not depend on is ErrNotAStep.
func (j *Job[T]) Output(ctx context.Context, step string, v any) error {
	in, err := j.Inputs(ctx)
	if err != nil {
		return err
	}
	raw, ok := in[step]
	if !ok {
		return fmt.Errorf("output of %q: %w", step, ErrNotAStep)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("output of %q does not decode into %T: %w", step, v, err)
	}
	return nil
}

func rawOrNull(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return json.RawMessage(b)
}
