package maintenance_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// TestProjectorVerifiesWhileACascadeRuns: the Projector's cascade of a
// cancelled parent is held (as a cascade over a million children would
// take minutes), and meanwhile a job that only the log has (its writer
// died after the append) is repaired: the loop goes on beside the
// cascade. The parent's event stays unacknowledged (the consumer's ack
// floor stays below it) until its cascade is done, so that a crash
// meanwhile leaves it, and the cascade, to the next Projector.
func TestProjectorVerifiesWhileACascadeRuns(t *testing.T) {
	srv := testkit.Server(t)
	st := storetest.Open(t, testkit.Conn(t, srv), "engine")
	ctx := testkit.Ctx(t)
	p := maintenance.NewProjector(st, maintenance.ProjectorConfig{Lag: 50 * time.Millisecond, Log: testkit.Logger(t)})
	holding := make(chan string, 8)
	release := make(chan struct{})
	maintenance.SetBeforeCascade(p, func(j *domain.Job) {
		holding <- j.ID
		<-release
	})
	startProjector(t, p)
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()

	parent, _ := submitWithChild(t, st)
	cancelled, err := st.Cancel(ctx, parent.ID, "the test")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-holding:
		if id != parent.ID {
			t.Fatalf("cascade of %s, want %s", id, parent.ID)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the Projector never cascaded the cancelled parent")
	}

	orphan := appendOrphan(t, st)
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
	waitAcked(t, p, cancelled.Job.Seq)
}

// TestProjectorCascadesBesideABatchThatFails: a parent cancelled by a
// writer that died before its cascade, in one batch with an event the
// Projector can never fold (a cancel of a job that was never submitted):
// the batch fails and comes again, and the parent's cascade runs all the
// same, at once, rather than wait for the bad event to be let go.
func TestProjectorCascadesBesideABatchThatFails(t *testing.T) {
	srv := testkit.Server(t)
	st := storetest.Open(t, testkit.Conn(t, srv), "engine")
	ctx := testkit.Ctx(t)
	parent, child := submitWithChild(t, st)
	now := time.Now().UTC()
	ev, err := commands.Cancel(parent, "a writer that died before its cascade", "test", now)
	if err != nil {
		t.Fatal(err)
	}
	w := streams.Writer{JS: st.JS()}
	if _, err := w.AppendAsync(streams.EventSubject(parent.Spec.Namespace, parent.Spec.Queue, parent.Spec.Type, parent.ID), ev, parent.Seq).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	ghost := domain.NewID()
	bad := &domain.Event{Type: domain.EvCancelled, JobID: ghost, Time: now, From: domain.StateQueued, To: domain.StateCancelled}
	if _, err := w.AppendAsync(streams.EventSubject(parent.Spec.Namespace, parent.Spec.Queue, parent.Spec.Type, ghost), bad, 0).Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// Started after both events: they come in one batch. A failed batch
	// comes again a minute later: the cascade must not wait for that.
	p := maintenance.NewProjector(st, maintenance.ProjectorConfig{Lag: 50 * time.Millisecond, Retry: time.Minute, Log: testkit.Logger(t)})
	startProjector(t, p)
	testkit.WaitFor(t, 20*time.Second, func() error {
		snap, err := st.Record(ctx, child.ID)
		if err != nil {
			return err
		}
		if snap.Job.State != domain.StateCancelled {
			return testkit.Errorf("the child is %s", snap.Job.State)
		}
		return nil
	})
}

func startProjector(t *testing.T, p *maintenance.Projector) {
	t.Helper()
	if err := p.Start(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background()) })
}

// waitAcked waits until the Projector's consumer acknowledged every event
// up to seq.
func waitAcked(t *testing.T, p *maintenance.Projector, seq uint64) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, func() error {
		floor, err := p.Floor(testkit.Ctx(t))
		if err != nil {
			return err
		}
		if floor < seq {
			return testkit.Errorf("ack floor %d, the event at %d", floor, seq)
		}
		return nil
	})
}

// submitWithChild submits a job no worker runs and a child linked to it.
func submitWithChild(t *testing.T, st *store.Store) (parent, child *domain.Job) {
	t.Helper()
	ctx := testkit.Ctx(t)
	p, err := st.Submit(ctx, &commands.SubmitRequest{Type: "no.worker"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := st.Submit(ctx, &commands.SubmitRequest{Type: "no.worker", Parent: p.Job.ID})
	if err != nil {
		t.Fatal(err)
	}
	return p.Job, c.Job
}

// appendOrphan appends a job.submitted with no record, as a writer killed
// after its append leaves it, and returns the job's id.
func appendOrphan(t *testing.T, st *store.Store) string {
	t.Helper()
	now := time.Now().UTC()
	spec, err := (&commands.SubmitRequest{Type: "orphan"}).Spec(now)
	if err != nil {
		t.Fatal(err)
	}
	id := domain.NewID()
	ev, err := commands.Submit(id, spec, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: st.JS()}).AppendAsync(streams.EventSubject(spec.Namespace, spec.Queue, spec.Type, id), ev, 0).Wait(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestProjectorHoldsItsAckUntilTheRepairIsDurable: under sync always the
// queue streams persist asynchronously (a power loss takes what they
// acknowledged in the last sync interval), so the Projector, having sent
// again the work item of a job whose writer died after its append,
// acknowledges that event only streams.AsyncDurableAfter later: a power
// loss before then finds the event unacknowledged, and the item is sent
// again.
func TestProjectorHoldsItsAckUntilTheRepairIsDurable(t *testing.T) {
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st, err := store.Open(ctx, testkit.Conn(t, srv), streams.Topology{Sync: streams.SyncAlways}, "engine")
	if err != nil {
		t.Fatal(err)
	}
	st.Log = testkit.Logger(t)
	if st.DurableAfter() != streams.AsyncDurableAfter {
		t.Fatalf("durable after %v under sync always", st.DurableAfter())
	}
	p := maintenance.NewProjector(st, maintenance.ProjectorConfig{Lag: 50 * time.Millisecond, Log: testkit.Logger(t)})
	startProjector(t, p)
	if err := st.Queues().Ensure(ctx, domain.DefaultQueue); err != nil { // as a submit makes it before its append
		t.Fatal(err)
	}
	orphan := appendOrphan(t, st)
	rec := func() (store.Snapshot, error) { return st.Record(ctx, orphan) }
	var sent time.Time
	testkit.WaitFor(t, 20*time.Second, func() error {
		qs, err := st.JS().Stream(ctx, streams.QueueStream(domain.DefaultQueue))
		if err != nil {
			return err
		}
		info, err := qs.Info(ctx, jetstream.WithSubjectFilter(streams.RunSubject(domain.DefaultQueue, "orphan")))
		if err != nil {
			return err
		}
		if len(info.State.Subjects) == 0 {
			return testkit.Errorf("no work item yet")
		}
		sent = time.Now()
		return nil
	})
	snap, err := rec()
	if err != nil {
		t.Fatal(err)
	}
	if floor, err := p.Floor(ctx); err != nil || floor >= snap.Job.Seq {
		t.Fatalf("ack floor %d (%v) as the item sent again at %d appeared", floor, err, snap.Job.Seq)
	}
	waitAcked(t, p, snap.Job.Seq)
	if held := time.Since(sent); held < streams.AsyncDurableAfter-500*time.Millisecond {
		t.Fatalf("acknowledged %v after the item was sent again, want about %v", held, streams.AsyncDurableAfter)
	}
}
