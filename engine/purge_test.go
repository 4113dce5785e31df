package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// cancelled submits a job and cancels it: a terminal job without a worker.
func (h *harness) cancelled() engine.Snapshot {
	h.t.Helper()
	sub := h.submit(commands.SubmitRequest{Type: "demo.idle"})
	snap, err := h.st.Cancel(h.ctx, sub.Job.ID, "test")
	if err != nil {
		h.t.Fatal(err)
	}
	return snap
}

func wantGone(t *testing.T, h *harness, id string) *commands.GoneError {
	t.Helper()
	if _, err := h.st.Record(h.ctx, id); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("record of purged job %s: %v", id, err)
	}
	_, err := h.st.Current(h.ctx, id)
	var gone *commands.GoneError
	if !errors.As(err, &gone) || gone.At.IsZero() {
		t.Fatalf("lookup of purged job %s: %v, want a GoneError with the purge time", id, err)
	}
	return gone
}

func TestPurgeDeletesTheRecordAndKeepsTheEvent(t *testing.T) {
	h := newHarness(t)
	snap := h.cancelled()
	id := snap.Job.ID
	before := time.Now()
	n, err := h.st.Purge(h.ctx, id, "retention")
	if err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	gone := wantGone(t, h, id)
	if gone.At.Before(before.Add(-time.Second)) || gone.Reason != "retention" {
		t.Fatalf("gone %+v", gone)
	}
	m, err := h.st.Events.GetLastMsgForSubject(h.ctx, streams.EventFilter(id))
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := streams.DecodeEvent(m.Data); err != nil || ev.Type != domain.EvPurged || ev.From != domain.StateCancelled {
		t.Fatalf("last event of the purged job: %+v, %v", ev, err)
	}
	// A second purge writes nothing.
	last := h.lastSeq()
	if _, err := h.st.Purge(h.ctx, id, "again"); !errors.Is(err, commands.ErrGone) {
		t.Fatalf("second purge: %v", err)
	}
	if h.lastSeq() != last {
		t.Fatal("a second purge wrote")
	}
	// The projector passes the job's events and does not bring it back.
	waitProjected(t, h, last)
	wantGone(t, h, id)
	rep, err := projectionsVerify(h)
	if err != nil || len(rep.Diffs) > 0 || rep.Purged != 1 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}

func TestPurgeRefusesAJobThatIsNotTerminal(t *testing.T) {
	h := newHarness(t)
	sub := h.submit(commands.SubmitRequest{Type: "demo.idle"})
	last := h.lastSeq()
	if _, err := h.st.Purge(h.ctx, sub.Job.ID, "retention"); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("purge of a queued job: %v", err)
	}
	if h.lastSeq() != last || h.get(sub.Job.ID).State != domain.StateQueued {
		t.Fatal("a refused purge wrote")
	}
}

// A purger that dies between its append and the deletion of the record:
// the Projector deletes the record, Load never rebuilds it.
func TestPurgedRecordLeftByACrashIsDeleted(t *testing.T) {
	h := newHarness(t)
	snap := h.cancelled()
	j := snap.Job
	ev, err := commands.Purge(j, nil, "crash", "test", time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.JobSubject(j), ev, j.Seq).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if _, err := h.st.Record(h.ctx, j.ID); !errors.Is(err, commands.ErrNotFound) {
			return fmt.Errorf("record still there: %v", err)
		}
		return nil
	})
	wantGone(t, h, j.ID)
	h.verify()
}

// waitProjected waits until the projector checked every event up to seq.
func waitProjected(t *testing.T, h *harness, seq uint64) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if _, last := h.eng.Projector.Stats(); last < seq {
			return fmt.Errorf("projector at %d, want %d", last, seq)
		}
		return nil
	})
}
