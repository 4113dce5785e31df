package jetflow

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/projections"
)

// The workflow verbs of the command service: submit_workflow,
// get_workflow, retry_workflow (docs/protocol.md).

func (c command) workflow(ctx context.Context, verb string, req any, v any) error {
	out, err := c.do(ctx, verb, req)
	if err != nil {
		return err
	}
	if len(out.Workflow) == 0 {
		return fmt.Errorf("%s: the reply has no workflow", verb)
	}
	if err := json.Unmarshal(out.Workflow, v); err != nil {
		return fmt.Errorf("%s: the reply does not decode: %w", verb, err)
	}
	return nil
}

func (c command) submitWorkflow(ctx context.Context, req *commands.WorkflowRequest) (*projections.WorkflowCreated, error) {
	var v projections.WorkflowCreated
	if err := c.workflow(ctx, "submit_workflow", req, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func (c command) getWorkflow(ctx context.Context, id string) (*projections.WorkflowView, error) {
	var v projections.WorkflowView
	if err := c.workflow(ctx, "get_workflow", map[string]string{"id": id}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

func (c command) retryWorkflow(ctx context.Context, id string) (*projections.WorkflowCreated, error) {
	var v projections.WorkflowCreated
	if err := c.workflow(ctx, "retry_workflow", map[string]string{"id": id}, &v); err != nil {
		return nil, err
	}
	return &v, nil
}
