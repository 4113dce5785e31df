package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// Workflows over HTTP (docs/workflows.md, docs/http.md):
//
//	POST /api/v1/workflows              submit (producer): 201 {id, steps: {name: id}, job}, 200 for a repeated key
//	GET  /api/v1/workflows/{id}         the graph with each step's state (reader)
//	POST /api/v1/workflows/{id}/retry   resume a failed or cancelled one (producer: retry)
//	GET  /api/v1/jobs/{id}/step-inputs/{step}?worker_id=W
//	                                    a step's input too large for its claim (the worker holding it)

// maxInlineInputs bounds the results of a step's dependencies given in the
// job a worker claims (Inputs); those past it are given by path
// (InputRefs).
const maxInlineInputs = 1 << 20

func workflowURL(id string) string { return "/api/v1/workflows/" + id }

// decodeWorkflow decodes the body of POST /workflows strictly: a
// commands.WorkflowRequest, each step one object with its job's fields.
// The workflow is checked whole when it is submitted
// (commands.PrepareWorkflow).
func decodeWorkflow(body []byte) (*commands.WorkflowRequest, error) {
	var req commands.WorkflowRequest
	if err := decodeStrict(body, &req, false); err != nil {
		return nil, err
	}
	if err := commands.CheckGivenNamespace(body, true); err != nil {
		return nil, err
	}
	return &req, nil
}

// POST /workflows
func (g *Gateway) submitWorkflow(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(w, r, commands.MaxWorkflowBytes)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	req, err := decodeWorkflow(body)
	if err == nil {
		req.Namespace, err = scopeNamespace(r, commands.ActSubmit, req.Namespace)
	}
	if p := principal(r); err == nil && p != nil {
		req.User, err = commands.SubmitUser(p.Role, p.Name, req.User)
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	res, err := g.store.SubmitWorkflow(r.Context(), req)
	g.workflowCreated(w, r, res, err, "")
}

// workflowCreated answers a workflow's submit or resume: 201 and the new
// workflow, 200 and the one its key (or its resumed run) named.
func (g *Gateway) workflowCreated(w http.ResponseWriter, r *http.Request, res engine.WorkflowSubmitted, err error, id string) {
	if err != nil {
		fail(w, r, err, id)
		return
	}
	g.index.Put(res.Job, res.Rev)
	w.Header().Set("Location", workflowURL(res.Job.ID))
	status := http.StatusCreated
	if !res.Created {
		status = http.StatusOK
	}
	writeJSON(w, status, projections.ViewCreated(res.Job, res.IDs, res.Created))
}

// GET /workflows/{id}
func (g *Gateway) getWorkflow(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	v, err := g.store.ViewWorkflow(r.Context(), id)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// POST /workflows/{id}/retry
func (g *Gateway) retryWorkflow(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	res, err := g.store.RetryWorkflow(r.Context(), id)
	g.workflowCreated(w, r, res, err, id)
}

// GET /jobs/{id}/step-inputs/{step}?worker_id=W: the result of a step's
// dependency, for the worker that holds the step.
func (g *Gateway) stepInput(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	job, err := g.claimant(r, id)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	name := r.PathValue("step")
	dep := ""
	if st := job.Spec.Step; st != nil {
		for _, in := range st.Inputs {
			if in.Name == name {
				dep = in.Job
			}
		}
	}
	if dep == "" {
		fail(w, r, newProblem(engine.ProblemNotFound, http.StatusNotFound, fmt.Sprintf("job %s has no input step %q", id, name)), id)
		return
	}
	snap, err := g.store.Read(r.Context(), dep)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	g.writeResult(w, r, snap.Job)
}

// GET /jobs/{id}/result: a job's JSON result, whatever its size (200);
// null when it ended without one; the job itself while it has not ended
// (202, Retry-After).
func (g *Gateway) getResult(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	snap, err := g.store.Read(r.Context(), id)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	if !snap.Job.State.Terminal() {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusAccepted, g.view(r.Context(), snap.Job))
		return
	}
	g.writeResult(w, r, snap.Job)
}

// writeResult answers j's result: its record's, or the object of the files
// bucket it names, streamed (with its Digest).
func (g *Gateway) writeResult(w http.ResponseWriter, r *http.Request, j *domain.Job) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if j.ResultRef == nil {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(rawResult(j.Result))
		}
		return
	}
	fs, err := g.files(r.Context())
	if err != nil {
		fail(w, r, err, j.ID)
		return
	}
	res, err := fs.OpenResultJSON(r.Context(), j.ID, *j.ResultRef)
	if err != nil {
		fail(w, r, err, j.ID)
		return
	}
	defer res.Close()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", fmt.Sprint(j.ResultRef.Size))
	h.Set("Digest", j.ResultRef.Digest)
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, res); err != nil {
		g.log.Debug("result", "job", j.ID, "err", err)
	}
}

func rawResult(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// withInputs adds a claimed step's inputs to its view: the results of its
// dependencies, inline while they fit maxInlineInputs, by path past it.
// A step whose inputs cannot be read is claimed without them: its worker
// reads them by path.
func (g *Gateway) withInputs(ctx context.Context, j *domain.Job, v *projections.JobView) {
	st := j.Spec.Step
	if st == nil || len(st.Inputs) == 0 {
		return
	}
	in, err := g.store.StepInputs(ctx, j, maxInlineInputs)
	if err != nil {
		g.log.Warn("inputs of a claimed step; given by path", "job", j.ID, "err", err)
	}
	size := 0
	for _, dep := range st.Inputs {
		res, ok := in[dep.Name]
		if ok && size+len(res) <= maxInlineInputs {
			if v.Inputs == nil {
				v.Inputs = map[string]json.RawMessage{}
			}
			v.Inputs[dep.Name] = json.RawMessage(rawResult(res))
			size += len(res)
			continue
		}
		if v.InputRefs == nil {
			v.InputRefs = map[string]string{}
		}
		v.InputRefs[dep.Name] = jobURL(j.ID) + "/step-inputs/" + url.PathEscape(dep.Name)
	}
}
