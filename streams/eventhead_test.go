package streams

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/internal/domain"
)

// The head of an event is DecodeEvent's, without the rest; the same
// refusals.
func TestDecodeEventHead(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(2026, 11, 26, 13, 0, 0, 123, time.UTC), // the 8-byte timestamp
		time.Date(2026, 11, 26, 13, 0, 0, 0, time.UTC),   // 4 bytes
		time.Date(2700, 1, 1, 0, 0, 0, 5, time.UTC),      // 12 bytes
		{},
	} {
		ev := &domain.Event{V: domain.EnvelopeVersion, Type: domain.EvSubmitted, JobID: "j1", Time: at,
			From: domain.StateNew, To: domain.StateQueued, Message: "m", Attempt: 3,
			Fields: map[string]any{"a": []any{1, "x", map[string]any{"b": 2.5}}},
			Spec:   &domain.Spec{Type: "t", Queue: "q", Payload: []byte(`{"big":"payload"}`)}, Prev: bytes.Repeat([]byte{9}, HashSize)}
		data, err := Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		requireSameHead(t, data)
		var head domain.Event
		if err := DecodeEventHead(data, &head); err != nil {
			t.Fatal(err)
		}
		if head.Spec != nil || head.Message != "" || head.Attempt != 0 || head.JobID != "j1" || !head.Time.Equal(at) ||
			head.From != domain.StateNew || head.To != domain.StateQueued || head.Type != domain.EvSubmitted {
			t.Fatalf("%v: head %+v", at, head)
		}
	}
	for _, bad := range []*domain.Event{{Type: "x", JobID: "j"}, {V: 1, JobID: "j"}, {V: 1, Type: "x"}, {V: domain.EnvelopeVersion + 1, Type: "x", JobID: "j"}} {
		b, _ := Marshal(bad)
		_, errFull := DecodeEvent(b)
		var head domain.Event
		if err := DecodeEventHead(b, &head); !errors.Is(err, ErrBadRecord) || errFull == nil {
			t.Errorf("%+v: head %v, full %v", bad, err, errFull)
		}
	}
	for _, garbage := range [][]byte{{0xc1}, {}, {0x81, 0xa1, 'v'}, {0x81, 0xa1, 'v', 0x01, 0x00}, {0x81, 0xa4, 't', 'y', 'p', 'e', 0xdb, 0xff, 0xff, 0xff, 0xff}} {
		var head domain.Event
		if err := DecodeEventHead(garbage, &head); !errors.Is(err, ErrBadRecord) {
			t.Errorf("garbage %x: %v", garbage, err)
		}
	}
	// A field in a form this encoder does not write goes to the general
	// decoder: a version as a uint16, a time as a string is refused by both.
	odd, _ := msgpack.Marshal(map[string]any{"v": uint16(1), "type": "job.submitted", "job": "j", "time": time.Unix(5, 0)})
	requireSameHead(t, odd)
	odd, _ = msgpack.Marshal(map[string]any{"v": 1, "type": "job.submitted", "job": "j", "time": "noon"})
	requireSameHead(t, odd)
}

// requireSameHead: DecodeEventHead accepts what DecodeEvent accepts, and
// reads the same head.
func requireSameHead(t *testing.T, data []byte) {
	t.Helper()
	full, errFull := DecodeEvent(data)
	var head domain.Event
	err := DecodeEventHead(data, &head)
	if (err == nil) != (errFull == nil) {
		t.Fatalf("%x: head %v, full %v", data, err, errFull)
	}
	if err != nil {
		if !errors.Is(err, ErrBadRecord) {
			t.Fatalf("%x: %v is not ErrBadRecord", data, err)
		}
		return
	}
	if head.V != full.V || head.Type != full.Type || head.JobID != full.JobID || !head.Time.Equal(full.Time) ||
		head.From != full.From || head.To != full.To || !bytes.Equal(head.Prev, full.Prev) {
		t.Fatalf("%x: head %+v, full %+v", data, head, full)
	}
}

// FuzzDecodeEventHead: the hand-read head never disagrees with the
// general decoder reading the same fields (it skips the others, as that
// one does: a spec that is not a map is DecodeEvent's to refuse).
func FuzzDecodeEventHead(f *testing.F) {
	for _, ev := range []*domain.Event{
		{V: 1, Type: domain.EvSubmitted, JobID: "j1", Time: time.Unix(1700000000, 7), To: domain.StateQueued,
			Spec: &domain.Spec{Type: "t", Payload: []byte(`{}`)}},
		{V: 1, Type: domain.EvSucceeded, JobID: "j2", Time: time.Unix(1700000000, 0), From: domain.StateRunning, To: domain.StateSucceeded, Result: []byte(`1`),
			Prev: bytes.Repeat([]byte{7}, HashSize)},
	} {
		b, _ := Marshal(ev)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast, general domain.Event
		errFast := scanEventHead(data, &fast)
		if errors.Is(errFast, errHeadForm) {
			return // read by the general decoder
		}
		errGeneral := decodeEventHeadGeneral(data, &general)
		if (errFast == nil) != (errGeneral == nil) {
			t.Fatalf("%x: fast %v, general %v", data, errFast, errGeneral)
		}
		if errFast == nil && (fast.V != general.V || fast.Type != general.Type || fast.JobID != general.JobID ||
			!fast.Time.Equal(general.Time) || fast.From != general.From || fast.To != general.To || !bytes.Equal(fast.Prev, general.Prev)) {
			t.Fatalf("%x: fast %+v, general %+v", data, fast, general)
		}
	})
}
