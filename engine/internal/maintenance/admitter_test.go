package maintenance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// TestAdmitterLooksUpTheEndOfAJobBeingLookedUp: during a rebuild the last
// event of a queued job does not say enough (no user), so the job is looked
// up after the batch; its end, in the same batch, must be looked up too, or
// the record (a moment behind the log: it says queued) holds the slot for
// good although the log says the job is cancelled.
func TestAdmitterLooksUpTheEndOfAJobBeingLookedUp(t *testing.T) {
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "client")
	eng := engine.NewEngine(testkit.Store(t, testkit.Conn(t, srv), "engine"),
		engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Log: testkit.Logger(t)})
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	lim := domain.QueueLimits{MaxRunning: 1}
	if _, err := st.SetQueueLimits(ctx, "lk", lim); err != nil {
		t.Fatal(err)
	}
	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "x", Queue: "lk"})
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Job.ID
	var j *domain.Job
	testkit.WaitFor(t, 10*time.Second, func() error {
		snap, err := st.Record(ctx, id)
		if err != nil {
			return err
		}
		if j = snap.Job; j.State != domain.StateQueued {
			return fmt.Errorf("job %s is %s, want queued", id, j.State)
		}
		return nil
	})
	eng.Stop(context.Background()) // no projector: the record stays behind the log
	ev, err := commands.Cancel(j, "test", "test", time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: st.JS}).AppendAsync(streams.JobSubject(j), ev, j.Seq).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	var evs []*domain.Event
	if err := st.History(ctx, id, 0, false, func(e *domain.Event) error { evs = append(evs, e); return nil }); err != nil {
		t.Fatal(err)
	}
	last2 := evs[len(evs)-2:] // job.admitted (the rebuild's last-per-subject), job.cancelled (live)
	t.Logf("batch: %s@%d %s@%d", last2[0].Type, last2[0].Seq, last2[1].Type, last2[1].Seq)
	q := commands.NewAdmission("lk", lim)
	if err := maintenance.ObserveBatch(ctx, storetest.Open(t, testkit.Conn(t, srv), "observer"), q, last2); err != nil {
		t.Fatal(err)
	}
	if c := q.Counts(); c.Holding != 0 {
		t.Fatalf("log says cancelled, admission holds %d slot(s): %+v", c.Holding, c)
	}
}
