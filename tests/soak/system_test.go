package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// system is a jetflow system under test and the faults done to it: the
// engines (serve), the worker processes (every one ever started, and the
// moment each was signalled), and on a cluster the NATS nodes.
type system struct {
	t   *testing.T
	sz  size
	rng *rand.Rand

	url string // what clients and workers dial (comma-separated on a cluster)

	// Single node: one serve with its embedded NATS server on addr, data
	// in data. On a cluster: serves of the engine only, and the nodes.
	addr, data string
	serves     []*testkit.Proc
	serveArgs  []string
	nodes      *cluster

	client  *jetflow.Client
	workers []*worker          // alive, oldest first
	all     map[string]*worker // every worker ever started, by id
	next    int

	restarts []restart  // serve kills and restarts
	nodeLoss []restart  // cluster node kills and restarts
	faults   faultCount // what was done

	tl      *tail     // the log as the soak runs, for faults that wait on it
	orphans []orphans // jobs of workers all killed at once, still held when the wait for them ended

	timeline      []string          // every fault, when it was done
	startFailures []string          // processes that exited before they ran
	failedClaims  map[string]string // "job worker" -> the worker's log line of a claim it took for failed
}

// orphans is what a kill of every worker left held too long.
type orphans struct {
	at   time.Time
	jobs []string
}

type worker struct {
	id        string
	p         *testkit.Proc
	started   time.Time
	signalled time.Time // zero: never signalled (taken just before the signal)
	sig       syscall.Signal
	dead      time.Time // SIGKILL: when it was seen gone (nothing it wrote can be later)
}

// restart is a process killed at killed and ready again at ready.
type restart struct {
	what          string
	killed, ready time.Time
}

type faultCount struct {
	workerKills, workerTerms, serveKills, nodeKills, allKills int
}

func (f faultCount) String() string {
	s := fmt.Sprintf("%d worker SIGKILLs, %d worker SIGTERMs, %d kills of every worker at once, %d serve SIGKILL+restarts",
		f.workerKills, f.workerTerms, f.allKills, f.serveKills)
	if f.nodeKills > 0 {
		s += fmt.Sprintf(", %d NATS node SIGKILL+restarts", f.nodeKills)
	}
	return s
}

// startSingle starts serve with its embedded NATS server on a free port and
// a data dir of the test's, and connects the test's client.
func startSingle(t *testing.T, sz size, serveArgs ...string) *system {
	t.Helper()
	s := &system{t: t, sz: sz, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), all: map[string]*worker{}}
	s.addr, s.data = testkit.FreeAddr(t), t.TempDir()
	s.url = "nats://" + s.addr
	s.serveArgs = append([]string{"serve", "--data", s.data, "--nats-listen", s.addr, "--http", "off"}, serveArgs...)
	s.serves = []*testkit.Proc{s.startServe("serve")}
	s.client = testkit.Connect(t, s.url)
	return s
}

func (s *system) startServe(name string) *testkit.Proc {
	s.t.Helper()
	return s.start(name, "jetflow is running", binary, s.serveArgs...)
}

// start starts a process and waits until it printed ready. A process that
// exits before (a worker that could not create its consumers while a NATS
// node was down, say) is started again, up to five times; each such exit
// is kept for the report.
func (s *system) start(name, ready, bin string, args ...string) *testkit.Proc {
	s.t.Helper()
	for try := 1; ; try++ {
		p := testkit.StartProc(s.t, name, nil, bin, args...)
		deadline := time.Now().Add(2 * time.Minute)
		for !strings.Contains(p.Output(), ready) && !p.Exited() && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if strings.Contains(p.Output(), ready) {
			return p
		}
		if !p.Exited() {
			s.t.Fatalf("%s has not printed %q after 2m:\n%s", name, ready, lastLines(p.Output(), 40))
		}
		code, _ := p.WaitExit(s.t, time.Second)
		s.startFailures = append(s.startFailures, fmt.Sprintf("%s at %s exited %d before it ran:\n%s",
			name, time.Now().Format("15:04:05.000"), code, lastLines(p.Output(), 10)))
		if try == 5 {
			s.t.Fatalf("%s exited before it ran, 5 times:\n%s", name, strings.Join(s.startFailures, "\n"))
		}
		time.Sleep(time.Second)
	}
}

// startWorkers starts the first n workers.
func (s *system) startWorkers(n int) {
	for range n {
		s.startWorker()
	}
}

// startWorker starts `jetflow worker` (the demo handlers) and waits until
// it runs.
func (s *system) startWorker() *worker {
	s.t.Helper()
	s.next++
	id := fmt.Sprintf("w%d", s.next)
	p := s.start("worker "+id, "worker "+id+" running", binary, "worker", "--nats", s.url, "--id", id,
		"--concurrency", fmt.Sprint(s.sz.concurrency), "--lease", s.sz.lease.String(), "--grace", "500ms")
	w := &worker{id: id, p: p, started: time.Now()}
	s.workers = append(s.workers, w)
	s.all[id] = w
	return w
}

// victim takes a random live worker out of the live ones, after its
// replacement started: at least workers-1 of them always run (see
// the lease sweeper note in soak_test.go).
func (s *system) victim() *worker {
	s.startWorker()
	i := s.rng.IntN(len(s.workers) - 1) // not the replacement
	w := s.workers[i]
	s.workers = append(s.workers[:i], s.workers[i+1:]...)
	return w
}

func (s *system) killWorker() {
	w := s.victim()
	w.signalled, w.sig = time.Now(), syscall.SIGKILL
	w.p.Kill(s.t)
	w.dead = time.Now()
	s.faults.workerKills++
	s.note(w.signalled, "SIGKILL %s", w.id)
}

// termWorker stops a worker with SIGTERM and does not wait: it finishes or
// requeues what it runs while the soak goes on; checkStopped looks at how
// it ended.
func (s *system) termWorker() {
	w := s.victim()
	w.signalled, w.sig = time.Now(), syscall.SIGTERM
	w.p.Signal(s.t, syscall.SIGTERM)
	s.faults.workerTerms++
	s.note(w.signalled, "SIGTERM %s", w.id)
}

// killAll kills every worker with SIGKILL at once, so that no worker of
// any job type is left, and waits until the engine alone requeued every job
// they held (the lease sweeper: within a lease and a sweep or two); then it
// starts as many new workers. Jobs still held by the dead workers once
// nothing moved for 30 s are orphans (a violation).
func (s *system) killAll() {
	s.t.Helper()
	dead := map[string]bool{}
	now := time.Now()
	for _, w := range s.workers {
		w.signalled, w.sig = now, syscall.SIGKILL
		w.p.Signal(s.t, syscall.SIGKILL)
		dead[w.id] = true
	}
	for _, w := range s.workers {
		w.p.WaitExit(s.t, time.Minute)
		w.dead = time.Now()
	}
	n := len(s.workers)
	s.note(now, "SIGKILL every worker (%s)", strings.Join(slices.Sorted(maps.Keys(dead)), " "))
	s.workers = nil
	s.faults.allKills++
	held := func() (int, error) { return len(s.tl.heldBy(dead)), nil }
	if settle(30*time.Second, held) > 0 {
		s.orphans = append(s.orphans, orphans{at: now, jobs: s.tl.heldBy(dead)})
	}
	s.startWorkers(n)
}

// restartServe kills a serve with SIGKILL and starts it again on the same
// data (single node: with its embedded NATS server, so every client and
// worker loses its connection until it is back): half the time at once,
// else after up to sz.serveDown.
func (s *system) restartServe() {
	s.t.Helper()
	i := s.rng.IntN(len(s.serves))
	r := restart{what: fmt.Sprintf("serve %d", i+1), killed: time.Now()}
	s.serves[i].Kill(s.t)
	if s.rng.IntN(2) == 0 {
		time.Sleep(time.Duration(s.rng.Int64N(int64(s.sz.serveDown))))
	}
	s.serves[i] = s.startServe(fmt.Sprintf("serve %d (restart %d)", i+1, len(s.restarts)+1))
	r.ready = time.Now()
	s.restarts = append(s.restarts, r)
	s.faults.serveKills++
	s.note(r.killed, "SIGKILL %s, ready again %.2f s later", r.what, r.ready.Sub(r.killed).Seconds())
}

// note adds a fault to the timeline.
func (s *system) note(at time.Time, format string, args ...any) {
	s.timeline = append(s.timeline, at.Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// injectFaults does one fault after another, a random pause apart, until
// stop is closed.
func (s *system) injectFaults(stop <-chan struct{}) {
	s.t.Helper()
	for i := 1; ; i++ {
		pause := s.sz.faultMin + time.Duration(s.rng.Int64N(int64(s.sz.faultMax-s.sz.faultMin)+1))
		select {
		case <-stop:
			return
		case <-time.After(pause):
		}
		switch {
		case s.nodes != nil && s.sz.nodeEvery > 0 && i%s.sz.nodeEvery == 0:
			s.restartNode()
		case s.sz.serveEvery > 0 && i%s.sz.serveEvery == 0:
			s.restartServe()
		case s.sz.allEvery > 0 && i%s.sz.allEvery == 0:
			s.killAll()
		case s.sz.termEvery > 0 && i%s.sz.termEvery == 0:
			s.termWorker()
		default:
			s.killWorker()
		}
	}
}

// verify runs `jetflow replay --verify --json` and returns how many jobs it
// rebuilt from the log and the records that differ from them.
func (s *system) verify() (jobs int, diffs []json.RawMessage) {
	var rep struct {
		Jobs  int               `json:"jobs"`
		Diffs []json.RawMessage `json:"diffs"`
	}
	s.report(&rep, func() int { return len(rep.Diffs) }, "replay", "--verify")
	return rep.Jobs, rep.Diffs
}

// auditVerify runs `jetflow audit verify --json` and returns its findings.
func (s *system) auditVerify() (findings []json.RawMessage) {
	var rep struct {
		Events   int               `json:"events"`
		Findings []json.RawMessage `json:"findings"`
	}
	s.report(&rep, func() int { return len(rep.Findings) }, "audit", "verify")
	if rep.Events == 0 {
		s.t.Fatalf("audit verify: a report of no events")
	}
	return rep.Findings
}

// report runs a jetflow command that prints a JSON report (--json, against
// the system) into rep; it fails the test unless the report came, and
// unless the command succeeded or found something (found: how much).
func (s *system) report(rep any, found func() int, args ...string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, append(args, "--json", "--nats", s.url)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if jerr := json.Unmarshal(stdout.Bytes(), rep); jerr != nil {
		s.t.Fatalf("%v: %v, no report (%v):\n%s%s", args, err, jerr, stdout.String(), lastLines(stderr.String(), 40))
	}
	if err != nil && found() == 0 {
		s.t.Fatalf("%v: %v without findings:\n%s", args, err, lastLines(stderr.String(), 40))
	}
}

// lastLines is the last n lines of out.
func lastLines(out string, n int) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// callCtx is a context for one call of the test's client: a call in flight
// when serve dies is abandoned, not waited for.
func callCtx(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
