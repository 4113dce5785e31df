package process

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/shell"
)

// shellScript reports its process group, its own pid and a background
// child's that ignores SIGTERM (event "pids"); its first attempt then
// waits for ever, ignoring SIGTERM too; a later one writes an output file
// and exits 0.
const shellScript = `read -r -a st < /proc/$$/stat
trap '' TERM
sleep 1000 &
echo "::event pids ${st[4]} $$ $!"
if [ "$JETFLOW_ATTEMPT" = 1 ]; then wait; fi
kill -KILL $!
echo "attempt $JETFLOW_ATTEMPT" > "$JETFLOW_OUTPUT/result.txt"
echo ok`

// running reports whether pid is a process that has not exited (a zombie
// has: it waits for its parent, here init, to reap it).
func running(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, ok := strings.Cut(string(b), ") ")
	return ok && !strings.HasPrefix(after, "Z")
}

// pidsOf waits for the "pids" event of the job's attempt and returns the
// process group (negative) and the pids it names.
func (s *system) pidsOf(id string, attempt int) []int {
	s.t.Helper()
	var pids []int
	testkit.WaitFor(s.t, 20*time.Second, func() error {
		evs, err := s.client.Events(testkit.Ctx(s.t), id)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Type == domain.EvCustom && e.Name == "pids" && e.Attempt == attempt {
				for _, f := range strings.Fields(e.Message) {
					n, err := strconv.Atoi(f)
					if err != nil {
						s.t.Fatalf("pids %q", e.Message)
					}
					pids = append(pids, n)
				}
				pids[0] = -pids[0]
				return nil
			}
		}
		return testkit.Errorf("no pids event of attempt %d yet", attempt)
	})
	return pids
}

// A `jetflow worker --exec` killed with SIGKILL mid-script: the watchdog of
// the script's process group kills it at once (no process of the attempt
// runs on); the job's lease runs out, it is requeued and the next worker
// runs it again to success.
func TestShellJobOfKilledWorkerRunsAgain(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	workDir := t.TempDir()
	args := []string{"--exec", "shell.e2e=" + shellScript, "--work-dir", workDir, "--kill-grace", "300ms"}
	a := s.worker("A", nil, args...)
	job, err := s.client.Submit(testkit.Ctx(t), "shell.e2e", map[string]int{"n": 1}, jetflow.MaxRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	first := s.pidsOf(job.ID, 1)
	a.Kill(t)
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, pid := range first[1:] {
			if running(pid) {
				return testkit.Errorf("process %d of the killed worker's attempt still runs", pid)
			}
		}
		return nil
	})
	s.worker("B", nil, args...)
	done := testkit.WaitTerminal(t, s.client, job.ID, 30*time.Second)
	if done.State != jetflow.Succeeded || done.Worker != "B" || done.Attempts != 2 || done.LeaseRequeues != 1 {
		t.Fatalf("job %s under %s, attempts %d, lease requeues %d, error %+v", done.State, done.Worker, done.Attempts, done.LeaseRequeues, done.Error)
	}
	var res shell.Result
	if err := json.Unmarshal(done.Result, &res); err != nil || res.ExitCode != 0 || res.StdoutTail != "ok\n" ||
		len(res.Outputs) != 1 || res.Outputs[0] != "result.txt" || res.OutputBytes != int64(len("attempt 2\n")) {
		t.Fatalf("result %s (%v)", done.Result, err)
	}
	evs := s.wantEvents(job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvCustom, domain.EvLeaseExpiredRequeue,
		domain.EvStarted, domain.EvCustom, domain.EvSucceeded)
	wantLeaseTakeover(t, []*jetflow.EventInfo{evs[0], evs[1], evs[3], evs[4], evs[6]}, "A", "B")
	// B's directory is gone; A's, killed with it, is left behind.
	if entries, err := os.ReadDir(workDir); err != nil || len(entries) != 1 || !strings.HasPrefix(entries[0].Name(), job.ID+"-1-") {
		t.Fatalf("work dir holds %v (%v): want the first attempt's directory only", entries, err)
	}
	s.waitDrained("default")
	s.verify()
}

// A `jetflow worker --exec` stopped with SIGTERM hands its running job back
// (job.requeued) and exits only once the script's process group, a child
// ignoring SIGTERM included, is gone.
func TestShellWorkerSigtermKillsTheScript(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	a := s.worker("A", nil, "--exec", "shell.e2e="+shellScript, "--work-dir", t.TempDir(),
		"--kill-grace", "300ms", "--grace", "200ms")
	job, err := s.client.Submit(testkit.Ctx(t), "shell.e2e", nil)
	if err != nil {
		t.Fatal(err)
	}
	pids := s.pidsOf(job.ID, 1)
	a.Signal(t, syscall.SIGTERM)
	if code, sig := a.WaitExit(t, 30*time.Second); code != 0 || sig != 0 {
		t.Fatalf("worker exited with code %d, signal %v", code, sig)
	}
	for _, pid := range pids {
		if !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			t.Fatalf("%d outlived the worker (pids %v)", pid, pids)
		}
	}
	j, err := s.client.Get(testkit.Ctx(t), job.ID)
	if err != nil || j.State != jetflow.Queued || j.Attempts != 1 {
		t.Fatalf("job %+v (%v): want queued again", j, err)
	}
	s.wantEvents(job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvCustom, domain.EvRequeued)
}
