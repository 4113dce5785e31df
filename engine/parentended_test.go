package engine_test

import (
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/streams"
)

// ParentEnded, asked at every child's claim, follows the parent's
// transitions in the log, also past the parent's state it remembers, and
// past a record the log is ahead of (a writer between its append and its
// record).
func TestParentEndedFollowsTheLog(t *testing.T) {
	h := newHarness(t)
	h.eng.Leader.Stop(h.ctx) // no reaper or counter moves anything here
	parent := h.submit(commands.SubmitRequest{Type: "nobody", Queue: "parked"})
	child := h.submit(commands.SubmitRequest{Type: "nobody", Queue: "parked", Parent: parent.Job.ID})
	if engine.Internal(h.st).ParentEnded(h.ctx, child.Job) {
		t.Fatal("a queued parent ended")
	}
	// A cancel appended to the parent's subject, its record left behind.
	cur := h.get(parent.Job.ID)
	ev, err := commands.Cancel(cur, "by hand", "test", time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.JobSubject(cur), ev, cur.Seq).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	// (The Projector repairs the record after its lag; asked at once, the
	// record is most likely still behind: either way the answer is the
	// log's.)
	if !engine.Internal(h.st).ParentEnded(h.ctx, child.Job) {
		t.Fatal("a parent cancelled in the log, its record behind, did not end")
	}
	// A parent that succeeded keeps its children running; the record's
	// head is read once, the later transitions from the log.
	p2 := h.submit(commands.SubmitRequest{Type: "nobody", Queue: "parked"})
	c2 := h.submit(commands.SubmitRequest{Type: "nobody", Queue: "parked", Parent: p2.Job.ID})
	if engine.Internal(h.st).ParentEnded(h.ctx, c2.Job) {
		t.Fatal("a queued parent ended")
	}
	if _, err := h.st.Cancel(h.ctx, p2.Job.ID, "now"); err != nil {
		t.Fatal(err)
	}
	if !engine.Internal(h.st).ParentEnded(h.ctx, c2.Job) {
		t.Fatal("a cancelled parent did not end")
	}
	if engine.Internal(h.st).ParentEnded(h.ctx, h.get(parent.Job.ID)) {
		t.Fatal("a job without a parent has one that ended")
	}
}
