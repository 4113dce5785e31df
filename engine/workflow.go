package engine

import (
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/store"
)

// WorkflowSubmitted is the outcome of a workflow's submit (or resume): its
// job, whether it was created, its steps' job ids.
type WorkflowSubmitted = store.WorkflowSubmitted

// defaultWorkflowGrace is how long a workflow may stay pending before the
// leader makes its steps.
const defaultWorkflowGrace = maintenance.DefaultWorkflowGrace
