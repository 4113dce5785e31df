package engine_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// BenchmarkSubmitBatch measures pipelined submits (event, record, work item
// per job) in batches of 1000, against file storage: of a free-form type,
// and of a registered type whose schema every payload is validated
// against (resolved and validated from the registry's cache).
func BenchmarkSubmitBatch(b *testing.B) {
	b.Run("free-form", func(b *testing.B) { benchSubmit(b, "bench.noop", nil) })
	b.Run("registered", func(b *testing.B) {
		benchSubmit(b, "bench:noop", []byte(`{"type":"object","required":["n"],"properties":{"n":{"type":"integer","minimum":0}}}`))
	})
}

func benchSubmit(b *testing.B, jobType string, schema []byte) {
	srv := testkit.Server(b)
	st := testkit.Store(b, testkit.Conn(b, srv), "bench")
	ctx := context.Background()
	if schema != nil {
		n, err := commands.ParseTypeName("default:" + jobType)
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := st.Types.Register(ctx, commands.TypeDef{Name: n, Schema: schema}, "bench"); err != nil {
			b.Fatal(err)
		}
	}
	reqs := make([]*commands.SubmitRequest, 1000)
	for i := range reqs {
		reqs[i] = &commands.SubmitRequest{Type: jobType, Queue: "bench", Payload: commands.RawJSON(`{"n":1}`)}
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += len(reqs) {
		n := min(len(reqs), b.N-done)
		for _, r := range st.SubmitBatch(ctx, reqs[:n]) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkClaimRunComplete measures the worker side: b.N queued no-op jobs
// drained by 64 concurrent handlers (claim, run, complete, ack).
func BenchmarkClaimRunComplete(b *testing.B) {
	srv := testkit.Server(b)
	st := testkit.Store(b, testkit.Conn(b, srv), "bench")
	ctx := context.Background()
	reqs := make([]*commands.SubmitRequest, b.N)
	for i := range reqs {
		reqs[i] = &commands.SubmitRequest{Type: "bench.noop", Queue: "bench"}
	}
	for i := 0; i < len(reqs); i += 1000 {
		for _, r := range st.SubmitBatch(ctx, reqs[i:min(i+1000, len(reqs))]) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
	var done atomic.Int64
	all := make(chan struct{})
	wst := testkit.Store(b, testkit.Conn(b, srv), "worker")
	b.ResetTimer()
	rt, err := engine.NewRuntime(wst, engine.RuntimeConfig{Queue: "bench", WorkerID: "w", Concurrency: 64, Log: testkit.Logger(b),
		Handlers: map[string]engine.Handler{"bench.noop": func(context.Context, *engine.Task) ([]byte, error) { return nil, nil }},
		OnOutcome: func(j *domain.Job, _ *domain.Event) {
			if done.Add(1) == int64(b.N) {
				close(all)
			}
		}})
	if err != nil {
		b.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		b.Fatal(err)
	}
	<-all
	b.StopTimer()
	rt.Stop(ctx)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
}
