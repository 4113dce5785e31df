package streams

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/jetflow/jetflow/internal/domain"

	"github.com/nats-io/nats.go"
)

// The hash chain (docs/audit.md). Every event carries in its bytes the
// hash of the event before it on its subject (Event.Prev), and its own
// hash, sha256(Prev || the event's msgpack bytes as stored), in the
// message header HashHeader. The bytes hashed are the stored bytes
// themselves, not a re-encoding, so that a reader needs no canonical
// encoder (msgpack maps have no fixed order) and verifies at the speed of
// sha256. The hash of the last event folded into a record is in the
// record (Job.LastHash, ...), so that a writer knows the next Prev
// without reading.
const HashHeader = "Jetflow-Hash"

// HashSize is the size of a chain hash.
const HashSize = sha256.Size

// ChainHash is an event's hash: sha256(prev || data), data the event's
// bytes as stored.
func ChainHash(prev, data []byte) []byte {
	sum := ChainSum(prev, data)
	out := make([]byte, HashSize)
	copy(out, sum[:])
	return out
}

// ChainSum is ChainHash as an array (no allocation).
func ChainSum(prev, data []byte) (sum [HashSize]byte) {
	if n := len(prev) + len(data); n <= 1024 {
		var buf [1024]byte // most events: no hasher to allocate
		copy(buf[copy(buf[:], prev):], data)
		sum = sha256.Sum256(buf[:n])
	} else {
		h := sha256.New()
		h.Write(prev)
		h.Write(data)
		h.Sum(sum[:0])
	}
	return sum
}

// EventMsg encodes ev (whose Prev is set) into the message that appends
// it to subject, with its hash in the header, and sets ev.Hash.
func EventMsg(subject string, ev *domain.Event) (*nats.Msg, error) {
	data, err := EncodeEvent(ev)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", ev.Type, err)
	}
	ev.Hash = ChainHash(ev.Prev, data)
	return &nats.Msg{Subject: subject, Data: data, Header: nats.Header{HashHeader: []string{hex.EncodeToString(ev.Hash)}}}, nil
}

// StoredHash is the hash a message's header claims (nil: none, or not
// hex of the right size).
func StoredHash(h nats.Header) []byte {
	v := h.Get(HashHeader)
	if len(v) != 2*HashSize {
		return nil
	}
	b, err := hex.DecodeString(v)
	if err != nil {
		return nil
	}
	return b
}

// CheckpointSubject is where the checkpoints of the event log are
// appended (in the events stream, chained like any subject).
const CheckpointSubject = RegistryPrefix + ".audit.checkpoint"
