//go:build unix

package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/cmdservice"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// benchCommands starts a command server on its own connection and returns
// a client connection and a job's id.
func benchCommands(b *testing.B) (*nats.Conn, string) {
	b.Helper()
	srv := testkit.Server(b)
	cs := cmdservice.New(engine.Internal(testkit.Store(b, testkit.Conn(b, srv), "engine")), cmdservice.Config{Log: testkit.Logger(b)})
	ctx := context.Background()
	if err := cs.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Stop(context.Background()) })
	nc := testkit.Conn(b, srv)
	res, err := testkit.Store(b, nc, "client").Submit(ctx, &commands.SubmitRequest{Type: "bench.noop", Queue: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	return nc, res.Job.ID
}

// command sends one msgpack command; an error reply is an error.
func command(nc *nats.Conn, verb string, body []byte) error {
	resp, err := nc.Request(streams.CommandPrefix+"."+verb, body, 10*time.Second)
	if err != nil {
		return err
	}
	if bytes.HasPrefix(resp.Data, []byte("\x81\xa5error")) {
		return fmt.Errorf("%s: %q", verb, resp.Data)
	}
	return nil
}

func benchCommand(b *testing.B, verb string, parallel bool) {
	nc, id := benchCommands(b)
	var body []byte
	var err error
	if verb == "get" {
		body, err = streams.Marshal(map[string]any{"id": id})
	} else {
		body, err = streams.Marshal(map[string]any{"type": "bench.noop", "queue": "bench"})
	}
	if err != nil {
		b.Fatal(err)
	}
	if err := command(nc, verb, body); err != nil {
		b.Fatal(err)
	}
	cpu0 := cpuTime(b)
	b.ResetTimer()
	if parallel {
		b.SetParallelism(8) // 8 × GOMAXPROCS clients at once
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := command(nc, verb, body); err != nil {
					b.Error(err)
					return
				}
			}
		})
	} else {
		for range b.N {
			if err := command(nc, verb, body); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cmds/s")
	// The CPU the process spent (client, NATS server and command server
	// alike) tells more than the time on a loaded machine.
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// cpuTime is the CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCommandGet measures get over NATS, one request at a time.
func BenchmarkCommandGet(b *testing.B) { benchCommand(b, "get", false) }

// BenchmarkCommandSubmit measures submit over NATS, one request at a time.
func BenchmarkCommandSubmit(b *testing.B) { benchCommand(b, "submit", false) }

// BenchmarkCommandGetParallel measures get with many requests in flight.
func BenchmarkCommandGetParallel(b *testing.B) { benchCommand(b, "get", true) }

// BenchmarkCommandSubmitParallel measures submit with many requests in flight.
func BenchmarkCommandSubmitParallel(b *testing.B) { benchCommand(b, "submit", true) }
