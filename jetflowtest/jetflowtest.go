// Package jetflowtest runs a whole jetflow inside a test: an embedded NATS
// server with JetStream in a temporary directory (in-process, no port), an
// engine, a client and a worker, torn down when the test ends.
//
//	env := jetflowtest.New(t)
//	jetflow.Register(env.Worker, "greet", greet)
//	env.Start()
//
// Then submit with env.Client and wait with env.Wait. Nothing is mocked: it
// is the same server, engine and worker as in production.
package jetflowtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow"
)

// Env is one embedded jetflow.
type Env struct {
	Client *jetflow.Client
	// Worker runs the handlers registered on it once Start is called.
	Worker *jetflow.Worker
	Engine *jetflow.Engine

	srv *server.Server
	nc  *nats.Conn
	dir string
}

// Options configure an Env. The zero value means defaults.
type Options struct {
	Worker jetflow.WorkerConfig // the worker's configuration
}

// Open starts an Env (for Example functions and TestMain, which have no
// *testing.T); Close tears it down.
func Open(o Options) (*Env, error) {
	dir, err := os.MkdirTemp("", "jetflowtest-")
	if err != nil {
		return nil, err
	}
	e := &Env{dir: dir}
	if e.srv, err = jetflow.StartServer(jetflow.ServerConfig{Dir: dir}); err != nil {
		e.Close()
		return nil, err
	}
	if e.nc, err = jetflow.ConnectInProcess(e.srv, "jetflowtest"); err != nil {
		e.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.Client, err = jetflow.NewClient(ctx, e.nc, jetflow.ClientOptions{Name: "jetflowtest"}); err != nil {
		e.Close()
		return nil, err
	}
	e.Engine = jetflow.NewEngine(e.Client, jetflow.EngineConfig{ProjectorLag: 100 * time.Millisecond})
	if err := e.Engine.Start(ctx); err != nil {
		e.Engine = nil
		e.Close()
		return nil, err
	}
	e.Worker = jetflow.NewWorker(e.Client, o.Worker)
	return e, nil
}

// New starts an Env for t, closed when t ends.
func New(t testing.TB, o ...Options) *Env {
	t.Helper()
	var opts Options
	if len(o) > 0 {
		opts = o[0]
	}
	e, err := Open(opts)
	if err != nil {
		t.Fatalf("jetflowtest: %v", err)
	}
	t.Cleanup(e.Close)
	return e
}

// Start starts the worker with the handlers registered on it.
func (e *Env) Start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return e.Worker.Start(ctx)
}

// Wait waits until job id is terminal and returns it; a job still not
// terminal after timeout is an error.
func (e *Env) Wait(id string, timeout time.Duration) (*jetflow.JobInfo, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	j, err := e.Client.Wait(ctx, id)
	if errors.Is(err, context.DeadlineExceeded) {
		cur, _ := e.Client.Get(context.Background(), id)
		if cur != nil {
			return cur, fmt.Errorf("job %s is %s after %s", id, cur.State, timeout)
		}
	}
	return j, err
}

// Close stops the worker, the engine and the server, and removes the data.
func (e *Env) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.Worker != nil {
		e.Worker.Stop(ctx)
	}
	if e.Engine != nil {
		e.Engine.Stop(ctx)
	}
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		e.srv.Shutdown()
		e.srv.WaitForShutdown()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}
