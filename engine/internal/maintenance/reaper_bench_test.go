package maintenance_test

import (
	"testing"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// BenchmarkReaperReads compares what the Reaper pays to read one job
// (Store.Current, a look) with what a read of the whole bucket pays per
// record (Store.Scan): their ratio is the Reaper's lookCost. Both report
// ns per job read; the CPU is the process's (client and embedded server).
//
//	go test -run '^$' -bench ReaperReads -benchtime 5000x ./engine/internal/maintenance/
func BenchmarkReaperReads(b *testing.B) {
	srv := testkit.Server(b)
	ctx := testkit.Ctx(b)
	st := storetest.Open(b, testkit.Conn(b, srv), "bench")
	const jobs = 2000
	ids := make([]string, 0, jobs)
	for i := 0; i < jobs; i++ {
		sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, sub.Job.ID)
	}
	b.Run("look", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := st.Current(ctx, ids[i%jobs]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("read-per-record", func(b *testing.B) {
		n := 0
		for n < b.N {
			if err := st.Scan(ctx, func(*domain.Job) { n++ }); err != nil {
				b.Fatal(err)
			}
		}
	})
}
