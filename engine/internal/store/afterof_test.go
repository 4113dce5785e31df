package store

import (
	"testing"

	"github.com/jetflow/jetflow/internal/domain"
)

// TestAfterOfRecordBehind: a writer's record read back behind its own
// event (a replica that lags answered the read after a conflict, on a
// cluster) implies nothing. Before, a fan-out parent's job.waiting over a
// running record (no plan) dereferenced a nil Fanout (a worker's panic in
// the cluster soak), and a child's job.failed over a running record was
// published as a succeeded piece.
func TestAfterOfRecordBehind(t *testing.T) {
	plan := domain.FanoutPlan{Total: 3}
	running := &domain.Job{ID: "p", State: domain.StateRunning, Seq: 10}
	waiting := &domain.Event{Type: domain.EvWaiting, JobID: "p", To: domain.StateWaiting, Seq: 12, Plan: &plan}
	if got := afterOf(running, waiting); got != (followUpSet{}) {
		t.Fatalf("waiting over a running record behind it: %+v, want nothing", got)
	}
	child := &domain.Job{ID: "c", State: domain.StateRunning, Seq: 10, Spec: domain.Spec{Parent: "p"}}
	failed := &domain.Event{Type: domain.EvFailed, JobID: "c", To: domain.StateFailed, Seq: 11}
	if got := afterOf(child, failed); got != (followUpSet{}) {
		t.Fatalf("failed over a running record behind it: %+v, want nothing", got)
	}

	// At the event, or moved on past it: as before.
	parent := &domain.Job{ID: "p", State: domain.StateWaiting, Seq: 12, Fanout: &domain.Fanout{Plan: plan}}
	if got := afterOf(parent, waiting); got != (followUpSet{plan: true}) {
		t.Fatalf("waiting at its record: %+v", got)
	}
	parent.Seq = 14 // a later annotation
	if got := afterOf(parent, waiting); got != (followUpSet{plan: true}) {
		t.Fatalf("waiting under a record moved on: %+v", got)
	}
	ended := &domain.Job{ID: "c", State: domain.StateFailed, Seq: 11, Spec: domain.Spec{Parent: "p"}}
	if got := afterOf(ended, failed); got != (followUpSet{piece: true}) {
		t.Fatalf("failed at its record: %+v", got)
	}
	// A record in a state that awaits pieces without a plan implies no
	// plan (nothing to publish), and does not panic.
	bare := &domain.Job{ID: "p", State: domain.StateWaiting, Seq: 12}
	if got := afterOf(bare, waiting); got.plan {
		t.Fatalf("a plan implied without one: %+v", got)
	}
	if got := implied(bare, domain.EvWaiting); got.plan {
		t.Fatalf("a plan repeated without one: %+v", got)
	}
}
