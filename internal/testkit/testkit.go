// Package testkit gives jetflow's tests real parts: an embedded JetStream
// server in a temp dir, connections, a Store, and WaitFor to wait for a
// condition instead of sleeping.
package testkit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/jetflowtest"
	"github.com/jetflow/jetflow/streams"
)

// Server starts an embedded JetStream server with a temp store, in-process
// connections only unless listen is set ("127.0.0.1:-1" picks a port).
func Server(t testing.TB, listen ...string) *server.Server {
	t.Helper()
	cfg := engine.ServerConfig{Dir: t.TempDir(), Name: "test"}
	if len(listen) > 0 {
		cfg.Listen = listen[0]
	}
	s, err := engine.StartServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// Conn connects to s in-process.
func Conn(t testing.TB, s *server.Server) *nats.Conn {
	t.Helper()
	nc, err := engine.ConnectInProcess(s, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// Store opens a Store on nc with the single-node topology.
func Store(t testing.TB, nc *nats.Conn, actor string) *engine.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := engine.OpenStore(ctx, nc, streams.Topology{}, actor)
	if err != nil {
		t.Fatal(err)
	}
	st.SetLogger(Logger(t))
	return st
}

// Logger logs to the test's output when JETFLOW_TEST_LOG is set, else
// nowhere.
func Logger(t testing.TB) *slog.Logger {
	if os.Getenv("JETFLOW_TEST_LOG") == "" {
		return slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// WaitFor polls cond until it returns nil or the deadline passes, then
// fails the test with cond's last error (jetflowtest.WaitFor).
func WaitFor(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	jetflowtest.WaitFor(t, timeout, cond)
}

// WaitDrained polls left (how much work remains) until it reports 0. It
// fails the test when the amount has not gone down for stall, so a test
// waits as long as a slow machine keeps making progress and no longer once
// progress stops. An error from left counts as no progress.
func WaitDrained(t testing.TB, stall time.Duration, left func() (int, error)) {
	t.Helper()
	best, since := -1, time.Now()
	delay := time.Millisecond
	for {
		n, err := left()
		if err == nil && n == 0 {
			return
		}
		if err == nil && (best < 0 || n < best) {
			best, since = n, time.Now()
		}
		if time.Since(since) > stall {
			if err != nil {
				t.Fatalf("no progress for %s: %v", stall, err)
			}
			t.Fatalf("no progress for %s: %d left", stall, best)
		}
		time.Sleep(delay)
		if delay < 50*time.Millisecond {
			delay *= 2
		}
	}
}

// Ctx is a context for a test's calls: it bounds a call that hangs, not how
// long the test may take (its waits have their own deadlines), so it is
// generous for a slow, loaded machine.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Errorf is fmt.Errorf, for WaitFor conditions.
var Errorf = fmt.Errorf

// Client opens a jetflow.Client on nc, writing as name, logging to t.
func Client(t testing.TB, nc *nats.Conn, name string) *jetflow.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := jetflow.NewClient(ctx, nc, jetflow.ClientOptions{Name: name, Logger: Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// HoldingWorker starts an in-process worker id of namespace ns on srv
// whose handler of jobType holds each job it claims until the test ends
// (a 3 s lease: its record's claims are beaten every second).
func HoldingWorker(t testing.TB, srv *server.Server, id, ns, jobType string) {
	t.Helper()
	release := make(chan struct{})
	rt, err := engine.NewRuntime(Store(t, Conn(t, srv), id), engine.RuntimeConfig{
		WorkerID: id, Namespace: ns, Lease: 3 * time.Second, Log: Logger(t),
		Handlers: map[string]engine.Handler{jobType: func(ctx context.Context, _ *engine.Task) ([]byte, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(Ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		close(release)
		rt.Stop(context.Background())
	})
}
