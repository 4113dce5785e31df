package audit

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// BenchmarkVerifierAdd: a verifier fed jobs of three chained events each
// (as a bench's log is), per event.
func BenchmarkVerifierAdd(b *testing.B) {
	benchLogOnce.Do(func() { benchLog = makeBenchLog(b) })
	msgs := benchLog
	b.ReportAllocs()
	b.ResetTimer()
	n := 0
	for n < b.N {
		v := NewVerifier("", true)
		for i, m := range msgs {
			if n == b.N {
				break
			}
			v.Add(uint64(i+1), m.subject, m.stored, m.data)
			n++
		}
		if r := v.Finish(); !r.OK() {
			b.Fatal(r.Findings[0])
		}
	}
}

type benchMsg struct {
	subject      string
	stored, data []byte
}

var (
	benchLogOnce sync.Once
	benchLog     []benchMsg
)

func makeBenchLog(b *testing.B) []benchMsg {
	const jobs = 50_000
	msgs := make([]benchMsg, 0, 3*jobs)
	for j := range jobs {
		id := fmt.Sprintf("job-%08d", j)
		subject := "jetflow.ev.default.default.bench_noop." + id
		var prev []byte
		for _, typ := range []string{domain.EvSubmitted, domain.EvStarted, domain.EvSucceeded} {
			ev := &domain.Event{V: domain.EnvelopeVersion, Type: typ, JobID: id, Time: time.Unix(1_800_000_000, 0), Prev: prev,
				Actor: "engine", Message: "a message of ordinary length"}
			data, err := streams.EncodeEvent(ev)
			if err != nil {
				b.Fatal(err)
			}
			h := streams.ChainHash(prev, data)
			msgs = append(msgs, benchMsg{subject, h, data})
			prev = h
		}
	}
	return msgs
}
