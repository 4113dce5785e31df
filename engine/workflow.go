package engine

import (
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/store"
)

// WorkflowSubmitted is the outcome of a workflow's submit (or resume): its
// job, whether it was created, its steps' job ids.
type WorkflowSubmitted = store.WorkflowSubmitted

// StepID is the job id of step i (0-based) of workflow wf.
func StepID(ns, wf string, i int) string { return store.StepID(ns, wf, i) }

// defaultWorkflowGrace is how long a workflow may stay pending before the
// leader makes its steps.
const defaultWorkflowGrace = maintenance.DefaultWorkflowGrace
