package engine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// A worker with few slots, all of them held for a while, then released
// with many short items waiting: the items keep flowing. With nats.go's
// Consume, whose refill can be skipped when the server answers fast (see
// engine/pull.go), a round like this stalled for 30 s about one time in
// eight on a loaded machine. It is a race in the library, so this test
// catches a return to Consume often, not always (on old code: 1 failure in
// 6 runs on a quiet machine).
func TestFewSlotsNeverStall(t *testing.T) {
	h := newHarness(t)
	const batches, slots = 200, 4
	type round struct {
		gate    chan struct{}
		held    atomic.Int32
		runs    atomic.Int32
		started atomic.Int32
	}
	var cur atomic.Pointer[round]
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: slots, Handlers: map[string]engine.Handler{
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			f := &engine.FanOut{BatchType: "tick"}
			for i := 0; i < batches; i++ {
				f.Batches = append(f.Batches, []byte(`null`))
			}
			return nil, f
		}},
		Batches: map[string]engine.BatchHandler{"tick": func(ctx context.Context, b *engine.BatchTask) error {
			r := cur.Load()
			if r.started.Add(1) <= slots {
				r.held.Add(1)
				<-r.gate
			}
			r.runs.Add(1)
			return nil
		}}})
	for i := 0; i < 20; i++ {
		r := &round{gate: make(chan struct{})}
		cur.Store(r)
		sub := h.submit(commands.SubmitRequest{Type: "coord"})
		testkit.WaitFor(t, 20*time.Second, func() error {
			if n := r.held.Load(); n != slots {
				return fmt.Errorf("round %d: %d batches held", i, n)
			}
			return nil
		})
		if i == 0 {
			// Every batch is counted once: held by a worker or waiting. The
			// coordinator's own item is held too until its outcome is
			// recorded, which goes on after its slot was freed.
			h.waitState(sub.Job.ID, domain.StateWaiting, 20*time.Second)
			testkit.WaitFor(t, 5*time.Second, func() error {
				stats, err := engine.Internal(h.st).QueueStats(h.ctx, "default")
				if err != nil || uint64(stats.Held)+stats.Waiting != batches {
					return fmt.Errorf("queue stats %+v, %v; want %d held or waiting", stats, err, batches)
				}
				return nil
			})
		}
		close(r.gate)
		testkit.WaitDrained(t, 5*time.Second, func() (int, error) { return batches - int(r.runs.Load()), nil })
		h.waitState(sub.Job.ID, domain.StateSucceeded, 20*time.Second)
	}
}
