// Package process tests the core of jetflow across real processes: the
// jetflow binary as engine (serve), workers and CLI, killed with SIGKILL
// between two writes (crash points), mid-job (leases), stopped with SIGSTOP
// (zombies), stopped with SIGTERM (graceful shutdown), restarted all at once
// (durable delays), and sixteen worker processes racing for one job.
package process

import (
	"errors"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(racerEnv) != "" {
		os.Exit(racer())
	}
	testkit.MainWithJetflow(m, &binary)
}

// system is one jetflow system: a serve process (embedded NATS listening on
// loopback, the engine, no demo handlers and no HTTP) and a client of it.
type system struct {
	t      *testing.T
	addr   string
	url    string
	data   string
	http   string // the HTTP API's address, if serve runs one
	serve  *testkit.Proc
	client *jetflow.Client
}

func startSystem(t *testing.T) *system {
	t.Helper()
	return startSystemHTTP(t, false)
}

// startSystemHTTP is startSystem with, if withHTTP, the HTTP API on a free
// loopback address and a one-second lease for HTTP workers' claims.
func startSystemHTTP(t *testing.T, withHTTP bool) *system {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	s := &system{t: t, addr: testkit.FreeAddr(t), data: t.TempDir()}
	if withHTTP {
		s.http = testkit.FreeAddr(t)
	}
	s.url = "nats://" + s.addr
	s.startServe()
	s.client = testkit.Connect(t, s.url)
	return s
}

func (s *system) startServe() {
	s.t.Helper()
	args := []string{"serve", "--data", s.data, "--nats-listen", s.addr, "--projector-lag", "300ms"}
	if s.http == "" {
		args = append(args, "--http", "off")
	} else {
		args = append(args, "--http", s.http, "--http-lease", "1s")
	}
	s.serve = testkit.StartProc(s.t, "serve", nil, binary, args...)
	s.serve.WaitOutput(s.t, 30*time.Second, "jetflow is running")
}

// worker starts `jetflow worker` with id name, a one-second lease and one
// handler slot, and waits until it has started; env adds to its environment.
func (s *system) worker(name string, env []string, args ...string) *testkit.Proc {
	s.t.Helper()
	args = append([]string{"worker", "--nats", s.url, "--id", name, "--lease", "1s", "--concurrency", "1"}, args...)
	p := testkit.StartProc(s.t, "worker "+name, env, binary, args...)
	p.WaitOutput(s.t, 30*time.Second, "worker "+name+" running")
	return p
}

// cli runs a client command to its end and returns how it ended and what it
// printed.
func (s *system) cli(env []string, args ...string) (code int, sig syscall.Signal, out string) {
	s.t.Helper()
	cmd := exec.Command(binary, append(args, "--nats", s.url)...)
	cmd.Env = append(os.Environ(), env...)
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		s.t.Fatalf("jetflow %v: %v", args, err)
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -1, ws.Signal(), string(b)
	}
	return cmd.ProcessState.ExitCode(), 0, string(b)
}

// verify runs `jetflow replay --verify` and fails the test unless the state
// rebuilt from the log equals the jobs bucket.
func (s *system) verify() {
	s.t.Helper()
	code, _, out := s.cli(nil, "replay", "--verify")
	if code != 0 {
		s.t.Fatalf("replay --verify exited %d:\n%s", code, out)
	}
	// The hash chain holds across the crashes too: no event edited,
	// removed, reordered, inserted or written without it.
	code, _, out = s.cli(nil, "audit", "verify")
	if code != 0 {
		s.t.Fatalf("audit verify exited %d:\n%s", code, out)
	}
}

// wantEvents fails unless the job's history is exactly these event types.
func (s *system) wantEvents(id string, want ...string) []*jetflow.EventInfo {
	s.t.Helper()
	evs, err := s.client.Events(testkit.Ctx(s.t), id)
	if err != nil {
		s.t.Fatal(err)
	}
	got := make([]string, len(evs))
	for i, e := range evs {
		got[i] = e.Type
	}
	if !slices.Equal(got, want) {
		s.t.Fatalf("events of %s:\n got  %v\n want %v", id, got, want)
	}
	return evs
}

// sleep submits a demo.sleep job of that many seconds.
func (s *system) sleep(seconds float64, opts ...jetflow.SubmitOption) *jetflow.JobInfo {
	s.t.Helper()
	job, err := s.client.Submit(testkit.Ctx(s.t), "demo.sleep", map[string]float64{"seconds": seconds}, opts...)
	if err != nil {
		s.t.Fatal(err)
	}
	return job
}

// wantLeaseExpired fails unless the job failed with LEASE_EXPIRED after
// one lease requeue.
func wantLeaseExpired(t *testing.T, done *jetflow.JobInfo) {
	t.Helper()
	if done.State != jetflow.Failed || done.Error == nil || done.Error.Code != "LEASE_EXPIRED" || done.LeaseRequeues != 1 {
		t.Fatalf("job %s, error %+v, lease requeues %d", done.State, done.Error, done.LeaseRequeues)
	}
}

// waitRunning waits until the job is running under worker.
func (s *system) waitRunning(id, worker string) {
	s.t.Helper()
	ctx := testkit.Ctx(s.t)
	testkit.WaitFor(s.t, 20*time.Second, func() error {
		j, err := s.client.Get(ctx, id)
		if err != nil {
			return err
		}
		if j.State != jetflow.Running || j.Worker != worker {
			return testkit.Errorf("job is %s under %q", j.State, j.Worker)
		}
		return nil
	})
}

// waitDrained waits until a queue's streams hold no work item, no batch
// and no schedule: every item was settled, none was left behind.
func (s *system) waitDrained(queue string) {
	s.t.Helper()
	ctx := testkit.Ctx(s.t)
	qss, err := streams.QueueStreams(ctx, testkit.StoreOf(s.t, s.client).JS, queue)
	if err != nil {
		s.t.Fatal(err)
	}
	testkit.WaitFor(s.t, 20*time.Second, func() error {
		for _, qs := range qss.All() {
			info, err := qs.Info(ctx)
			if err != nil {
				return err
			}
			if info.State.Msgs != 0 {
				return testkit.Errorf("queue %s: %s holds %d messages", queue, info.Config.Name, info.State.Msgs)
			}
		}
		return nil
	})
}

// wantKilled fails unless p ended by SIGKILL (a crash point it reached).
func wantKilled(t *testing.T, p *testkit.Proc) {
	t.Helper()
	code, sig := p.WaitExit(t, 30*time.Second)
	if sig != syscall.SIGKILL {
		t.Fatalf("%s exited with code %d, not by SIGKILL at its crash point", p.Name, code)
	}
}
