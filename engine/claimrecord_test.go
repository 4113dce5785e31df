package engine_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// A local claim's record is written by the runtime only once the handler
// has run for store.ClaimRecordAfter: a job that ends sooner has its record
// go from queued to its outcome in one write, while its log has every
// event; a job that runs longer shows running. Either way nothing is left
// for the Projector to repair, and the log and the bucket agree.
func TestClaimRecordDeferred(t *testing.T) {
	h := newHarness(t)

	// Every state each job's record was written with, from a subscription
	// to the bucket's subjects begun before the submits: a watch of the
	// bucket would miss a value the next write replaced before the watch
	// was handed it (the bucket keeps one value a key).
	var mu sync.Mutex
	states := map[string][]domain.State{}
	nc := testkit.Conn(t, h.srv)
	prefix := "$KV." + h.st.KV.Bucket() + "."
	sub, err := nc.Subscribe(prefix+">", func(m *nats.Msg) {
		j, err := streams.DecodeJob(m.Data)
		if err != nil {
			return
		}
		key := strings.TrimPrefix(m.Subject, prefix)
		mu.Lock()
		states[key] = append(states[key], j.State)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	took := func(id string) []domain.State {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(states[id])
	}
	waitTook := func(id string, want ...domain.State) {
		t.Helper()
		testkit.WaitFor(t, 10*time.Second, func() error {
			if got := took(id); !slices.Equal(got, want) {
				return fmt.Errorf("job %s's record was %v, want %v", id, got, want)
			}
			return nil
		})
	}

	release := make(chan struct{})
	h.runtime(engine.RuntimeConfig{WorkerID: "w1", Handlers: map[string]engine.Handler{
		"quick": func(context.Context, *engine.Task) ([]byte, error) { return []byte(`1`), nil },
		"slow": func(ctx context.Context, _ *engine.Task) ([]byte, error) {
			select {
			case <-release:
				return []byte(`2`), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}})

	quick := h.submit(commands.SubmitRequest{Type: "quick"}).Job.ID
	h.waitState(quick, domain.StateSucceeded, 10*time.Second)
	h.wantEvents(quick, domain.EvSubmitted, domain.EvStarted, domain.EvSucceeded)
	if evs := h.events(quick); evs[2].Time.Sub(evs[1].Time) < store.ClaimRecordAfter {
		waitTook(quick, domain.StateQueued, domain.StateSucceeded)
	} else { // a machine slow enough to take that long between the claim and the outcome
		waitTook(quick, domain.StateQueued, domain.StateRunning, domain.StateSucceeded)
	}

	slow := h.submit(commands.SubmitRequest{Type: "slow"}).Job.ID
	// Shown running as soon as the log has the claim, whether its record
	// was written yet or not (Read folds the log into a queued record).
	testkit.WaitFor(t, 10*time.Second, func() error {
		if got := types(h.events(slow)); len(got) < 2 {
			return fmt.Errorf("events %v", got)
		}
		return nil
	})
	if snap, err := h.st.Read(h.ctx, slow); err != nil || snap.Job.State != domain.StateRunning || snap.Job.Worker != "w1" {
		t.Fatalf("read once claimed: %v %+v", err, snap.Job)
	}
	j := h.waitState(slow, domain.StateRunning, 10*time.Second)
	if j.Worker != "w1" || j.Attempt != 1 || j.Seq != h.events(slow)[1].Seq {
		t.Fatalf("running record: worker %q attempt %d seq %d", j.Worker, j.Attempt, j.Seq)
	}
	close(release)
	h.waitState(slow, domain.StateSucceeded, 10*time.Second)
	h.wantEvents(slow, domain.EvSubmitted, domain.EvStarted, domain.EvSucceeded)
	waitTook(slow, domain.StateQueued, domain.StateRunning, domain.StateSucceeded)

	if err := h.eng.CaughtUp(h.ctx); err != nil {
		t.Fatal(err)
	}
	if n := engine.Internal(h.eng.Store).Repairs().Load(); n != 0 {
		t.Fatalf("the Projector repaired %d records", n)
	}
	h.verify()
}
