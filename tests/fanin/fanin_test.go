// Package fanin tests fan-in across processes: a batch worker killed with
// SIGKILL in the middle of a fan-out, and the parent still completes once.
package fanin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "jetflow-fanin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "jetflow")
	build := exec.Command("go", "build", "-o", binary, "../../cmd/jetflow")
	build.Stdout, build.Stderr = os.Stdout, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build jetflow:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a jetflow process whose output is kept for failures.
type proc struct {
	cmd *exec.Cmd
	out *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binary, args...), out: &syncBuffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		if t.Failed() {
			t.Logf("--- %s output:\n%s", name, p.out.String())
		}
	})
	return p
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestKilledBatchWorkerParentCompletesOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	addr := freeAddr(t)
	url := "nats://" + addr
	start(t, "serve", "serve", "--data", t.TempDir(), "--nats-listen", addr, "--projector-lag", "300ms")
	ctx := testkit.Ctx(t)
	var client *jetflow.Client
	testkit.WaitFor(t, 20*time.Second, func() (err error) {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		client, err = jetflow.Connect(cctx, url, jetflow.ClientOptions{Name: "test"})
		return err
	})
	defer client.Close()

	victim := start(t, "worker A", "worker", "--nats", url, "--lease", "1s", "--concurrency", "8", "--id", "A")
	const batches = 2000
	job, err := client.Submit(ctx, "demo.fanout", map[string]int{"batches": batches, "batch_ms": 5})
	if err != nil {
		t.Fatal(err)
	}
	// Kill worker A once a fifth of the batches are done, with some in hand.
	testkit.WaitFor(t, 30*time.Second, func() error {
		j, err := client.Get(ctx, job.ID)
		if err != nil {
			return err
		}
		if j.Fanout == nil || j.Fanout.Finished < batches/5 {
			return fmt.Errorf("not far enough: %+v", j.Fanout)
		}
		return nil
	})
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = victim.cmd.Wait()
	mid, err := client.Get(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if mid.State != jetflow.Waiting {
		t.Fatalf("after the kill the parent is %s", mid.State)
	}
	start(t, "worker B", "worker", "--nats", url, "--lease", "1s", "--concurrency", "8", "--id", "B")
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	done, err := client.Wait(wctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != jetflow.Succeeded || done.Fanout.Succeeded != batches || done.Fanout.Failed != 0 {
		t.Fatalf("parent %s, fanout %+v", done.State, done.Fanout)
	}
	var sum struct{ Total, Succeeded int }
	if err := json.Unmarshal(done.Result, &sum); err != nil || sum.Total != batches || sum.Succeeded != batches {
		t.Fatalf("summary %s", done.Result)
	}
	events, err := client.Events(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	ends := 0
	for _, e := range events {
		if e.To.Terminal() {
			ends++
		}
	}
	if ends != 1 {
		t.Fatalf("the parent ended %d times", ends)
	}
	// The counts the parent shows are what its piece events say.
	counted, err := projections.CountPieces(ctx, client.Store().JS, job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if counted.Succeeded != batches || counted.Failed != 0 {
		t.Fatalf("recounted %+v", counted)
	}
	rep, err := projections.Verify(ctx, client.Store().JS, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diffs) != 0 {
		t.Fatalf("replay --verify: %+v", rep.Diffs)
	}
}
