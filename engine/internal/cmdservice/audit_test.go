package cmdservice

import (
	"errors"
	"testing"

	"github.com/jetflow/jetflow/commands"
)

// FuzzAuditBodies: the body of audit_verify (the query of GET
// /api/v1/audit/verify is read into the same fields), JSON or msgpack,
// decodes or is refused with a client's problem, and what decodes is
// checked without a panic: a request, or an InputError.
func FuzzAuditBodies(f *testing.F) {
	for _, s := range []string{`{"namespace":"acme","since":"2026-11-26T14:02:00Z"}`, `{"job":"01ARZ3NDEKTSV4RRFFQ69G5FAV"}`,
		`{"type":"a.b:c","until":"2026-11-26T14:02:00.123456789+02:00","queue":"q"}`, `{"since":"monday"}`, `{"queue":"a b"}`,
		`{"pubkey":"NBZ4FGNXYHMNDPQNBVHXKXSMZFLUKHPQE3FGD6GKGLYPHTXLPSRXOJNH"}`, `{"pubkey":"x,y"}`, `{"pubkey":1}`,
		`{"until":"2020-01-01T00:00:00Z","since":"2021-01-01T00:00:00Z"}`, `{"settle":"1s"}`, `[]`, ``} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool) {
		var req AuditFields
		if err := decodeCommand(body, asJSON, &req); err != nil {
			if p := undecodable("audit_verify", body, asJSON, &req, err); p.Status != 400 {
				t.Fatalf("%q: %+v", body, p)
			}
			return
		}
		r, err := req.Request()
		if err != nil {
			if !errors.Is(err, commands.ErrInvalidInput) {
				t.Fatalf("%q: %v", body, err)
			}
			return
		}
		if r.Pubkey != req.Pubkey || r.Scope.Job != req.Job || r.Scope.Namespace != req.Namespace ||
			!r.Since.IsZero() && !r.Until.IsZero() && r.Until.Before(r.Since) {
			t.Fatalf("%q: %+v from %+v", body, r, req)
		}
	})
}
