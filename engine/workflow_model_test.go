package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// Random graphs, run by the engine, against the model: every step ran iff
// the model says it runs, exactly once; each ends as the model says, and
// so does the workflow; replay --verify agrees with the records.
func TestWorkflowRandomGraphsAgainstTheModel(t *testing.T) {
	graphs := 150
	if testing.Short() {
		graphs = 30
	}
	h := newHarness(t)
	var mu sync.Mutex
	runs := map[string]int{} // step job id -> runs
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 16, Handlers: map[string]engine.Handler{
		"model.step": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			mu.Lock()
			runs[task.Job.ID]++
			mu.Unlock()
			var p struct{ Fail bool }
			if err := json.Unmarshal(task.Job.Spec.Payload, &p); err != nil {
				return nil, err
			}
			if p.Fail {
				return nil, &engine.PermanentError{Err: fmt.Errorf("the model says %s fails", task.Job.Spec.Step.Name)}
			}
			return []byte(`1`), nil
		}}})
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 1))
	type run struct {
		g   testkit.WorkflowModel
		res engine.WorkflowSubmitted
	}
	var all []run
	for range graphs {
		g := testkit.RandomWorkflow(r)
		req := commands.WorkflowRequest{OnFailure: domain.OnFailureSkip}
		for i, deps := range g.Deps {
			s := commands.WorkflowStepRequest{Name: fmt.Sprintf("s%d", i),
				Job: commands.SubmitRequest{Type: "model.step", Payload: commands.RawJSON(fmt.Sprintf(`{"fail":%v}`, g.Fails[i])), MaxRetries: ptr(0)}}
			for _, d := range deps {
				s.DependsOn = append(s.DependsOn, fmt.Sprintf("s%d", d))
			}
			if g.Always[i] {
				s.OnFailure = domain.OnFailureAlways
			}
			req.Steps = append(req.Steps, s)
		}
		all = append(all, run{g, h.submitWorkflow(req)})
	}
	for k, x := range all {
		want, ok := x.g.Outcome()
		wantState := domain.StateSucceeded
		if !ok {
			wantState = domain.StateFailed
		}
		h.waitState(x.res.Job.ID, wantState, 60*time.Second)
		got := h.statuses(x.res.Job.ID)
		mu.Lock()
		for i, w := range want {
			name := fmt.Sprintf("s%d", i)
			ran := runs[x.res.IDs[i]]
			if got[name] != w || (ran == 1) != (w != "skipped") || ran > 1 {
				mu.Unlock()
				t.Fatalf("graph %d (seed %d) %+v: step %s is %s and ran %d times; the model says %s (all: %v, want %v)",
					k, seed, x.g, name, got[name], ran, w, got, want)
			}
		}
		mu.Unlock()
	}
	h.verify()
}
