package streams

import (
	"errors"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// The head of an event is DecodeEvent's, without the rest; the same
// refusals.
func TestDecodeEventHead(t *testing.T) {
	at := time.Date(2026, 11, 26, 13, 0, 0, 123, time.UTC)
	ev := &domain.Event{V: domain.EnvelopeVersion, Type: domain.EvSubmitted, JobID: "j1", Time: at,
		From: domain.StateNew, To: domain.StateQueued, Message: "m",
		Spec: &domain.Spec{Type: "t", Queue: "q", Payload: []byte(`{"big":"payload"}`)}}
	data, err := Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	full, err := DecodeEvent(data)
	if err != nil {
		t.Fatal(err)
	}
	head, err := DecodeEventHead(data)
	if err != nil {
		t.Fatal(err)
	}
	want := domain.Event{V: full.V, Type: full.Type, JobID: full.JobID, Time: full.Time, From: full.From, To: full.To}
	if head.Spec != nil || head.Message != "" || head.V != want.V || head.Type != want.Type || head.JobID != want.JobID ||
		!head.Time.Equal(want.Time) || head.From != want.From || head.To != want.To {
		t.Fatalf("head %+v, want %+v", head, want)
	}
	for _, bad := range []*domain.Event{{Type: "x", JobID: "j"}, {V: 1, JobID: "j"}, {V: 1, Type: "x"}, {V: domain.EnvelopeVersion + 1, Type: "x", JobID: "j"}} {
		b, _ := Marshal(bad)
		_, errFull := DecodeEvent(b)
		if _, err := DecodeEventHead(b); !errors.Is(err, ErrBadRecord) || errFull == nil {
			t.Errorf("%+v: head %v, full %v", bad, err, errFull)
		}
	}
	if _, err := DecodeEventHead([]byte{0xc1}); !errors.Is(err, ErrBadRecord) {
		t.Errorf("garbage: %v", err)
	}
}
