package process

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// upgradeFrom is the build a system runs before it is upgraded to this
// one: stop 45's landing, the last one whose in-process claims wrote their
// records at once (since then a claim's record is folded into its
// outcome's, store.DeferRecord) and whose work items were encoded whole
// (now made of the record's bytes, streams.WorkItemOf).
const upgradeFrom = "9408d07"

// An upgrade with jobs in flight: a system of the build upgradeFrom, its
// engine and its worker killed with SIGKILL while it holds jobs running,
// queued, waiting for a retry's delay, scheduled and a workflow half done,
// is started again on the same store by this build's engine, with a
// worker of each build. Every job ends
// succeeded, each with one terminal event, none run again once it
// succeeded, and the log and the records agree (replay --verify, audit
// verify).
func TestUpgradeWithJobsInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	old := buildAt(t, upgradeFrom)
	s := &system{t: t, addr: testkit.FreeAddr(t), data: t.TempDir()}
	s.url = "nats://" + s.addr
	serveArgs := []string{"serve", "--data", s.data, "--nats-listen", s.addr, "--projector-lag", "300ms", "--http", "off"}
	oldServe := testkit.StartProc(t, "serve "+upgradeFrom, nil, old, serveArgs...)
	oldServe.WaitOutput(t, 30*time.Second, "jetflow is running")
	oldWorker := testkit.StartProc(t, "worker "+upgradeFrom, nil, old,
		"worker", "--nats", s.url, "--id", "old", "--lease", "1s", "--concurrency", "4")
	oldWorker.WaitOutput(t, 30*time.Second, "worker old running")

	// The old build's own client submits (the CLI): what is in flight is
	// all its own writing.
	submit := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(old, append(args, "--nats", s.url)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s %v: %v", upgradeFrom, args, err)
		}
		id, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\t")
		if id == "" {
			t.Fatalf("%s %v printed %q", upgradeFrom, args, out)
		}
		return id
	}
	var ids []string
	for range 16 {
		ids = append(ids, submit("submit", "demo.sleep", `{"seconds":0.3}`))
	}
	// Fail once, then succeed: a retry at once, and retries waiting out
	// a delay across the upgrade (message schedules).
	for range 3 {
		ids = append(ids, submit("submit", "demo.fail", `{"times":1}`, "--backoff", "0s"))
		ids = append(ids, submit("submit", "demo.fail", `{"times":1}`, "--backoff", "3s"))
	}
	ids = append(ids, submit("submit", "demo.echo", `{"n":1}`, "--delay", "3s"))
	wf := filepath.Join(t.TempDir(), "wf.json")
	if err := os.WriteFile(wf, []byte(`{"name":"upgrade","steps":[
		{"name":"a","type":"demo.sleep","payload":{"seconds":0.3}},
		{"name":"b","type":"demo.sleep","payload":{"seconds":0.3},"depends_on":["a"]},
		{"name":"c","type":"demo.sleep","payload":{"seconds":0.3},"depends_on":["a"]},
		{"name":"d","type":"demo.echo","payload":{"n":1},"depends_on":["b","c"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	workflow := submit("workflow", "submit", wf)

	// Mid-way: some jobs succeeded under the old build, others not yet.
	succeeded := func() int {
		out, err := exec.Command(old, "ls", "--state", "succeeded", "--limit", "1000", "--nats", s.url).Output()
		if err != nil {
			return 0
		}
		return strings.Count(string(out), "\n")
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		if n := succeeded(); n < 4 {
			return testkit.Errorf("%d jobs succeeded under %s", n, upgradeFrom)
		}
		return nil
	})
	oldWorker.Kill(t)
	oldServe.Kill(t)

	// This build's engine on the same store, with a worker of each build
	// (a rolling upgrade: the engine first, its workers one by one).
	s.startServe()
	s.client = testkit.Connect(t, s.url)
	s.worker("new", nil, "--concurrency", "4")
	oldWorker = testkit.StartProc(t, "worker "+upgradeFrom+" again", nil, old,
		"worker", "--nats", s.url, "--id", "old2", "--lease", "1s", "--concurrency", "4")
	oldWorker.WaitOutput(t, 30*time.Second, "worker old2 running")
	ctx := testkit.Ctx(t)
	done := testkit.WaitTerminal(t, s.client, workflow, 60*time.Second)
	if done.State != jetflow.Succeeded {
		t.Fatalf("workflow %s ended %s, want succeeded", workflow, done.State)
	}
	steps, err := s.client.List(ctx, jetflow.ListFilter{Parent: workflow, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 4 {
		t.Fatalf("workflow %s lists %d steps, want 4", workflow, len(steps))
	}
	for _, st := range steps {
		ids = append(ids, st.ID)
	}
	var oldRan, old2Ran, newRan int
	for _, id := range ids {
		j := testkit.WaitTerminal(t, s.client, id, 60*time.Second)
		if j.State != jetflow.Succeeded {
			t.Fatalf("job %s (%s) ended %s, want succeeded", id, j.Type, j.State)
		}
		evs, err := s.client.Events(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range evs {
			types = append(types, e.Type)
		}
		// One terminal event, the last: nothing ran again after it.
		if n := countOf(types, evSucceeded); n != 1 || types[len(types)-1] != evSucceeded {
			t.Fatalf("job %s (%s): events %v, want one %s, last", id, j.Type, types, evSucceeded)
		}
		if slices.Contains(types, "job.failed") || slices.Contains(types, "job.cancelled") {
			t.Fatalf("job %s (%s): events %v", id, j.Type, types)
		}
		switch j.Worker {
		case "old":
			oldRan++
		case "old2":
			old2Ran++
		case "new":
			newRan++
		default:
			t.Fatalf("job %s (%s) succeeded under %q", id, j.Type, j.Worker)
		}
	}
	// Some finished before the upgrade, some after: it happened with jobs
	// in flight.
	if oldRan < 4 || old2Ran+newRan == 0 {
		t.Fatalf("%d jobs finished by %s before the upgrade, %d after it (%d by its worker, %d by this build's): want at least 4 and 1",
			oldRan, upgradeFrom, old2Ran+newRan, old2Ran, newRan)
	}
	t.Logf("%d jobs finished by %s before the upgrade; after it %d by its worker, %d by this build's", oldRan, upgradeFrom, old2Ran, newRan)
	s.waitDrained("default")
	s.verify()
}

func countOf(xs []string, x string) int {
	n := 0
	for _, y := range xs {
		if y == x {
			n++
		}
	}
	return n
}

// buildAt builds cmd/jetflow as it was at commit rev, from this clone's
// history (a clone without it, a shallow one, skips the test).
func buildAt(t *testing.T, rev string) string {
	t.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	dir := strings.TrimSpace(string(root))
	if err := exec.Command("git", "-C", dir, "cat-file", "-e", rev+"^{commit}").Run(); err != nil {
		t.Skipf("commit %s is not in this clone (a shallow one?)", rev)
	}
	src := t.TempDir()
	if out, err := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", dir, rev, src).CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(t.TempDir(), "jetflow-"+rev)
	build := exec.Command("go", "build", "-o", bin, "./cmd/jetflow")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", rev, err, out)
	}
	return bin
}
