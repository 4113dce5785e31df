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
