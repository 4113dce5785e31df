package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
)

func TestProgressIsCoalescedAndEventsAreEmitted(t *testing.T) {
	h := newHarness(t)
	const steps = 200000
	var took time.Duration
	h.runtime(engine.RuntimeConfig{WorkerID: "w", ProgressInterval: 100 * time.Millisecond, Handlers: map[string]engine.Handler{
		"flood": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			t0 := time.Now()
			if err := task.Emit(ctx, "flood.begin", "warning", "starting", map[string]any{"steps": steps}); err != nil {
				return nil, err
			}
			for i := int64(1); i <= steps; i++ {
				if err := task.Progress(i, steps, "step"); err != nil {
					return nil, err
				}
				if i%20000 == 0 {
					time.Sleep(20 * time.Millisecond) // a handler doing work between reports
				}
			}
			took = time.Since(t0)
			return nil, nil
		}}})
	sub := h.submit(commands.SubmitRequest{Type: "flood"})
	j := h.waitState(sub.Job.ID, domain.StateSucceeded, 20*time.Second)
	if j.Progress == nil || j.Progress.Current != steps || j.Progress.Total != steps {
		t.Fatalf("final progress %+v", j.Progress)
	}
	var progress, custom int
	for _, e := range h.events(sub.Job.ID) {
		switch e.Type {
		case domain.EvProgress:
			progress++
		case domain.EvCustom:
			custom++
			if e.Name != "flood.begin" || e.Level != "warning" || e.Message != "starting" || e.Fields["steps"] == nil {
				t.Fatalf("custom event %+v", e)
			}
		}
	}
	// One write per interval at most, plus the last value before the outcome.
	if limit := int(took/(100*time.Millisecond)) + 2; progress < 1 || progress > limit {
		t.Fatalf("%d progress events for %d reports in %s (limit %d)", progress, steps, took, limit)
	}
	if custom != 1 {
		t.Fatalf("%d custom events", custom)
	}
	h.verify()
}
