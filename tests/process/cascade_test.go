package process

import (
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// A fan-out parent cancelled by a CLI killed right after its job.cancelled
// (cancel:appended: the writer's cascade died with it), then an engine
// killed in its Projector's repeat of the cascade, once one child's cancel
// was written (cascade:child; the cascade cancels 32 at once, so most of
// the 100 are not reached). The children all run: none is claimed again,
// where a worker would find its parent ended. The Projector acknowledges
// the parent's event only once its cascade is done, so the next engine's
// Projector repeats it: every child ends cancelled, none is left running.
// (The engines run with a 3 s ack wait, JETFLOW_PROJECTOR_ACK_WAIT, so
// that the event comes again within seconds, not a minute.)
func TestCascadeCrashPoint(t *testing.T) {
	t.Parallel()
	s := startOnNATS(t)
	setup := s.startEngine("serve 1")
	s.worker("W", nil, "--concurrency", "100")
	ctx := testkit.Ctx(t)
	parent, err := s.client.Submit(ctx, "demo.fanout", map[string]any{"children": 100, "child_seconds": 600})
	if err != nil {
		t.Fatal(err)
	}
	s.waitState(parent.ID, jetflow.Waiting)
	kids, err := s.client.Children(ctx, parent.ID)
	if err != nil || len(kids) != 100 {
		t.Fatalf("children: %v, %d", err, len(kids))
	}
	for _, k := range kids {
		s.waitRunning(k.ID, "W")
	}
	// No engine from here until serve 2: nobody repeats a cascade.
	setup.Signal(t, syscall.SIGTERM)
	if code, sig := setup.WaitExit(t, 30*time.Second); code != 0 || sig != 0 {
		t.Fatalf("serve 1 exited with code %d, signal %v", code, sig)
	}
	if _, sig, out := s.cli([]string{"JETFLOW_CRASH_AT=cancel:appended"}, "cancel", parent.ID); sig != syscall.SIGKILL {
		t.Fatalf("cancel was not killed:\n%s", out)
	}
	for _, k := range kids {
		if j, err := s.client.Get(ctx, k.ID); err != nil || j.State.Terminal() {
			t.Fatalf("child %s before any engine ran again: %v %+v", k.ID, err, j)
		}
	}
	// A short ack wait: serve 2's batch comes again to serve 3 within seconds.
	ackWait := "JETFLOW_PROJECTOR_ACK_WAIT=3s"
	wantKilled(t, s.startEngineEnv("serve 2 (crash at cascade:child)", []string{"JETFLOW_CRASH_AT=cascade:child", ackWait}))
	live := 0 // the children serve 2's cascade did not reach: what this test is about
	for _, k := range kids {
		j, err := s.client.Get(ctx, k.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !j.State.Terminal() {
			live++
		}
	}
	if live == 0 {
		t.Fatal("serve 2's cascade reached every child before it was killed: nothing left to repeat")
	}
	t.Logf("%d of %d children left running by serve 2", live, len(kids))
	// serve 2's Projector never acknowledged the parent's event: it comes
	// again to serve 3's once its ack wait is over.
	s.startEngineEnv("serve 3", []string{ackWait}).WaitOutput(t, 30*time.Second, "jetflow is running")
	waitAllCancelled(t, s.client, kids, 60*time.Second)
	if j := testkit.WaitTerminal(t, s.client, parent.ID, 10*time.Second); j.State != jetflow.Cancelled {
		t.Fatalf("parent %s", j.State)
	}
	s.verify()
}

// A coordinator's worker killed once the children are made and before
// the parent waits for them (fanout:made): the parent has no plan, and its
// children run on another worker. Cancelled then, the parent's cascade
// finds them by the piece.making its attempt wrote before the first child,
// and cancels each; before, they ran on to their end.
func TestCoordinatorKilledAfterMakingChildren(t *testing.T) {
	t.Parallel()
	s := startSystemHTTP(t, true)
	// A long lease: the parent stays running, held by the dead worker, so
	// no other worker runs it again (which would make it wait, plan and
	// all) before it is cancelled.
	w1 := s.worker("W1", []string{"JETFLOW_CRASH_AT=fanout:made"}, "--lease", "2m")
	ctx := testkit.Ctx(t)
	parent, err := s.client.Submit(ctx, "demo.fanout", map[string]any{"children": 20, "child_seconds": 600})
	if err != nil {
		t.Fatal(err)
	}
	wantKilled(t, w1)
	kids, err := s.client.Children(ctx, parent.ID)
	if err != nil || len(kids) != 20 {
		t.Fatalf("children: %v, %d", err, len(kids))
	}
	// W2 runs the children only: a worker that ran demo.fanout too would
	// take the parent's item once its short lease (1 s, the consumer's ack
	// wait from then on: the workers of a type share it) let it write off
	// W1's, and run the parent again.
	s.worker("W2", nil, "--concurrency", "20", "--exec", "demo.sleep=sleep 600")
	for _, k := range kids {
		s.waitRunning(k.ID, "W2")
	}
	if j, err := s.client.Get(ctx, parent.ID); err != nil || j.State != jetflow.Running || j.Worker != "W1" {
		t.Fatalf("parent before its cancel: %v %+v", err, j)
	}
	// The parent's pieces, over HTTP: the children its attempt made,
	// though it has no plan.
	res, err := http.Get("http://" + s.http + "/api/v1/jobs/" + parent.ID + "/pieces")
	if err != nil {
		t.Fatal(err)
	}
	var pieces struct {
		Kind   string `json:"kind"`
		Total  int    `json:"total"`
		Pieces []struct {
			Piece int    `json:"piece"`
			State string `json:"state"`
			JobID string `json:"job_id"`
		} `json:"pieces"`
	}
	err = json.NewDecoder(res.Body).Decode(&pieces)
	res.Body.Close()
	if err != nil || res.StatusCode != http.StatusOK || pieces.Kind != "children" || pieces.Total != 20 || len(pieces.Pieces) != 20 {
		t.Fatalf("pieces: %d %v %+v", res.StatusCode, err, pieces)
	}
	for i, p := range pieces.Pieces {
		// Its state is the gateway's index's, which may lag: not ended.
		if p.Piece != i+1 || p.JobID != kids[i].ID || slices.Contains([]string{"succeeded", "failed", "cancelled"}, p.State) {
			t.Fatalf("piece %d: %+v, want child %s, not ended", i+1, p, kids[i].ID)
		}
	}
	if _, err := s.client.Cancel(ctx, parent.ID, "the test"); err != nil {
		t.Fatal(err)
	}
	waitAllCancelled(t, s.client, kids, 20*time.Second)
	s.verify()
	// Purged, the parent takes the children its attempt made with it.
	purged, err := s.client.PurgeJob(ctx, parent.ID, "")
	if err != nil || purged != 1+len(kids) {
		t.Fatalf("purged %d of 1+%d: %v", purged, len(kids), err)
	}
	for _, k := range kids {
		if _, err := s.client.Get(ctx, k.ID); !errors.Is(err, jetflow.ErrNotFound) {
			t.Fatalf("child %s after the purge of its parent: %v", k.ID, err)
		}
	}
}

// waitAllCancelled waits until every one of jobs is cancelled.
func waitAllCancelled(t *testing.T, cl *jetflow.Client, jobs []*jetflow.JobInfo, within time.Duration) {
	t.Helper()
	ctx := testkit.Ctx(t)
	testkit.WaitFor(t, within, func() error {
		for _, k := range jobs {
			j, err := cl.Get(ctx, k.ID)
			if err != nil {
				return err
			}
			if j.State != jetflow.Cancelled {
				return testkit.Errorf("child %s is %s", k.ID, j.State)
			}
		}
		return nil
	})
}
