package domain

// Workflows: a graph of steps submitted as one, each step a job of its
// own, a child of the workflow's job (piece i+1 of it, its id derived from
// the workflow's). The workflow's job is the parent that waits: pending
// while its steps are created, then waiting until every step ended. A
// step whose dependencies have not all ended waits in pending (Hold with
// LimitDeps); the workflow counter admits it (job.admitted) the moment
// they allow it.

// WorkflowType is the type of a workflow's own job. No worker runs it and
// no one registers it: the engine creates it with its steps.
const WorkflowType = "@internal:jetflow:workflow"

// FanoutWorkflow is the plan kind of a workflow's job: its pieces are its
// steps.
const FanoutWorkflow = "workflow"

// What a step's failure does (WorkflowStep.OnFailure, Workflow.OnFailure).
const (
	// OnFailureFail: the workflow fails at once; every step that has not
	// ended is cancelled, but for "always" steps, which still run.
	OnFailureFail = "fail"
	// OnFailureSkip: the step's dependents are skipped (cancelled, code
	// SKIPPED), and the rest of the workflow goes on.
	OnFailureSkip = "skip"
	// OnFailureAlways: the step runs once its dependencies ended, however
	// they ended (a clean-up); its own failure skips its dependents.
	OnFailureAlways = "always"
)

// Limits a Hold names besides the queue's (LimitQueue, LimitUser): a step
// waits for its dependencies (Hold.Steps names them), a workflow for its
// steps to be created. A job held by one of these is not admitted by its
// queue's admission (Hold.Blocks).
const (
	LimitDeps  = "depends_on"
	LimitSteps = "steps"
)

// Blocks reports whether the hold keeps the job out of its queue's
// admission: it waits for something other than a slot.
func (h *Hold) Blocks() bool { return h != nil && (h.Limit == LimitDeps || h.Limit == LimitSteps) }

// CodeSkipped is the error code of a step that never ran because its
// dependencies did not allow it (a cancel from pending).
const CodeSkipped = "SKIPPED"

// Workflow is a workflow's graph, in its job's spec: the steps in the
// order submitted, step i being piece i+1 of the workflow. The steps'
// own specs are in the workflow's job.submitted (Event.Steps), not in the
// record.
type Workflow struct {
	Name      string         `msgpack:"name,omitempty"`
	OnFailure string         `msgpack:"on_failure"` // its steps' default
	Steps     []WorkflowStep `msgpack:"steps"`
}

// WorkflowStep is one step of a graph.
type WorkflowStep struct {
	Name string `msgpack:"name"`
	// After are the indices of the steps it depends on.
	After []int `msgpack:"after,omitempty"`
	// OnFailure is its own policy ("": the workflow's).
	OnFailure string `msgpack:"on_failure,omitempty"`
	// Carried is the job of a step that succeeded in the run this
	// workflow resumes (its retry_of): the step is not run again, and
	// that job's result is its output.
	Carried string `msgpack:"carried,omitempty"`
}

// Policy is the step's failure policy, the workflow's when it has none.
func (w *Workflow) Policy(i int) string {
	if p := w.Steps[i].OnFailure; p != "" {
		return p
	}
	if w.OnFailure != "" {
		return w.OnFailure
	}
	return OnFailureFail
}

// Held reports whether step i waits for a dependency when it is created:
// it has one that is not carried over.
func (w *Workflow) Held(i int) bool {
	for _, d := range w.Steps[i].After {
		if w.Steps[d].Carried == "" {
			return true
		}
	}
	return false
}

// StepSpec is what a step's job knows of its workflow (Spec.Step): its
// name and its dependencies, whose results are its inputs.
type StepSpec struct {
	Name   string      `msgpack:"name"`
	Inputs []StepInput `msgpack:"inputs,omitempty"`
}

// StepInput is one dependency of a step: its name and its job.
type StepInput struct {
	Name string `msgpack:"name"`
	Job  string `msgpack:"job"`
}
