package process

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// The engine that admits SIGKILLed inside its first admission
// (JETFLOW_CRASH_AT=admit:<point>), with NATS living on: job A's
// job.admitted is in the log, and its record and work item are written or
// not, as the point says; job B, submitted before, waits. The engine
// started in its place counts A's slot from the log, the Projector
// completes A's record and work item, and B is admitted only once A has
// ended: each job runs once and succeeds, one slot held at a time.
//
// Both jobs are submitted while no engine runs (the one that set the
// limits stopped), so that the engine with the crash point finds both
// pending and admits A, the older, at once: it dies before B has waited
// the second after which a hold (job.pending) is written.
func TestAdmissionCrashPoints(t *testing.T) {
	for _, tc := range []struct {
		point  string
		record domain.State // A's record when the engine died
		items  uint64       // work items in the queue when the engine died
	}{
		// Queued in the log only: the record says pending, no item.
		{"admit:appended", domain.StatePending, 0},
		// Queued in the log and the record, no item.
		{"admit:projected", domain.StateQueued, 0},
		// Queued, with its item: only the admitter's own report is lost.
		{"admit:dispatched", domain.StateQueued, 1},
	} {
		t.Run(strings.ReplaceAll(tc.point, ":", "-"), func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			ctx := testkit.Ctx(t)
			s := startOnNATS(t)
			lim := jetflow.QueueLimits{MaxRunning: 1}
			setup := s.startEngine("serve 1")
			s.setLimits(quotaQueue, lim)
			setup.Signal(t, syscall.SIGTERM) // gives up the lead at once
			if code, sig := setup.WaitExit(t, 30*time.Second); code != 0 || sig != 0 {
				t.Fatalf("serve 1 exited with code %d, signal %v", code, sig)
			}
			w := watchSlots(t, s, quotaQueue, lim)
			a := s.submitIn(quotaQueue, "ann", 0.5)
			b := s.submitIn(quotaQueue, "bob", 0.2)
			s.wantState(a.ID, jetflow.Pending) // no admitter runs
			s.wantState(b.ID, jetflow.Pending)

			crashed := s.startEngineEnv("serve 2 (crash at "+tc.point+")", []string{"JETFLOW_CRASH_AT=" + tc.point})
			wantKilled(t, crashed)
			killed := time.Now()

			// What it left, no engine running: A's admission in the log,
			// by the engine that died, and its record and item as the
			// point says; B untouched.
			evA := s.wantEvents(a.ID, evSubmitted, domain.EvAdmitted)
			if pid := fmt.Sprintf("-%d", crashed.Cmd.Process.Pid); !strings.HasSuffix(evA[1].Actor, pid) {
				t.Fatalf("A admitted by %q, not by the engine that crashed", evA[1].Actor)
			}
			st := testkit.StoreOf(t, s.client)
			if snap, err := st.Record(ctx, a.ID); err != nil || snap.Job.State != tc.record {
				t.Fatalf("A's record at the crash: %+v, %v; want %s", snap.Job, err, tc.record)
			}
			if n := s.queueItems(quotaQueue); n != tc.items {
				t.Fatalf("%d work items at the crash, want %d", n, tc.items)
			}
			s.wantEvents(b.ID, evSubmitted)
			s.wantState(b.ID, jetflow.Pending)

			third := s.startEngine("serve 3")
			if s.leaderOf(crashed, third) != third {
				t.Fatal("serve 3 does not lead")
			}
			leading := time.Now()
			// From the log: A holds the only slot, B waits for it. The
			// admitter's rebuild brings A's record up to the log and
			// dispatches A's item again, once (the item's message id; the
			// killed engine's Projector held those events for its ack
			// wait, a minute), and it says why B waits.
			users := map[string]commands.Count{
				commands.SlotUser(domain.DefaultNS, "ann"): {Holding: 1},
				commands.SlotUser(domain.DefaultNS, "bob"): {Pending: 1},
			}
			s.waitCounts(quotaQueue, 1, 1, users, 30*time.Second)
			s.waitState(a.ID, jetflow.Queued)
			testkit.WaitFor(t, 10*time.Second, func() error {
				if n := s.queueItems(quotaQueue); n != 1 {
					return testkit.Errorf("%d work items in the queue, want A's", n)
				}
				return nil
			})
			s.waitHeld(b.ID)
			s.waitCounts(quotaQueue, 1, 1, users, 10*time.Second)
			s.wantState(a.ID, jetflow.Queued)
			s.wantEvents(a.ID, evSubmitted, domain.EvAdmitted)

			// A worker with room for four: the limit, not the worker,
			// keeps B out until A has ended.
			s.worker("W1", nil, "--concurrency", "4")
			for _, id := range []string{a.ID, b.ID} {
				done := testkit.WaitTerminal(t, s.client, id, 20*time.Second)
				if done.State != jetflow.Succeeded || done.Worker != "W1" || done.Attempts != 1 {
					t.Fatalf("job %s %s under %q after %d attempts", id, done.State, done.Worker, done.Attempts)
				}
			}
			evA = s.wantEvents(a.ID, evSubmitted, domain.EvAdmitted, evStarted, evSucceeded)
			evB := s.wantEvents(b.ID, evSubmitted, domain.EvPending, domain.EvAdmitted, evStarted, evSucceeded)
			if evB[2].Seq < evA[3].Seq {
				t.Fatalf("B admitted at seq %d, before A ended at seq %d", evB[2].Seq, evA[3].Seq)
			}
			pid := fmt.Sprintf("-%d", third.Cmd.Process.Pid)
			for _, e := range evB[1:3] {
				if !strings.HasSuffix(e.Actor, pid) {
					t.Fatalf("B's %s written by %q, not by serve 3", e.Type, e.Actor)
				}
			}
			w.wantMax(1, 1)
			s.waitCounts(quotaQueue, 0, 0, map[string]commands.Count{}, 10*time.Second)
			s.waitDrained(quotaQueue)
			s.wantEvents(a.ID, evSubmitted, domain.EvAdmitted, evStarted, evSucceeded) // nothing written since
			s.wantEvents(b.ID, evSubmitted, domain.EvPending, domain.EvAdmitted, evStarted, evSucceeded)
			s.verifySlots()
			t.Logf("serve 3 led %s after the kill; %s in all", leading.Sub(killed).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		})
	}
}

// queueItems is how many messages (work items, batches, schedules) the
// queue's streams hold; 0 if it has none yet.
func (s *system) queueItems(queue string) uint64 {
	s.t.Helper()
	ctx := testkit.Ctx(s.t)
	qss, err := streams.QueueStreams(ctx, testkit.StoreOf(s.t, s.client).JS, queue)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0
	}
	if err != nil {
		s.t.Fatal(err)
	}
	var n uint64
	for _, qs := range qss.All() {
		info, err := qs.Info(ctx)
		if err != nil {
			s.t.Fatal(err)
		}
		n += info.State.Msgs
	}
	return n
}
