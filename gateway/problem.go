package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/jetflow/jetflow/engine"
)

// Problem type slugs of the HTTP API, next to the command protocol's
// (engine.Problem*; all with their titles in engine.Titles).
const (
	problemMalformedRequest     = engine.ProblemMalformedRequest
	problemPayloadTooLarge      = engine.ProblemPayloadTooLarge
	problemBadCursor            = engine.ProblemBadCursor
	problemMethodNotAllowed     = engine.ProblemMethodNotAllowed
	problemUnavailable          = engine.ProblemUnavailable
	problemRegistrationTooLarge = engine.ProblemRegistrationTooLarge
	problemConcurrencyLimit     = engine.ProblemConcurrencyLimit
	problemOverloaded           = engine.ProblemOverloaded
	problemCrossOrigin          = engine.ProblemCrossOrigin
	problemNoArchive            = engine.ProblemNoArchive
)

// Problem is an RFC 9457 problem detail: the body of every error response
// (Content-Type application/problem+json), the same as a command's error.
type Problem = engine.Problem

func newProblem(slug string, status int, detail string) *Problem {
	return engine.NewProblem(slug, status, detail)
}

// problemOf turns any error into a problem.
func problemOf(err error) *Problem { return engine.ProblemOf(err) }

func writeProblem(w http.ResponseWriter, r *http.Request, p *Problem) {
	if p.Instance == "" && r != nil {
		p.Instance = r.URL.Path
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(p.Status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // a detail says "a -> b", not "a \u003e b"
	_ = enc.Encode(p)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
