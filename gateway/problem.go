package gateway

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
)

// Problem type slugs of the gateway, next to the engine's (engine.Problem*).
// They are the stable "type" of every error the API answers with.
const (
	ProblemMalformedRequest = "malformed-request"  // bad JSON, wrong field types, unknown fields
	ProblemPayloadTooLarge  = "payload-too-large"  // a body over Config.MaxBodyBytes
	ProblemBadCursor        = "bad-cursor"         // a list cursor this gateway did not hand out
	ProblemMethodNotAllowed = "method-not-allowed" // the route exists, the method does not
	ProblemUnavailable      = "unavailable"        // NATS is unreachable or the index is not loaded yet
	// ProblemRegistrationTooLarge: a worker registration over the limits
	// of types, queues or types × queues (engine.MaxRemote*).
	ProblemRegistrationTooLarge = "registration-too-large"
	// ProblemConcurrencyLimit: a claim of a worker that already holds as
	// many live claims as its registered concurrency.
	ProblemConcurrencyLimit = "concurrency-limit"
	// ProblemOverloaded: the gateway holds Config.MaxStreams open streams
	// and long polls.
	ProblemOverloaded = "overloaded"
	// ProblemCrossOrigin: an unsafe request a browser sent from a page of
	// another origin (CSRF protection).
	ProblemCrossOrigin = "cross-origin"
)

var problemTitles = map[string]string{
	engine.ProblemInvalidInput:      "Invalid input",
	engine.ProblemNotFound:          "Not found",
	engine.ProblemInvalidTransition: "Invalid transition",
	engine.ProblemConflict:          "Conflict",
	engine.ProblemNotClaimant:       "Not the claimant",
	engine.ProblemTimeout:           "Timeout",
	engine.ProblemInternal:          "Internal error",
	ProblemMalformedRequest:         "Malformed request",
	ProblemPayloadTooLarge:          "Payload too large",
	ProblemBadCursor:                "Bad cursor",
	ProblemMethodNotAllowed:         "Method not allowed",
	ProblemUnavailable:              "Service unavailable",
	ProblemRegistrationTooLarge:     "Registration too large",
	ProblemConcurrencyLimit:         "Concurrency limit reached",
	ProblemOverloaded:               "Too many open streams",
	ProblemCrossOrigin:              "Cross-origin request refused",
}

// Problem is an RFC 9457 problem detail: the body of every error response
// (Content-Type application/problem+json).
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	JobID    string `json:"job_id,omitempty"`
	WorkerID string `json:"worker_id,omitempty"`
	Field    string `json:"field,omitempty"` // the offending field of an invalid-input problem
	// State is the job's state an invalid-transition was refused in.
	State string `json:"state,omitempty"`
}

func (p *Problem) Error() string { return p.Type + ": " + p.Detail }

func newProblem(slug string, status int, detail string) *Problem {
	title := problemTitles[slug]
	if title == "" {
		title = strings.ReplaceAll(slug, "-", " ")
	}
	return &Problem{Type: slug, Title: title, Status: status, Detail: detail}
}

// problemOf turns any error into a problem: a *Problem as it is, an engine
// or command error by engine.Classify.
func problemOf(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	slug, status := engine.Classify(err)
	pr := newProblem(slug, status, err.Error())
	var in *commands.InputError
	if errors.As(err, &in) {
		pr.Field = in.Field
	}
	var te *commands.TransitionError
	if errors.As(err, &te) && slug == engine.ProblemInvalidTransition {
		pr.State = string(te.From)
	}
	return pr
}

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
