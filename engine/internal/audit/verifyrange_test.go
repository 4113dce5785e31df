package audit_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine/internal/audit"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/streams"
)

func verifyRange(t *testing.T, js jetstream.JetStream, scope audit.Scope, since, until time.Time, pub string) *audit.Report {
	t.Helper()
	r, err := audit.VerifyRange(context.Background(), js, scope, since, until, pub)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A verification of the events stored from since to until: the events
// before since are outside it (a chain may start in the middle), a
// checkpoint whose range lies in it has its root recomputed, the read
// ends at until.
func TestAuditVerifyRange(t *testing.T) {
	env, js, _ := logOf(t, 3)
	ctx := context.Background()
	kp, pub := testKey(t)
	cp := maintenance.NewCheckpointer(storetest.Open(t, env.Client.Conn(), "checkpointer"), maintenance.CheckpointerConfig{Key: kp})
	// X is submitted before the first checkpoint and cancelled after it.
	x, err := env.Client.Submit(ctx, "audit.none", 0)
	if err != nil {
		t.Fatal(err)
	}
	ck1, err := cp.Checkpoint(ctx)
	if err != nil || ck1 == nil {
		t.Fatalf("checkpoint: %+v %v", ck1, err)
	}
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	last := func() *jetstream.RawStreamMsg {
		t.Helper()
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.GetMsg(ctx, info.State.LastSeq)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m1, err := s.GetLastMsgForSubject(ctx, streams.CheckpointSubject)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		j, err := env.Client.Submit(ctx, "audit.ok", 10+i)
		if err != nil {
			t.Fatal(err)
		}
		if done, err := env.Wait(j.ID, 30*time.Second); err != nil || done.State != jetflow.Succeeded {
			t.Fatalf("job %s: %v %+v", j.ID, err, done)
		}
	}
	env.Engine.Stop(ctx) // nothing else writes from here
	if _, err := env.Client.Cancel(ctx, x.ID, "done"); err != nil {
		t.Fatal(err)
	}
	ck2, err := cp.Checkpoint(ctx)
	if err != nil || ck2 == nil {
		t.Fatalf("checkpoint: %+v %v", ck2, err)
	}
	m2 := last() // the second checkpoint
	if m2.Subject != streams.CheckpointSubject || ck2.Checkpoint.UpTo != m2.Sequence-1 {
		t.Fatalf("the last event is %d on %s; the second checkpoint covers up to %d", m2.Sequence, m2.Subject, ck2.Checkpoint.UpTo)
	}
	first, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}

	// From the first checkpoint on: both checkpoints, the second's root
	// recomputed from the range, nothing found.
	r := verifyRange(t, js, audit.Scope{}, m1.Time, time.Time{}, pub)
	if !r.OK() || r.Events != int(m2.Sequence-m1.Sequence+1) || r.Checkpoints != 2 || r.Covered != ck2.Checkpoint.UpTo || r.Uncovered != 0 || !r.KeyPinned {
		t.Fatalf("since the first checkpoint: %+v, want %d events", r, m2.Sequence-m1.Sequence+1)
	}
	// Up to the first checkpoint: it alone, covering everything before it.
	r = verifyRange(t, js, audit.Scope{}, time.Time{}, m1.Time, pub)
	// (The engine may have appended between the checkpoint's read and its
	// append: uncovered.)
	if !r.OK() || r.Events != int(m1.Sequence) || r.Checkpoints != 1 || r.Covered != ck1.Checkpoint.UpTo || r.Uncovered != int(m1.Sequence-1-ck1.Checkpoint.UpTo) {
		t.Fatalf("until the first checkpoint: %+v, want %d events", r, m1.Sequence)
	}
	// X's events since the first checkpoint: its cancel, which chains to
	// its submit before the range, and the two checkpoints.
	r = verifyRange(t, js, audit.Scope{Job: x.ID}, m1.Time, time.Time{}, pub)
	if !r.OK() || r.Events != 3 || r.Checkpoints != 2 || r.Subjects != 2 {
		t.Fatalf("X since the first checkpoint: %+v", r)
	}
	// Ranges with nothing in them.
	for name, c := range map[string][2]time.Time{
		"until before the first event": {{}, first.Time.Add(-time.Second)},
		"since after the last":         {m2.Time.Add(time.Second), {}},
		"between two events":           {m1.Time.Add(time.Nanosecond), m1.Time.Add(time.Nanosecond)},
	} {
		if name == "between two events" {
			next, err := s.GetMsg(ctx, m1.Sequence+1)
			if err != nil {
				t.Fatal(err)
			}
			if !next.Time.After(c[0]) {
				continue // stored in the same nanosecond
			}
		}
		if r := verifyRange(t, js, audit.Scope{}, c[0], c[1], pub); !r.OK() || r.Events != 0 || r.Key != pub {
			t.Errorf("%s: %+v", name, r)
		}
	}

	// X's submit purged: the whole log names it, and the first
	// checkpoint's root; a range from the first checkpoint on does not
	// hold the submit, nor the first checkpoint's range.
	xs := msgs(t, js, x.ID)
	if len(xs) != 2 {
		t.Fatalf("X has %d events", len(xs))
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(xs[0].Subject), jetstream.WithPurgeSequence(xs[1].Sequence)); err != nil {
		t.Fatal(err)
	}
	r = verifyRange(t, js, audit.Scope{}, time.Time{}, time.Time{}, pub)
	want := []string{fmt.Sprintf("checkpoint %d ", m1.Sequence), fmt.Sprintf("removed %d %s", xs[1].Sequence, x.ID)}
	if got := findings(r); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("the whole log: %v, want %v", got, want)
	}
	if r := verifyRange(t, js, audit.Scope{}, m1.Time, time.Time{}, pub); !r.OK() || r.Checkpoints != 2 {
		t.Fatalf("since the first checkpoint, after the purge: %+v", r)
	}
}
