package cmdservice

import (
	"context"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/projections"
)

// workflow answers the workflow verbs (docs/protocol.md): submit_workflow
// (a commands.WorkflowRequest; reply {"workflow": {id, steps, job, ...},
// "created"}), get_workflow and retry_workflow ({"id"}; reply
// {"workflow": ...}: the graph with each step's state, or the resumed
// run).
func (c *CommandServer) workflow(ctx context.Context, verb string, p *commands.Principal, body []byte, asJSON bool,
	decode func(any) *cmdReply, idOf func(scoped bool) (*idCommand, *cmdReply), failed func(error, string) *cmdReply) *cmdReply {
	switch verb {
	case "submit_workflow":
		var req commands.WorkflowRequest
		if r := decode(&req); r != nil {
			return r
		}
		if err := commands.CheckGivenNamespace(body, asJSON); err != nil {
			return failed(err, "")
		}
		ns, err := p.Scope(commands.ActSubmit, req.Namespace)
		if err != nil {
			return failed(err, "")
		}
		req.Namespace = ns
		if p != nil {
			if req.User, err = commands.SubmitUser(p.Role, p.Name, req.User); err != nil {
				return failed(err, "")
			}
		}
		res, err := c.store.SubmitWorkflow(ctx, &req)
		if err != nil {
			return failed(err, "")
		}
		created := res.Created
		return &cmdReply{Workflow: projections.ViewCreated(res.Job, res.IDs, res.Created), Created: &created}
	case "get_workflow":
		req, r := idOf(true)
		if r != nil {
			return r
		}
		v, err := c.store.ViewWorkflow(ctx, req.ID)
		if err != nil {
			return failed(err, req.ID)
		}
		return &cmdReply{Workflow: v}
	default: // retry_workflow
		req, r := idOf(true)
		if r != nil {
			return r
		}
		res, err := c.store.RetryWorkflow(ctx, req.ID)
		if err != nil {
			return failed(err, req.ID)
		}
		created := res.Created
		return &cmdReply{Workflow: projections.ViewCreated(res.Job, res.IDs, res.Created), Created: &created}
	}
}
