package streams

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"testing"

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
