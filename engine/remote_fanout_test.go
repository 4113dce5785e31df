package engine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/remote"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// A remote coordinator's batches are run by Go batch handlers, and a Go
// coordinator's by remote workers: one machinery, whoever fans out and
// whoever runs the pieces. Each parent completes exactly once.
func TestRemoteAndGoFanOutsMix(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, h.srv), "gw"), 5*time.Second, testkit.Logger(t))

	// Remote coordinator, Go batch handler.
	ran := &counter{}
	h.runtime(engine.RuntimeConfig{Queue: "mix", WorkerID: "go-batches", Batches: map[string]engine.BatchHandler{
		"go.piece": func(_ context.Context, b *engine.BatchTask) error { ran.add(fmt.Sprint(b.Piece)); return nil }}})
	parent := h.submit(commands.SubmitRequest{Type: "remote.coord", Queue: "mix"}).Job.ID
	c, err := rm.Claim(h.ctx, "w1", []string{"mix"}, []string{"remote.coord"}, 5*time.Second, "")
	if err != nil || c.Job == nil || c.Job.ID != parent {
		t.Fatalf("claim %+v %v", c.Job, err)
	}
	if _, err := rm.Start(h.ctx, parent, "w1"); err != nil {
		t.Fatal(err)
	}
	f := &engine.FanOut{BatchType: "go.piece", Batches: [][]byte{[]byte(`1`), []byte(`2`), []byte(`3`)}}
	// Not the holder: refused, nothing made.
	if _, err := rm.FanOut(h.ctx, parent, "w2", f, nil, nil); !errors.Is(err, commands.ErrNotClaimant) {
		t.Fatalf("fan-out by another worker: %v", err)
	}
	snap, err := rm.FanOut(h.ctx, parent, "w1", f, nil, nil)
	if err != nil || snap.Job.State != domain.StateWaiting || snap.Job.Fanout.Plan.Total != 3 {
		t.Fatalf("fan-out %+v %v", snap.Job, err)
	}
	j := h.waitState(parent, domain.StateSucceeded, 15*time.Second)
	if j.Fanout.Counts.Succeeded != 3 || ran.get("1")+ran.get("2")+ran.get("3") != 3 {
		t.Fatalf("parent %+v, runs %v", j.Fanout.Counts, ran.runs)
	}
	// The counts so far (job.fanin) are written when the counter looks
	// between two batches' ends, which is a matter of timing: left out.
	var moves []string
	for _, ev := range h.events(parent) {
		if ev.Type != domain.EvFanIn {
			moves = append(moves, ev.Type)
		}
	}
	if want := []string{domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvWaiting, domain.EvSucceeded}; fmt.Sprint(moves) != fmt.Sprint(want) {
		t.Fatalf("events of %s:\n got %v\nwant %v", parent, moves, want)
	}

	// Go coordinator, remote batch worker.
	h.runtime(engine.RuntimeConfig{Queue: "mix2", WorkerID: "go-coord", Handlers: map[string]engine.Handler{
		"go.coord": func(context.Context, *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{BatchType: "remote.piece", Batches: [][]byte{[]byte(`"a"`), []byte(`"b"`)}}
		}}})
	parent2 := h.submit(commands.SubmitRequest{Type: "go.coord", Queue: "mix2"}).Job.ID
	sc := engine.Scope{Worker: "w3", Queues: []string{"mix2"}, BatchTypes: []string{"remote.piece"}}
	for i := 0; i < 2; i++ {
		got, err := rm.ClaimWork(h.ctx, sc, 10*time.Second)
		if err != nil || got.Batch == nil || got.Job != nil || got.Batch.Item.Parent != parent2 {
			t.Fatalf("claim %d: %+v %v", i, got, err)
		}
		rep, err := rm.ReportBatch(h.ctx, got.Batch.ID, "w3", commands.Report{State: domain.StateSucceeded})
		if err != nil || rep.State != remote.BatchSucceeded || rep.ParentID != parent2 {
			t.Fatalf("report %+v %v", rep, err)
		}
	}
	j = h.waitState(parent2, domain.StateSucceeded, 15*time.Second)
	if j.Fanout.Counts.Succeeded != 2 {
		t.Fatalf("parent %+v", j.Fanout.Counts)
	}
	h.verify()
}
