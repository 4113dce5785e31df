package cmdservice

import (
	"errors"
	"testing"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/replay"
	"github.com/jetflow/jetflow/internal/domain"
)

// FuzzHistoryBodies: the bodies of replay and verify (a scope) and
// list_at, JSON or msgpack, decode or are refused with a client's
// problem, and what decodes is checked without a panic: a scope or
// filter, or an InputError.
func FuzzHistoryBodies(f *testing.F) {
	for _, s := range []string{`{"namespace":"acme","since":"2026-11-26T14:02:00Z"}`, `{"job":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`,
		`{"type":"a.b:c","until":"2026-11-26T14:02:00.123456789+02:00"}`, `{"since":"monday"}`, `{"queue":"a b"}`,
		`{"at":"2026-11-26T14:02:00Z","state":"queued","limit":5}`, `{"at":"x","limit":-1}`, `{"settle":"1s","job":"x"}`,
		`{"until":"2020-01-01T00:00:00Z","since":"2021-01-01T00:00:00Z"}`, `[]`, ``} {
		f.Add([]byte(s), true, uint8(0))
		f.Add([]byte(s), false, uint8(1))
	}
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool, which uint8) {
		var v any
		var check func() error
		switch which % 3 {
		case 0:
			req := &scopeFields{}
			v, check = req, func() error { _, err := req.scope(); return err }
		case 1:
			req := &verifyCommand{}
			v, check = req, func() error { _, err := req.scope(); return err }
		default:
			req := &listAtCommand{}
			v, check = req, func() error {
				if _, err := ParseInstant("at", req.At); err != nil {
					return err
				}
				return replay.AtFilter{Namespace: req.Namespace, Queue: req.Queue, Type: req.Type, State: domain.State(req.State), Limit: req.Limit}.Validate()
			}
		}
		if err := decodeCommand(body, asJSON, v); err != nil {
			if p := undecodable("replay", body, asJSON, v, err); p.Status != 400 {
				t.Fatalf("%q: %+v", body, p)
			}
			return
		}
		if err := check(); err != nil && !errors.Is(err, commands.ErrInvalidInput) {
			t.Fatalf("%q: %v", body, err)
		}
	})
}
