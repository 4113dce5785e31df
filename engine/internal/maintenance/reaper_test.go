package maintenance_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// TestReaperFollowingTheLogReadsOnlyWhatMayBeDue: a Reaper that follows the
// log reads the whole bucket at its first pass; after that it reads only
// the jobs that moved or whose deadline passed, never the ones that ended,
// and still ends what is due.
func TestReaperFollowingTheLogReadsOnlyWhatMayBeDue(t *testing.T) {
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := storetest.Open(t, testkit.Conn(t, srv), "client")
	est := storetest.Open(t, testkit.Conn(t, srv), "engine")
	submit := func(req commands.SubmitRequest) store.Snapshot {
		t.Helper()
		sub, err := st.Submit(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		return store.Snapshot{Job: sub.Job, Rev: sub.Rev}
	}
	get := func(id string) *domain.Job {
		t.Helper()
		snap, err := st.Current(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Job
	}

	// 50 jobs that ended, and one queued with no deadline.
	for i := 0; i < 50; i++ {
		cur := submit(commands.SubmitRequest{Type: "ended"})
		if _, _, err := st.Apply(ctx, "cancel", cur, func(j *domain.Job) (*domain.Event, error) {
			return commands.Cancel(j, "test", "test", time.Now().UTC())
		}); err != nil {
			t.Fatal(err)
		}
	}
	patient := submit(commands.SubmitRequest{Type: "nobody"})

	rp := followingReaper(t, est, time.Hour)

	// The first pass reads the bucket; once the feed read to the log's
	// end, passes read nothing: the patient job has no deadline.
	if err := rp.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		f0, _ := rp.Reads()
		if err := rp.Scan(ctx); err != nil {
			return err
		}
		if f1, _ := rp.Reads(); f1 != f0 {
			return fmt.Errorf("the pass read the whole bucket (%d)", f1)
		}
		return nil
	})
	full, looks := rp.Reads()
	if looks != 0 {
		t.Fatalf("read %d jobs one by one, with none that moved since the first pass", looks)
	}

	// A queued job with a queue timeout and a running job nobody runs.
	queued := submit(commands.SubmitRequest{Type: "nobody", QueueTimeout: dur(200 * time.Millisecond)})
	running := submit(commands.SubmitRequest{Type: "orphaned", Timeout: dur(200 * time.Millisecond)})
	if _, _, err := st.Apply(ctx, "claim", running, func(j *domain.Job) (*domain.Event, error) {
		return commands.Start(j, "dead", 1, time.Now().UTC())
	}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if err := rp.Scan(ctx); err != nil {
			return err
		}
		for _, id := range []string{queued.Job.ID, running.Job.ID} {
			if j := get(id); !j.State.Terminal() {
				return fmt.Errorf("%s (%s) is %s", id, j.Spec.Type, j.State)
			}
		}
		return nil
	})
	for id, code := range map[string]string{running.Job.ID: commands.CodeTimeout, queued.Job.ID: "QUEUE_TIMEOUT"} {
		if j := get(id); j.State != domain.StateFailed || j.Error == nil || j.Error.Code != code {
			t.Fatalf("%s: %s %+v", id, j.State, j.Error)
		}
	}
	if j := get(patient.Job.ID); j.State != domain.StateQueued {
		t.Fatalf("patient job %s", j.State)
	}
	f, n := rp.Reads()
	if f != full {
		t.Fatalf("the bucket was read %d more times", f-full)
	}
	// Each of the two is read once it moved (submitted; claimed), and again
	// once past its deadline (the last read, from which it is reaped);
	// never the 50 that ended nor the patient one.
	if n < 2 || n > 8 {
		t.Fatalf("read %d jobs one by one, want 2 to 8", n)
	}

	// A new leader term (Start) begins with a read of the whole bucket.
	if err := rp.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rp.Stop(ctx) })
	testkit.WaitFor(t, 10*time.Second, func() error {
		if f, _ := rp.Reads(); f != full+1 {
			return fmt.Errorf("%d reads of the whole bucket, want %d", f, full+1)
		}
		return nil
	})
}

func dur(d time.Duration) *commands.Duration { v := commands.Duration(d); return &v }

// TestReaperFindsWhatItsListMissed: a job whose move the list never saw
// (the StatsKeeper's checkpoint was past it when this term began) and whose
// record was behind its event at the term's first read is found by a later
// read of the whole bucket, once the Projector repaired the record.
func TestReaperFindsWhatItsListMissed(t *testing.T) {
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := storetest.Open(t, testkit.Conn(t, srv), "client")
	est := storetest.Open(t, testkit.Conn(t, srv), "engine")
	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "orphaned", Timeout: dur(200 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	// Its claim's event lands; its record's write is lost (its writer died).
	ev, err := commands.Start(sub.Job, "dead", 1, time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	seq, err := (streams.Writer{JS: st.JS()}).AppendAsync(streams.JobSubject(sub.Job), ev, sub.Job.Seq).Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// An earlier term's StatsKeeper folded it and wrote its checkpoint.
	first := maintenance.NewStatsKeeper(est, maintenance.StatsConfig{Flush: 20 * time.Millisecond, Log: testkit.Logger(t)})
	if err := first.Start(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if f := first.Folded(); f < seq {
			return fmt.Errorf("folded %d of %d", f, seq)
		}
		return nil
	})
	first.Stop(ctx)

	rp := followingReaper(t, est, time.Second)
	if err := rp.Scan(ctx); err != nil { // the term's first read: the record says queued
		t.Fatal(err)
	}
	if snap, err := st.Record(ctx, sub.Job.ID); err != nil || snap.Job.State != domain.StateQueued {
		t.Fatalf("record before the repair: %v", err)
	}
	proj := maintenance.NewProjector(est, maintenance.ProjectorConfig{Lag: 50 * time.Millisecond, Log: testkit.Logger(t)})
	if err := proj.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proj.Stop(ctx) })
	testkit.WaitFor(t, 15*time.Second, func() error {
		if err := rp.Scan(ctx); err != nil {
			return err
		}
		snap, err := st.Current(ctx, sub.Job.ID)
		if err != nil {
			return err
		}
		if j := snap.Job; j.State != domain.StateFailed || j.Error == nil || j.Error.Code != commands.CodeTimeout {
			return fmt.Errorf("job %s %+v", j.State, j.Error)
		}
		return nil
	})
	// Found by a read of the whole bucket: the list never held it to look at.
	if f, looks := rp.Reads(); f < 2 || looks != 0 {
		t.Fatalf("%d reads of the whole bucket and %d looks, want a later read that found it, no look", f, looks)
	}
}

// followingReaper is a Reaper following the log through a StatsKeeper it
// starts (stopped when the test ends); its passes run when the test calls
// Scan (Interval an hour), with a grace of 100 ms.
func followingReaper(t *testing.T, st *store.Store, reconcile time.Duration) *maintenance.Reaper {
	t.Helper()
	keeper := maintenance.NewStatsKeeper(st, maintenance.StatsConfig{Flush: 20 * time.Millisecond, Log: testkit.Logger(t)})
	rp := maintenance.NewReaper(st, maintenance.ReaperConfig{Interval: time.Hour, Grace: 100 * time.Millisecond,
		StallTimeout: time.Hour, Reconcile: reconcile, Log: testkit.Logger(t)})
	rp.Follow(keeper)
	if err := keeper.Start(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { keeper.Stop(context.Background()) })
	return rp
}
