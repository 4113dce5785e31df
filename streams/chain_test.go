package streams

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/internal/domain"
)

// ChainHash is sha256(prev || data), for events of every size; EventMsg
// puts it in the header and in the event, and a decoder gets it back.
func TestChainHash(t *testing.T) {
	for _, n := range []int{0, 10, 991, 992, 993, 5000} {
		prev, data := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, n)
		want := sha256.Sum256(append(append([]byte(nil), prev...), data...))
		if got := ChainHash(prev, data); !bytes.Equal(got, want[:]) {
			t.Fatalf("%d bytes: %x, want %x", n, got, want)
		}
	}
	ev := &domain.Event{Type: domain.EvSubmitted, JobID: "x", Prev: bytes.Repeat([]byte{7}, 32)}
	m, err := EventMsg("jetflow.ev.a.b.c.x", ev)
	if err != nil {
		t.Fatal(err)
	}
	back, err := DecodeEvent(m.Data)
	if err != nil || !bytes.Equal(back.Hash, ev.Hash) || !bytes.Equal(back.Prev, ev.Prev) ||
		m.Header.Get(HashHeader) != hex.EncodeToString(ev.Hash) || !bytes.Equal(StoredHash(m.Header), ev.Hash) {
		t.Fatalf("%v: %x %x %s", err, back.Hash, ev.Hash, m.Header.Get(HashHeader))
	}
}

// BenchmarkEventMsg is the chain's cost on an append: the message of a
// typical job.succeeded with its chain (EventMsg: prev in the event, the
// sha256 and its hex header) against the same event encoded without it
// (docs/audit.md, "What it costs").
func BenchmarkEventMsg(b *testing.B) {
	ev := func() *domain.Event {
		return &domain.Event{V: domain.EnvelopeVersion, Type: domain.EvSucceeded, JobID: "01JDX5Q4Z8M1N2P3Q4R5S6T7V8",
			Time: time.Date(2026, 11, 29, 4, 0, 0, 123456789, time.UTC), Actor: "worker:w-7f3a", Level: domain.LevelInfo,
			From: domain.StateRunning, To: domain.StateSucceeded, Attempt: 1, Result: []byte(`{"rows":125000}`)}
	}
	const subject = "jetflow.ev.default.default.bench_noop.01JDX5Q4Z8M1N2P3Q4R5S6T7V8"
	prev := bytes.Repeat([]byte{0xab}, HashSize)
	b.Run("chained", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			e := ev()
			e.Prev = prev
			if _, err := EventMsg(subject, e); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unchained", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := EncodeEvent(ev())
			if err != nil {
				b.Fatal(err)
			}
			_ = &nats.Msg{Subject: subject, Data: data}
		}
	})
}
