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
// (now made of the record's bytes, streams.Writer.DispatchRecordAsync).
const upgradeFrom = "9408d07"

// An upgrade with jobs in flight: a system of the build upgradeFrom, its
// engine and its worker killed with SIGKILL while it holds jobs running,
// queued, waiting for a retry's delay, scheduled and a workflow half done,
// is started again on the same store by this build's engine, with a
// worker of each build (a rolling upgrade: the engine first, then its
// workers). Every job ends succeeded, each with one terminal event, none
// run again once it succeeded, and the log and the records agree (replay
// --verify, audit verify).
func TestUpgradeWithJobsInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	old := buildAt(t, upgradeFrom)
	inFlightAcross(t, build{upgradeFrom, old}, build{"this build", binary})
}

// A rollback with jobs in flight: the same, from this build to
// upgradeFrom's engine, with a worker of each build.
func TestRollbackWithJobsInFlight(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	old := buildAt(t, upgradeFrom)
	inFlightAcross(t, build{"this build", binary}, build{upgradeFrom, old})
}

// build is a jetflow binary and its name.
type build struct{ name, bin string }

// inFlightAcross runs a system of build from with jobs in flight, kills it
// (SIGKILL) mid-way and starts build to's engine on its store, with a
// worker of each build; every job must succeed once.
func inFlightAcross(t *testing.T, from, to build) {
	s := &system{t: t, addr: testkit.FreeAddr(t), data: t.TempDir()}
	s.url = "nats://" + s.addr
	serve := func(b build) *testkit.Proc {
		p := testkit.StartProc(t, "serve of "+b.name, nil, b.bin,
			"serve", "--data", s.data, "--nats-listen", s.addr, "--projector-lag", "300ms", "--http", "off")
		p.WaitOutput(t, 30*time.Second, "jetflow is running")
		return p
	}
	worker := func(b build, id string) *testkit.Proc {
		p := testkit.StartProc(t, "worker "+id+" of "+b.name, nil, b.bin,
			"worker", "--nats", s.url, "--id", id, "--lease", "1s", "--concurrency", "4")
		p.WaitOutput(t, 30*time.Second, "worker "+id+" running")
		return p
	}
	firstServe, firstWorker := serve(from), worker(from, "first")

	// The first build's own client submits (the CLI): what is in flight
	// is all its own writing.
	submit := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(from.bin, append(args, "--nats", s.url)...).Output()
		if err != nil {
			t.Fatalf("%s: %v: %v", from.name, args, err)
		}
		id, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\t")
		if id == "" {
			t.Fatalf("%s: %v printed %q", from.name, args, out)
		}
		return id
	}
	wf := filepath.Join(t.TempDir(), "wf.json")
	if err := os.WriteFile(wf, []byte(`{"name":"across","steps":[
		{"name":"a","type":"demo.sleep","payload":{"seconds":0.3}},
		{"name":"b","type":"demo.sleep","payload":{"seconds":0.3},"depends_on":["a"]},
		{"name":"c","type":"demo.sleep","payload":{"seconds":0.3},"depends_on":["a"]},
		{"name":"d","type":"demo.echo","payload":{"n":1},"depends_on":["b","c"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	workflow := submit("workflow", "submit", wf)
	var ids []string
	// Fail once, then succeed: a retry at once, and retries waiting out
	// a delay across the change (message schedules).
	for range 3 {
		ids = append(ids, submit("submit", "demo.fail", `{"times":1}`, "--backoff", "0s"))
		ids = append(ids, submit("submit", "demo.fail", `{"times":1}`, "--backoff", "3s"))
	}
	ids = append(ids, submit("submit", "demo.echo", `{"n":1}`, "--delay", "3s"))
	for range 16 {
		ids = append(ids, submit("submit", "demo.sleep", `{"seconds":0.3}`))
	}

	// Mid-way: some jobs succeeded under the first build, some running.
	count := func(state string) (int, error) {
		out, err := exec.Command(from.bin, "ls", "--state", state, "--limit", "1000", "--nats", s.url).Output()
		return strings.Count(string(out), "\n"), err
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		done, err := count("succeeded")
		if err != nil {
			return err
		}
		running, err := count("running")
		if err != nil {
			return err
		}
		if done < 4 || running == 0 {
			return testkit.Errorf("%d jobs succeeded under %s, %d running", done, from.name, running)
		}
		return nil
	})
	// Two that cannot have run before the kill, however slow the checks
	// above were on a busy machine (all the rest may have ended by then).
	for range 2 {
		ids = append(ids, submit("submit", "demo.echo", `{"n":2}`, "--delay", "5s"))
	}
	firstWorker.Kill(t)
	firstServe.Kill(t)

	// The second build's engine on the same store, with a worker of each.
	serve(to)
	worker(to, "second")
	worker(from, "first-again")
	s.client = testkit.Connect(t, s.url)
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
	ran := map[string]int{}
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
		if slices.Contains(types, "job.failed") || slices.Contains(types, evCancelled) {
			t.Fatalf("job %s (%s): events %v", id, j.Type, types)
		}
		if !slices.Contains([]string{"first", "second", "first-again"}, j.Worker) {
			t.Fatalf("job %s (%s) succeeded under %q", id, j.Type, j.Worker)
		}
		ran[j.Worker]++
	}
	// Some finished before the change, some after: it happened with jobs
	// in flight.
	after := ran["second"] + ran["first-again"]
	if ran["first"] < 4 || after == 0 {
		t.Fatalf("%d jobs finished by %s before, %d after (%d by its worker, %d by %s's): want at least 4 and 1",
			ran["first"], from.name, after, ran["first-again"], ran["second"], to.name)
	}
	t.Logf("%d jobs finished by %s before; after, on %s's engine, %d by %s's worker, %d by its own",
		ran["first"], from.name, to.name, ran["first-again"], from.name, ran["second"])
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
