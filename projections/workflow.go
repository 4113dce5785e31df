package projections

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Steps is the fold of a workflow's piece events, in log order: how each
// of its steps ended (each step's first outcome; a repeat is ignored), and
// the counts of a fan-out (Pieces) that the workflow's progress shows. A
// step carried over from the run the workflow resumes is succeeded from
// the start. The workflow counter and replay --verify both fold with it.
type Steps struct {
	Pieces  *Pieces
	Outcome []commands.StepOutcome
	Errors  map[int]string // the error message of each step that failed
	carried int
	changed []int
}

// NewSteps returns the fold of graph g before any piece event.
func NewSteps(g *domain.Workflow) *Steps {
	s := &Steps{Pieces: NewPieces(), Outcome: make([]commands.StepOutcome, len(g.Steps)), Errors: map[int]string{}}
	for i, st := range g.Steps {
		if st.Carried != "" {
			s.Outcome[i] = commands.StepSucceeded
			s.carried++
		}
	}
	return s
}

// Fold adds the piece event at seq (events at or before Pieces.UpTo were
// folded already).
func (s *Steps) Fold(seq uint64, ev *domain.Event) {
	n := ev.Piece
	first := n >= 1 && n <= len(s.Outcome) && !s.Pieces.Ended(n) && s.Outcome[n-1] == commands.StepOpen
	s.Pieces.Fold(seq, ev)
	if !first || !s.Pieces.Ended(n) {
		return
	}
	var o commands.StepOutcome
	switch ev.Type {
	case domain.PcSucceeded:
		o = commands.StepSucceeded
	case domain.PcFailed:
		o = commands.StepFailed
	case domain.PcCancelled:
		o = commands.StepCancelled
		if ev.Error != nil && ev.Error.Code == domain.CodeSkipped {
			o = commands.StepSkipped
		}
	}
	s.Outcome[n-1] = o
	if o == commands.StepFailed && ev.Error != nil {
		s.Errors[n-1] = ev.Error.Message
	}
	s.changed = append(s.changed, n-1)
}

// Changed returns the steps whose outcome was folded since the last call.
func (s *Steps) Changed() []int {
	c := s.changed
	s.changed = nil
	return c
}

// Tally is the workflow's counts as job.fanin writes them: its steps'
// outcomes so far (carried steps succeeded; skipped ones cancelled), the
// most common failure messages, and the last piece event folded.
func (s *Steps) Tally() domain.FanoutCounts {
	c := s.Pieces.Tally(5)
	c.Succeeded += s.carried
	return c
}

// workflowRef is what a workflow's job view says of its graph.
type workflowRef struct {
	Name      string `json:"name,omitempty"`
	Steps     int    `json:"steps"`
	OnFailure string `json:"on_failure"`
}

// stepRef is what a step's job view says of its workflow.
type stepRef struct {
	Name      string   `json:"name"`
	Workflow  string   `json:"workflow"`
	DependsOn []string `json:"depends_on"`
}

func viewWorkflow(j *domain.Job, v *JobView) {
	if g := j.Spec.Workflow; g != nil {
		v.Workflow = &workflowRef{Name: g.Name, Steps: len(g.Steps), OnFailure: g.OnFailure}
		if f := v.Fanout; f != nil && v.Progress != nil {
			c := j.Fanout.Counts
			v.Progress.Message = fmt.Sprintf("%d succeeded, %d failed, %d cancelled or skipped of %d steps",
				c.Succeeded, c.Failed, c.Cancelled, f.Total)
		}
	}
	if st := j.Spec.Step; st != nil {
		r := &stepRef{Name: st.Name, Workflow: j.Spec.Parent, DependsOn: make([]string, len(st.Inputs))}
		for i, in := range st.Inputs {
			r.DependsOn[i] = in.Name
		}
		v.Step = r
	}
}

// WorkflowView is a workflow as GET /api/v1/workflows/{id} shows it: its
// job, and its graph with each step's state.
type WorkflowView struct {
	ID         string             `json:"id"`
	Name       string             `json:"name,omitempty"`
	Namespace  string             `json:"namespace"`
	State      domain.State       `json:"state"`
	OnFailure  string             `json:"on_failure"`
	RetryOf    string             `json:"retry_of,omitempty"`
	Error      *domain.JobError   `json:"error"`
	Result     json.RawMessage    `json:"result"`
	CreatedAt  time.Time          `json:"created_at"`
	FinishedAt *time.Time         `json:"finished_at"`
	Counts     map[string]int     `json:"counts"` // steps by status
	Steps      []workflowStepView `json:"steps"`
	Layers     [][]string         `json:"layers"` // step names by depth: a step is one layer below its deepest dependency
}

// workflowStepView is one step of a workflow's view.
type workflowStepView struct {
	Name      string   `json:"name"`
	ID        string   `json:"id"`
	Type      string   `json:"type"`
	Queue     string   `json:"queue"`
	DependsOn []string `json:"depends_on"`
	OnFailure string   `json:"on_failure"`
	// Status is the step's state, "skipped" for a step cancelled because
	// its dependencies did not allow it to run, and "missing" for one
	// whose job does not exist (yet).
	Status     string           `json:"status"`
	State      domain.State     `json:"state,omitempty"`
	Carried    bool             `json:"carried,omitempty"` // succeeded in the run this one resumes: its job is that run's
	Attempts   int              `json:"attempts"`
	Error      *domain.JobError `json:"error"`
	Result     json.RawMessage  `json:"result"`
	ResultRef  *domain.FileRef  `json:"result_ref,omitempty"` // a result kept in the files bucket: GET /jobs/{step id}/result
	StartedAt  *time.Time       `json:"started_at"`
	FinishedAt *time.Time       `json:"finished_at"`
}

// ViewWorkflow renders workflow wf with its steps' records (steps[i] nil:
// step i's job is not there) and their ids.
func ViewWorkflow(wf *domain.Job, ids []string, steps []*domain.Job) *WorkflowView {
	g := wf.Spec.Workflow
	v := &WorkflowView{ID: wf.ID, Name: g.Name, Namespace: wf.Spec.Namespace, State: wf.State, OnFailure: g.OnFailure,
		RetryOf: wf.Spec.RetryOf, Error: wf.Error, Result: rawJSON(wf.Result), CreatedAt: wf.CreatedAt.UTC(),
		FinishedAt: timePtr(wf.FinishedAt), Counts: map[string]int{}, Steps: make([]workflowStepView, len(g.Steps))}
	for i, st := range g.Steps {
		sv := workflowStepView{Name: st.Name, ID: ids[i], DependsOn: make([]string, len(st.After)),
			OnFailure: g.Policy(i), Carried: st.Carried != "", Status: "missing", Result: json.RawMessage("null")}
		for k, d := range st.After {
			sv.DependsOn[k] = g.Steps[d].Name
		}
		if j := steps[i]; j != nil {
			sv.Type, sv.Queue, sv.State, sv.Attempts, sv.Error = j.Spec.Type, j.Spec.Queue, j.State, j.Attempt, j.Error
			sv.Result, sv.ResultRef = rawJSON(j.Result), j.ResultRef
			sv.StartedAt, sv.FinishedAt = timePtr(j.StartedAt), timePtr(j.FinishedAt)
			sv.Status = stepStatus(j)
		}
		v.Counts[sv.Status]++
		v.Steps[i] = sv
	}
	for _, l := range commands.Layers(g) {
		names := make([]string, len(l))
		for k, i := range l {
			names[k] = g.Steps[i].Name
		}
		v.Layers = append(v.Layers, names)
	}
	return v
}

// stepStatus is a step's state, or "skipped" for one that never ran
// because its dependencies did not allow it.
func stepStatus(j *domain.Job) string {
	if j.State == domain.StateCancelled && j.Error != nil && j.Error.Code == domain.CodeSkipped {
		return "skipped"
	}
	return string(j.State)
}

// WorkflowCreated is the answer to a workflow's submit (and resume): its
// job, whether it was created (false: its idempotency key named it), and
// its steps' job ids by name.
type WorkflowCreated struct {
	ID      string            `json:"id"`
	Name    string            `json:"name,omitempty"`
	State   domain.State      `json:"state"`
	RetryOf string            `json:"retry_of,omitempty"`
	Created bool              `json:"created"`
	Steps   map[string]string `json:"steps"`
	Job     *JobView          `json:"job"`
}

// ViewCreated renders a submitted workflow's answer.
func ViewCreated(wf *domain.Job, ids []string, created bool) *WorkflowCreated {
	g := wf.Spec.Workflow
	c := &WorkflowCreated{ID: wf.ID, Name: g.Name, State: wf.State, RetryOf: wf.Spec.RetryOf, Created: created,
		Steps: make(map[string]string, len(ids)), Job: View(wf)}
	for i, id := range ids {
		c.Steps[g.Steps[i].Name] = id
	}
	return c
}
