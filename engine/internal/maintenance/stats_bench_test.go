package maintenance_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// BenchmarkStatsFoldEvent is what the statistics keeper spends on one event
// of the log once it is delivered (decode its move, fold it, count it in
// its slots): a plain job's submit, start and success, in log order.
// go test -run '^$' -bench StatsFoldEvent -benchmem ./engine/internal/maintenance/
func BenchmarkStatsFoldEvent(b *testing.B) {
	srv := testkit.Server(b)
	ctx := testkit.Ctx(b)
	fold, err := maintenance.StatsFolder(ctx, storetest.Open(b, testkit.Conn(b, srv), "bench"))
	if err != nil {
		b.Fatal(err)
	}
	const jobs = 1000
	type msg struct {
		subject string
		data    []byte
	}
	var msgs []msg
	now := time.Now()
	spec := &domain.Spec{Type: "bench", Queue: "default", Payload: []byte(`{"n":1}`)}
	for i := range jobs {
		id := fmt.Sprintf("job%06d", i)
		subj := streams.EventSubject("", "default", "bench", id)
		for _, ev := range []*domain.Event{
			{Type: domain.EvSubmitted, JobID: id, Time: now, To: domain.StateQueued, Spec: spec},
			{Type: domain.EvStarted, JobID: id, Time: now, From: domain.StateQueued, To: domain.StateRunning, Attempt: 1, Lease: 7},
			{Type: domain.EvSucceeded, JobID: id, Time: now, From: domain.StateRunning, To: domain.StateSucceeded, Attempt: 1},
		} {
			data, err := streams.EncodeEvent(ev)
			if err != nil {
				b.Fatal(err)
			}
			msgs = append(msgs, msg{subj, data})
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		m := msgs[i%len(msgs)]
		if err := fold(m.subject, m.data, uint64(i+1)); err != nil {
			b.Fatal(err)
		}
	}
}
