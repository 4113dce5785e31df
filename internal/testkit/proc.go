package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
)

// MainWithJetflow is the TestMain of a package of process tests: it builds
// cmd/jetflow into a temp dir, sets *bin to its path, runs the tests, removes
// the binary and exits with the tests' code. Every test of the package runs
// the same real binary.
func MainWithJetflow(m *testing.M, bin *string) {
	path, cleanup, err := buildJetflow()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*bin = path
	code := m.Run()
	cleanup()
	os.Exit(code)
}

func buildJetflow() (string, func(), error) {
	dir, err := os.MkdirTemp("", "jetflow-bin-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "jetflow")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/jetflow/jetflow/cmd/jetflow").CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build jetflow: %v\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// Proc is a process started by a test. Its output is kept and logged if
// the test fails; it is killed when the test ends.
type Proc struct {
	Name string
	Cmd  *exec.Cmd
	out  *SyncBuffer

	exited chan struct{}
	state  *os.ProcessState
}

// StartProc starts bin with args and extra environment ("K=V"), named for
// the test log.
func StartProc(t testing.TB, name string, env []string, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Cmd: exec.Command(bin, args...), out: &SyncBuffer{}, exited: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.out, p.out
	p.Cmd.Env = append(os.Environ(), env...)
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.Cmd.Wait()
		p.state = p.Cmd.ProcessState
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.Cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("--- %s (%s) output:\n%s", name, strings.Join(args, " "), p.out.String())
		}
	})
	return p
}

// Output is what the process printed so far (stdout and stderr).
func (p *Proc) Output() string { return p.out.String() }

// Signal sends sig to the process.
func (p *Proc) Signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := p.Cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s to %s: %v", sig, p.Name, err)
	}
}

// Kill sends SIGKILL and waits for the process to be gone.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	p.Signal(t, syscall.SIGKILL)
	<-p.exited
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// WaitExit waits for the process to end and returns how: its exit code, or
// -1 and the signal that killed it.
func (p *Proc) WaitExit(t testing.TB, timeout time.Duration) (code int, sig syscall.Signal) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("%s still running after %s", p.Name, timeout)
	}
	ws, ok := p.state.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return -1, ws.Signal()
	}
	return p.state.ExitCode(), 0
}

// WaitOutput waits until the process has printed s.
func (p *Proc) WaitOutput(t testing.TB, timeout time.Duration, s string) {
	t.Helper()
	WaitFor(t, timeout, func() error {
		if strings.Contains(p.out.String(), s) {
			return nil
		}
		if p.Exited() {
			return fmt.Errorf("%s exited without printing %q", p.Name, s)
		}
		return fmt.Errorf("%s has not printed %q", p.Name, s)
	})
}

// SyncBuffer is an output a process or command writes while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lo := ephemeralLow()
	for range 200 {
		port := 0
		if lo > 10000 { // a port below the kernel's ephemeral range (see below)
			port = 10000 + rand.IntN(lo-10000)
		}
		if _, taken := handedOut.LoadOrStore(port, true); taken && port != 0 {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		l.Close()
		return addr
	}
	t.Fatal("no free loopback port")
	return ""
}

// handedOut are the ports FreeAddr gave in this process.
var handedOut sync.Map

// ephemeralLow is the lowest port the kernel gives outgoing connections
// (0 if unknown). A server restarted on its address (after a SIGKILL)
// must find it free: a port in the ephemeral range can meanwhile be the
// local port of any test's outgoing connection ("address in use", seen in
// CI), one below it only another FreeAddr's, picked at random.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	var lo, hi int
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo <= 10000 {
		return 0
	}
	return lo
}

// Connect connects a Client to url, retrying until the server there is up.
func Connect(t testing.TB, url string) *jetflow.Client {
	t.Helper()
	var client *jetflow.Client
	WaitFor(t, 30*time.Second, func() (err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		client, err = jetflow.Connect(ctx, url, jetflow.ClientOptions{Name: "test", Logger: Logger(t)})
		return err
	})
	t.Cleanup(client.Close)
	return client
}

// WaitTerminal waits for a job to be terminal, by the record's KV watch.
func WaitTerminal(t testing.TB, client *jetflow.Client, id string, timeout time.Duration) *jetflow.JobInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	j, err := client.Wait(ctx, id)
	if errors.Is(err, context.DeadlineExceeded) {
		cur, _ := client.Get(context.Background(), id)
		t.Fatalf("job %s not terminal after %s: %+v", id, timeout, cur)
	}
	if err != nil {
		t.Fatalf("wait for %s: %v", id, err)
	}
	return j
}

var stores sync.Map // *jetflow.Client -> *engine.Store

// StoreOf is a Store on client's connection, for tests that look under the
// SDK (the client keeps its own to itself). One per client.
func StoreOf(t testing.TB, client *jetflow.Client) *engine.Store {
	t.Helper()
	if st, ok := stores.Load(client); ok {
		return st.(*engine.Store)
	}
	st := Store(t, client.Conn(), "test")
	actual, _ := stores.LoadOrStore(client, st)
	return actual.(*engine.Store)
}
