package store_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// A write with DeferRecord appends its event and leaves the record where it
// was: Record shows it as it is, Read folds the log into a queued record,
// and either WriteRecord or the job's next write (on the revision the
// record has) brings it up to the log. A record written meanwhile by
// another (Current's repair) makes WriteRecord read the job again.
func TestDeferRecord(t *testing.T) {
	st := storetest.Open(t, testkit.Conn(t, testkit.Server(t)), "test")
	ctx := testkit.Ctx(t)
	claim := func(snap store.Snapshot) store.Snapshot {
		t.Helper()
		next, _, err := st.Apply(ctx, "claim", snap, func(j *domain.Job) (*domain.Event, error) {
			return commands.Start(j, "w1", 1, time.Now().UTC())
		}, store.DeferRecord)
		if err != nil {
			t.Fatal(err)
		}
		if !next.Behind || next.Rev != snap.Rev || next.Job.State != domain.StateRunning {
			t.Fatalf("claimed: behind %v rev %d (was %d) %s", next.Behind, next.Rev, snap.Rev, next.Job.State)
		}
		rec, err := st.Record(ctx, snap.Job.ID)
		if err != nil || rec.Job.State != domain.StateQueued || rec.Rev != snap.Rev {
			t.Fatalf("record after a deferred claim: %v %s rev %d", err, rec.Job.State, rec.Rev)
		}
		read, err := st.Read(ctx, snap.Job.ID)
		if err != nil || read.Job.State != domain.StateRunning || read.Job.Worker != "w1" || !read.Behind || read.Rev != snap.Rev {
			t.Fatalf("read after a deferred claim: %v %+v behind %v", err, read.Job, read.Behind)
		}
		return next
	}
	submit := func() store.Snapshot {
		t.Helper()
		sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "defer"})
		if err != nil {
			t.Fatal(err)
		}
		return sub.Snapshot
	}

	// The record written later.
	a := claim(submit())
	written, err := st.WriteRecord(ctx, a)
	if err != nil || written.Behind || written.Rev <= a.Rev || written.Job.State != domain.StateRunning {
		t.Fatalf("write the record: %v behind %v rev %d", err, written.Behind, written.Rev)
	}
	if rec, _ := st.Record(ctx, a.Job.ID); rec.Job.State != domain.StateRunning || rec.Rev != written.Rev {
		t.Fatalf("record: %s rev %d", rec.Job.State, rec.Rev)
	}

	// The outcome's write folds the claim in.
	b := claim(submit())
	done, _, err := st.RecordOutcome(ctx, "complete", b, store.Attempt{Worker: "w1", Item: 1, Number: 1}, commands.Outcome{Kind: commands.Succeeded})
	if err != nil || done.Job.State != domain.StateSucceeded || done.Behind {
		t.Fatalf("outcome: %v %+v", err, done.Job)
	}
	if rec, _ := st.Record(ctx, b.Job.ID); rec.Job.State != domain.StateSucceeded || rec.Job.Events != 3 {
		t.Fatalf("record after the outcome: %s, %d events", rec.Job.State, rec.Job.Events)
	}

	// Current writes it first: WriteRecord reads the job again.
	c := claim(submit())
	if cur, err := st.Current(ctx, c.Job.ID); err != nil || cur.Job.State != domain.StateRunning {
		t.Fatalf("current: %v", err)
	}
	again, err := st.WriteRecord(ctx, c)
	if err != nil || again.Behind || again.Job.State != domain.StateRunning || again.Job.Seq != c.Job.Seq {
		t.Fatalf("write a record written meanwhile: %v %+v", err, again)
	}
	// Another program's message last on a queued job's subject: the record
	// is shown as it is.
	d := submit()
	if _, err := st.JS().Publish(ctx, streams.JobSubject(d.Job), []byte("not an event")); err != nil {
		t.Fatal(err)
	}
	if read, err := st.Read(ctx, d.Job.ID); err != nil || read.Job.State != domain.StateQueued || read.Behind {
		t.Fatalf("read under a foreign message: %v %+v", err, read.Job)
	}
	if n := st.Repairs().Load(); n != 0 {
		t.Fatalf("%d repairs counted for records written ahead of their writer", n)
	}
}

// Read shows a queued record as it is when the log cannot be read (its
// stream gone here; a leader election on a cluster): the record was read,
// so the job is shown, not an error.
func TestReadQueuedRecordLogUnread(t *testing.T) {
	st := storetest.Open(t, testkit.Conn(t, testkit.Server(t)), "test")
	ctx := testkit.Ctx(t)
	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "unread"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.JS().DeleteStream(ctx, streams.EventsStream); err != nil {
		t.Fatal(err)
	}
	read, err := st.Read(ctx, sub.Job.ID)
	if err != nil || read.Job.State != domain.StateQueued || read.Rev != sub.Rev || read.Behind {
		t.Fatalf("read with the log unread: %v %+v", err, read)
	}
}

// An outcome appended whose record cannot be written (here: the jobs
// bucket refuses a record that large) stands: RecordOutcome returns it as
// written, its record Behind, settles the attempt, and a later Current
// writes the record from the log.
func TestOutcomeStandsWithoutItsRecord(t *testing.T) {
	st := storetest.Open(t, testkit.Conn(t, testkit.Server(t)), "test")
	ctx := testkit.Ctx(t)
	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "big"})
	if err != nil {
		t.Fatal(err)
	}
	claimed, _, err := st.Apply(ctx, "claim", sub.Snapshot, func(j *domain.Job) (*domain.Event, error) {
		return commands.Start(j, "w1", 1, time.Now().UTC())
	})
	if err != nil {
		t.Fatal(err)
	}
	kvs, err := st.JS().Stream(ctx, "KV_"+streams.JobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := kvs.CachedInfo().Config
	small := cfg
	small.MaxMsgSize = 2000
	if _, err := st.JS().UpdateStream(ctx, small); err != nil {
		t.Fatal(err)
	}
	result := []byte(`"` + strings.Repeat("x", 3000) + `"`)
	var settled *domain.Job
	done, ev, err := st.RecordOutcome(ctx, "complete", claimed, store.Attempt{Worker: "w1", Item: 1, Number: 1,
		Settle: func(j *domain.Job) { settled = j }}, commands.Outcome{Kind: commands.Succeeded, Result: result})
	if err != nil || ev == nil || ev.Type != domain.EvSucceeded || done.Job.State != domain.StateSucceeded || !done.Behind || settled == nil {
		t.Fatalf("outcome without its record: %v %+v %+v behind %v settled %v", err, ev, done.Job, done.Behind, settled != nil)
	}
	if rec, _ := st.Record(ctx, sub.Job.ID); rec.Job.State != domain.StateRunning {
		t.Fatalf("record %s, want running (not written)", rec.Job.State)
	}
	if _, err := st.JS().UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	cur, err := st.Current(ctx, sub.Job.ID)
	if err != nil || cur.Job.State != domain.StateSucceeded || string(cur.Job.Result) != string(result) {
		t.Fatalf("current after: %v %s", err, cur.Job.State)
	}
	if rec, _ := st.Record(ctx, sub.Job.ID); rec.Job.State != domain.StateSucceeded {
		t.Fatalf("record %s after Current, want succeeded", rec.Job.State)
	}
}
