package maintenance_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// TestProjectorVerifiesWhileACascadeRuns: the Projector's cascade of a
// cancelled job is held (as a cascade over a million children would take
// minutes), and meanwhile a job that only the log has (its writer died
// after the append) is repaired: the loop goes on beside the cascade. The
// cancelled job's event stays unacknowledged (the consumer's ack floor
// stays below it) until its cascade is done, so that a crash meanwhile
// leaves it, and the cascade, to the next Projector.
func TestProjectorVerifiesWhileACascadeRuns(t *testing.T) {
	srv := testkit.Server(t)
	nc := testkit.Conn(t, srv)
	st := storetest.Open(t, nc, "engine")
	ctx := testkit.Ctx(t)
	p := maintenance.NewProjector(st, maintenance.ProjectorConfig{Lag: 50 * time.Millisecond, Log: testkit.Logger(t)})
	holding := make(chan string, 8)
	release := make(chan struct{})
	maintenance.SetBeforeCascade(p, func(jobs []*domain.Job) {
		for _, j := range jobs {
			holding <- j.ID
		}
		<-release
	})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "no.worker"})
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := st.Cancel(ctx, sub.Job.ID, "the test")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-holding:
		if id != sub.Job.ID {
			t.Fatalf("cascade of %s, want %s", id, sub.Job.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the Projector never cascaded the cancelled job")
	}

	now := time.Now().UTC()
	spec, err := (&commands.SubmitRequest{Type: "orphan"}).Spec(now)
	if err != nil {
		t.Fatal(err)
	}
	orphan := domain.NewID()
	ev, err := commands.Submit(orphan, spec, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: st.JS()}).AppendAsync(streams.EventSubject(spec.Namespace, spec.Queue, spec.Type, orphan), ev, 0).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		snap, err := st.Record(ctx, orphan)
		if errors.Is(err, commands.ErrNotFound) {
			return testkit.Errorf("the orphan has no record yet")
		}
		if err != nil {
			return err
		}
		if snap.Job.State != domain.StateQueued {
			return testkit.Errorf("the orphan is %s", snap.Job.State)
		}
		return nil
	})
	if floor, err := p.Floor(ctx); err != nil || floor >= cancelled.Job.Seq {
		t.Fatalf("ack floor %d (%v) while the cascade of the event at %d is held", floor, err, cancelled.Job.Seq)
	}
	released = true
	close(release)
	testkit.WaitFor(t, 20*time.Second, func() error {
		floor, err := p.Floor(ctx)
		if err != nil {
			return err
		}
		if floor < cancelled.Job.Seq {
			return testkit.Errorf("ack floor %d, the cancel at %d", floor, cancelled.Job.Seq)
		}
		return nil
	})
}
