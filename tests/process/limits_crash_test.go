package process

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// `jetflow queue set` killed right after its queue.set is in the log,
// before the queue's record (queue-limits:appended): the limit stands. The
// engine's Projector writes the record from the log, the admitter follows
// it, and the queue runs one job at a time as set; the next change is made
// over the killed one's event.
func TestQueueLimitsCrashPoint(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.worker("W", nil, "--concurrency", "2")
	ctx := testkit.Ctx(t)
	if _, sig, out := s.cli([]string{"JETFLOW_CRASH_AT=queue-limits:appended"}, "queue", "set", "lim", "--max-running", "1"); sig != syscall.SIGKILL {
		t.Fatalf("queue set was not killed at queue-limits:appended:\n%s", out)
	}
	maxRunning := func(want int) {
		t.Helper()
		testkit.WaitFor(t, 20*time.Second, func() error {
			qs, err := s.client.Queues(ctx)
			if err != nil {
				return err
			}
			for _, q := range qs {
				if q.Name == "lim" && q.MaxRunning == want {
					return nil
				}
			}
			return fmt.Errorf("queue lim's max_running is not %d in %d queues", want, len(qs))
		})
	}
	maxRunning(1)
	s.waitCounts("lim", 0, 0, nil, 30*time.Second)

	a := s.submitIn("lim", "", 600)
	s.waitState(a.ID, jetflow.Running)
	b := s.submitIn("lim", "", 600)
	s.waitHeld(b.ID) // the worker has a slot free: the limit holds it
	if _, err := s.client.Cancel(ctx, a.ID, "the test"); err != nil {
		t.Fatal(err)
	}
	s.waitState(b.ID, jetflow.Running)

	if code, _, out := s.cli(nil, "queue", "set", "lim", "--max-running", "2"); code != 0 {
		t.Fatalf("queue set after the killed one exited %d: %s", code, out)
	}
	maxRunning(2)
	c := s.submitIn("lim", "", 600)
	s.waitState(c.ID, jetflow.Running)
	for _, j := range []*jetflow.JobInfo{b, c} {
		if _, err := s.client.Cancel(ctx, j.ID, "the test"); err != nil {
			t.Fatal(err)
		}
	}
	s.waitCounts("lim", 0, 0, nil, 30*time.Second)
	if out := s.serve.Output(); strings.Contains(out, "panic") {
		t.Fatalf("serve:\n%s", out)
	}
	s.verify()
}
