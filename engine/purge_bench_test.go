package engine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/testkit"
)

// BenchmarkPurgePass measures the Purger on b.N expired jobs (cancelled,
// retention 1 ns), in passes of DefaultPurgeMax: jobs purged per second,
// scans included.
func BenchmarkPurgePass(b *testing.B) {
	srv := testkit.Server(b)
	st := testkit.Store(b, testkit.Conn(b, srv), "bench")
	ctx := context.Background()
	reqs := make([]*commands.SubmitRequest, 1000)
	for i := range reqs {
		reqs[i] = &commands.SubmitRequest{Type: "bench.noop", Queue: "bench"}
	}
	ids := make(chan string, 1024)
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				if _, err := st.Cancel(ctx, id, ""); err != nil {
					b.Error(err)
				}
			}
		}()
	}
	for done := 0; done < b.N; done += len(reqs) {
		for _, r := range st.SubmitBatch(ctx, reqs[:min(len(reqs), b.N-done)]) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			ids <- r.Job.ID
		}
	}
	close(ids)
	wg.Wait()
	p := newPurger(st, engine.PurgerConfig{Retention: time.Nanosecond})
	b.ResetTimer()
	purged := 0
	for purged < b.N {
		n, err := p.Pass(ctx)
		if err != nil || n == 0 {
			b.Fatalf("pass after %d purged: %d, %v", purged, n, err)
		}
		purged += n
	}
	b.ReportMetric(float64(purged)/b.Elapsed().Seconds(), "jobs/s")
}

// BenchmarkPurgerQuietPass measures a pass of the Purger over a bucket of
// 20,000 terminal jobs within their retention (nothing to purge), as it
// runs every interval: "scan" reads the whole bucket each pass (FullScan
// 1 ns: what every pass did before the log was read between scans), "log"
// reads only the log's events that came of age since the last pass.
//
//	go test -run '^$' -bench PurgerQuietPass -benchtime 20x ./engine/
func BenchmarkPurgerQuietPass(b *testing.B) {
	srv := testkit.Server(b)
	st := testkit.Store(b, testkit.Conn(b, srv), "bench")
	ctx := context.Background()
	const jobs = 20000
	reqs := make([]*commands.SubmitRequest, 1000)
	for i := range reqs {
		reqs[i] = &commands.SubmitRequest{Type: "bench.noop", Queue: "bench"}
	}
	for done := 0; done < jobs; done += len(reqs) {
		for _, r := range st.SubmitBatch(ctx, reqs) {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			if _, err := st.Cancel(ctx, r.Job.ID, ""); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, c := range []struct {
		name     string
		fullScan time.Duration
	}{{"scan", time.Nanosecond}, {"log", time.Hour}} {
		b.Run(c.name, func(b *testing.B) {
			p := newPurger(st, engine.PurgerConfig{Retention: time.Hour, FullScan: c.fullScan})
			if _, err := p.Pass(ctx); err != nil { // the first pass scans
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if n, err := p.Pass(ctx); err != nil || n != 0 {
					b.Fatalf("pass: %d, %v", n, err)
				}
			}
			b.ReportMetric(float64(p.Scans()), "scans")
		})
	}
}
