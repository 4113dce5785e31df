package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
)

// Batches of fan-outs, run by HTTP workers registered with batch_types: a
// claim may hand one out (ClaimResponse.Batch), and PATCH /batches/{id}
// reports it (engine.Remote.ReportBatch).

// batchView is a batch as a claim hands it to an HTTP worker.
type batchView struct {
	ID             string          `json:"id"`
	ParentID       string          `json:"parent_id"`
	Piece          int             `json:"piece"`
	Type           string          `json:"type"`
	Queue          string          `json:"queue"`
	Attempt        int             `json:"attempt"`
	Payload        json.RawMessage `json:"payload"`
	Deadline       time.Time       `json:"deadline"`
	TimeoutSeconds float64         `json:"timeout_seconds"`
	// TraceParent is the W3C trace context the worker continues: that of
	// the fan-out that made the batch (docs/tracing.md). Empty: none.
	TraceParent string `json:"traceparent,omitempty"`
}

func viewBatch(b *engine.RemoteBatch) *batchView {
	payload := json.RawMessage(b.Item.Payload)
	if len(payload) == 0 {
		payload = json.RawMessage("null")
	}
	return &batchView{ID: b.ID, ParentID: b.Item.Parent, Piece: b.Item.Piece, Type: b.Item.Type, Queue: b.Item.Queue,
		Attempt: b.Attempt, Payload: payload, Deadline: b.Deadline, TimeoutSeconds: b.Item.Timeout.Seconds(),
		TraceParent: b.Item.Trace}
}

// batchPatchRequest is the body of PATCH /batches/{id}: the outcome of a
// batch the worker holds.
type batchPatchRequest struct {
	WorkerID  string             `json:"worker_id"`
	State     domain.State       `json:"state"` // succeeded, failed, retry_later
	Error     *domain.JobError   `json:"error,omitempty"`
	Retryable *bool              `json:"retryable,omitempty"`
	Delay     *commands.Duration `json:"delay,omitempty"`
	Reason    string             `json:"reason,omitempty"`
}

// decodeBatchPatch decodes and checks a PATCH /batches/{id} body: the
// same rules as a job's report of the same state.
func decodeBatchPatch(body []byte) (*batchPatchRequest, error) {
	var b batchPatchRequest
	if err := decodeStrict(body, &b, false); err != nil {
		return nil, err
	}
	if !commands.BatchReportable(b.State) {
		return nil, &commands.InputError{Field: "state", Value: fmt.Sprintf("%q", b.State),
			Reason: `a batch reports "succeeded", "failed" or "retry_later"`}
	}
	p := patchRequest{WorkerID: b.WorkerID, State: b.State, Error: b.Error, Retryable: b.Retryable, Delay: b.Delay, Reason: b.Reason}
	if err := p.validate(); err != nil {
		return nil, err
	}
	return &b, nil
}

// PATCH /batches/{id}
func (g *Gateway) patchBatch(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !engine.IsBatchID(id) || len(id) > engine.MaxBatchIDLen {
		fail(w, r, newProblem(engine.ProblemNotFound, http.StatusNotFound, fmt.Sprintf("no batch has the id %q", id)), "")
		return
	}
	body, err := readBody(w, r, g.cfg.MaxBodyBytes)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	req, err := decodeBatchPatch(body)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	ctx := r.Context()
	rec, _, err := g.workers.Get(ctx, req.WorkerID)
	if err == nil {
		err = ownsWorker(r, rec)
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	if !slices.Contains(rec.Claims, id) {
		p := newProblem(engine.ProblemNotClaimant, http.StatusConflict, fmt.Sprintf(
			"worker %s does not hold batch %s (never claimed it, reported it already, or its heartbeat listed it as lost)", rec.ID, id))
		p.WorkerID = rec.ID
		fail(w, r, p, "")
		return
	}
	p := patchRequest{State: req.State, Error: req.Error, Retryable: req.Retryable, Delay: req.Delay, Reason: req.Reason}
	out, err := g.remote.ReportBatch(ctx, id, rec.ID, p.report())
	if err == nil || errors.Is(err, commands.ErrNotClaimant) || errors.Is(err, commands.ErrInvalidTransition) {
		// Reported, or no longer the worker's: either way not a claim of it.
		_, _ = g.workers.Update(context.WithoutCancel(ctx), rec.ID, func(rec *workerRecord) {
			rec.Claims = slices.DeleteFunc(rec.Claims, func(c string) bool { return c == id })
		})
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	out.ID = id
	writeJSON(w, http.StatusOK, out)
}
