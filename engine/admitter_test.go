package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// TestAdmitterLooksUpTheEndOfAJobBeingLookedUp: during a rebuild the last
// event of a queued job does not say enough (no user), so the job is looked
// up after the batch; its end, in the same batch, must be looked up too, or
// the record (a moment behind the log: it says queued) holds the slot for
// good although the log says the job is cancelled.
func TestAdmitterLooksUpTheEndOfAJobBeingLookedUp(t *testing.T) {
	h := newHarness(t)
	lim := domain.QueueLimits{MaxRunning: 1}
	if _, err := h.st.SetQueueLimits(h.ctx, "lk", lim); err != nil {
		t.Fatal(err)
	}
	id := h.submit(commands.SubmitRequest{Type: "x", Queue: "lk"}).Job.ID
	j := h.waitState(id, domain.StateQueued, 10*time.Second)
	h.eng.Stop(context.Background()) // no projector: the record stays behind the log
	ev, err := commands.Cancel(j, "test", "test", time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.W.AppendAsync(streams.JobSubject(j), ev, j.Seq).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	evs := h.events(id)
	last2 := evs[len(evs)-2:] // job.admitted (the rebuild's last-per-subject), job.cancelled (live)
	t.Logf("batch: %s@%d %s@%d", last2[0].Type, last2[0].Seq, last2[1].Type, last2[1].Seq)
	q := commands.NewAdmission("lk", lim)
	if err := engine.ObserveBatch(h.ctx, h.st, q, last2); err != nil {
		t.Fatal(err)
	}
	if c := q.Counts(); c.Holding != 0 {
		t.Fatalf("log says cancelled, admission holds %d slot(s): %+v", c.Holding, c)
	}
}
