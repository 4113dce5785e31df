package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// claimBatch claims and checks that a batch came.
func (e *env) claimBatch(worker string) *batchView {
	e.t.Helper()
	c := e.claim(worker, 10)
	if c.Job != nil || c.Batch == nil {
		e.t.Fatalf("claim: job %+v batch %+v, want a batch", c.Job, c.Batch)
	}
	return c.Batch
}

func (e *env) patchBatch(id string, body any) resp {
	e.t.Helper()
	return e.do("PATCH", "/api/v1/batches/"+id, body)
}

// An HTTP coordinator fans out to batches that HTTP workers claim and
// report; the parent completes once, by the fan-in counter, with its
// pieces counted.
func TestHTTPBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	coord := e.register(`{"name":"coord","types":["bt.coord"]}`)
	var reg WorkerView
	e.do("POST", "/api/v1/workers", `{"name":"emb","batch_types":["emb.batch"],"concurrency":2}`).want(t, 201).json(t, &reg)
	if strings.Join(reg.BatchTypes, ",") != "emb.batch" || len(reg.Types) != 0 {
		t.Fatalf("registered %+v", reg)
	}
	wk := reg.ID
	parent := e.submit(`{"type":"bt.coord"}`).ID
	e.run(coord, parent)
	v := e.patch(parent, map[string]any{"worker_id": coord, "state": "waiting", "fanout": map[string]any{
		"batches": map[string]any{"type": "emb.batch", "items": []any{map[string]int{"n": 1}, 2, "three"},
			"max_retries": 2, "backoff": "100ms", "timeout": "30s"}}}).want(t, 200).job(t)
	if v.State != domain.StateWaiting || v.Fanout.Kind != "batches" || v.Fanout.Total != 3 || v.Fanout.BatchType != "emb.batch" {
		t.Fatalf("waiting %+v", v.Fanout)
	}
	t0 := time.Now()
	b := e.claimBatch(wk)
	if b.ParentID != parent || b.Piece != 1 || b.Type != "emb.batch" || b.Queue != "default" || b.Attempt != 1 ||
		string(b.Payload) != `{"n":1}` || b.TimeoutSeconds != 30 || b.Deadline.Before(t0.Add(29*time.Second)) ||
		!strings.HasPrefix(b.ID, "bt-") || len(b.ID) > engine.MaxBatchIDLen {
		t.Fatalf("batch %+v", b)
	}
	var hb heartbeatResponse
	e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", nil).want(t, 200).json(t, &hb)
	if strings.Join(hb.Jobs, ",") != b.ID || len(hb.Lost) != 0 {
		t.Fatalf("heartbeat %+v", hb)
	}
	// Refusals write nothing and leave the batch held.
	before := e.eventCount()
	e.patchBatch(b.ID, map[string]any{"worker_id": coord, "state": "succeeded"}).problem(t, 409, engine.ProblemNotClaimant)
	e.patchBatch(b.ID, map[string]any{"worker_id": wk, "state": "queued"}).problem(t, 400, engine.ProblemInvalidInput)
	e.patchBatch(b.ID, map[string]any{"worker_id": wk, "state": "failed"}).problem(t, 400, engine.ProblemInvalidInput)
	e.patchBatch(b.ID, map[string]any{"worker_id": wk, "state": "succeeded", "delay": 1}).problem(t, 400, engine.ProblemInvalidInput)
	e.patchBatch("bt-nope", map[string]any{"worker_id": wk, "state": "succeeded"}).problem(t, 409, engine.ProblemNotClaimant)
	e.patchBatch("nope", map[string]any{"worker_id": wk, "state": "succeeded"}).problem(t, 404, engine.ProblemNotFound)
	if n := e.eventCount() - before; n != 0 {
		t.Fatalf("refused reports wrote %d events", n)
	}
	var out engine.BatchReport
	e.patchBatch(b.ID, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, 200).json(t, &out)
	if out != (engine.BatchReport{ID: b.ID, ParentID: parent, Piece: 1, State: "succeeded"}) {
		t.Fatalf("report %+v", out)
	}
	e.patchBatch(b.ID, map[string]any{"worker_id": wk, "state": "succeeded"}).problem(t, 409, engine.ProblemNotClaimant)
	// Piece 2 asks to run later, then fails once (retried: a batch's
	// attempts are its deliveries, as for a Go batch handler, and it has 2
	// retries), then succeeds; piece 3 succeeds.
	states := map[int][]string{}
	attempts := map[int][]int{}
	for done := 1; done < 3; {
		b := e.claimBatch(wk)
		attempts[b.Piece] = append(attempts[b.Piece], b.Attempt)
		body := map[string]any{"worker_id": wk, "state": "succeeded"}
		if b.Piece == 2 {
			switch len(attempts[2]) {
			case 1:
				body = map[string]any{"worker_id": wk, "state": "retry_later", "delay": 0, "reason": "busy"}
			case 2:
				body = map[string]any{"worker_id": wk, "state": "failed", "error": map[string]string{"message": "flaky"}}
			}
		}
		e.patchBatch(b.ID, body).want(t, 200).json(t, &out)
		states[b.Piece] = append(states[b.Piece], out.State)
		if out.State == "succeeded" {
			done++
		}
	}
	if fmt.Sprint(states[2]) != "[retrying retrying succeeded]" || fmt.Sprint(states[3]) != "[succeeded]" ||
		fmt.Sprint(attempts[2]) != "[1 2 3]" {
		t.Fatalf("states %v attempts %v", states, attempts)
	}
	p := e.waitState(parent, domain.StateSucceeded)
	if p.Fanout.Succeeded != 3 || p.Fanout.Failed != 0 || p.Progress.Current != 3 || p.Progress.Total != 3 {
		t.Fatalf("parent %+v", p.Fanout)
	}
	var w WorkerView
	e.do("GET", "/api/v1/workers/"+wk, nil).want(t, 200).json(t, &w)
	if len(w.Claims) != 0 {
		t.Fatalf("claims left %v", w.Claims)
	}
}

// A batch of a parent that ended is refused (409 invalid-transition) and
// lost; a batch past its deadline is ended as TIMEOUT and retried; a
// worker at its concurrency holding a batch claims no more.
func TestHTTPBatchLostAndTimedOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	coord := e.register(`{"name":"coord","types":["bl.coord"],"concurrency":2}`)
	wk := e.register(`{"name":"emb","batch_types":["bl.batch"],"concurrency":1}`)
	fan := func(timeout string) string {
		parent := e.submit(`{"type":"bl.coord"}`).ID
		e.run(coord, parent)
		e.patch(parent, map[string]any{"worker_id": coord, "state": "waiting", "fanout": map[string]any{
			"batches": map[string]any{"type": "bl.batch", "items": []int{1, 2}, "timeout": timeout, "max_retries": 3}}}).want(t, 200)
		return parent
	}
	parent := fan("30s")
	b := e.claimBatch(wk)
	e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wk}).problem(t, 409, problemConcurrencyLimit)
	e.do("POST", "/api/v1/jobs/"+parent+"/cancel", nil).want(t, 200)
	e.patchBatch(b.ID, map[string]any{"worker_id": wk, "state": "succeeded"}).problem(t, 409, engine.ProblemInvalidTransition)
	if c := e.claim(wk, 0.5); c.Batch != nil || c.Job != nil {
		t.Fatalf("a batch of a cancelled parent was handed out: %+v", c.Batch)
	}
	// Held past its deadline and the grace: the heartbeat ends it as
	// TIMEOUT and says lost.
	parent = fan("1s")
	b = e.claimBatch(wk)
	var hb heartbeatResponse
	e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", nil).want(t, 200).json(t, &hb)
	if strings.Join(hb.Jobs, ",") != b.ID {
		t.Fatalf("heartbeat %+v", hb)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", nil).want(t, 200).json(t, &hb)
		if strings.Join(hb.Lost, ",") != b.ID || len(hb.Jobs) != 0 {
			return fmt.Errorf("heartbeat %+v", hb)
		}
		return nil
	})
	if since := time.Until(b.Deadline); since > -2*time.Second {
		t.Fatalf("lost %s before its deadline plus the grace", since+2*time.Second)
	}
	e.patchBatch(b.ID, map[string]any{"worker_id": wk, "state": "succeeded"}).problem(t, 409, engine.ProblemNotClaimant)
	// Retried: the same piece again, its next attempt (after the backoff).
	var again *batchView
	for again == nil || again.Piece != b.Piece {
		again = e.claimBatch(wk)
		if again.Piece != b.Piece {
			e.patchBatch(again.ID, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, 200)
		}
	}
	if again.Attempt != 2 {
		t.Fatalf("retried %+v", again)
	}
	e.patchBatch(again.ID, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, 200)
	e.waitState(parent, domain.StateSucceeded)
	// Unregistering gives a held batch back at once.
	parent = fan("30s")
	b = e.claimBatch(wk)
	var rel struct{ Released []string }
	e.do("DELETE", "/api/v1/workers/"+wk, nil).want(t, 200).json(t, &rel)
	if strings.Join(rel.Released, ",") != b.ID {
		t.Fatalf("released %v", rel.Released)
	}
	wk2 := e.register(`{"name":"emb2","batch_types":["bl.batch"]}`)
	if again := e.claimBatch(wk2); again.Piece != 1 && again.Piece != 2 || again.ParentID != parent {
		t.Fatalf("after release %+v", again)
	}
}
