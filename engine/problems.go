package engine

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Problem type slugs: the stable names of jetflow's errors, shared by the
// command protocol and the HTTP API (RFC 9457 "type"). The HTTP API adds
// its own; every slug has its title in titles.
const (
	ProblemInvalidInput      = "invalid-input"
	ProblemNotFound          = "not-found"
	ProblemInvalidTransition = "invalid-transition"
	ProblemConflict          = "conflict"
	ProblemNotClaimant       = "not-claimant"
	ProblemBadCommand        = "bad-command"
	ProblemUnknownCommand    = "unknown-command"
	ProblemTimeout           = "timeout"
	ProblemInternal          = "internal"

	// The HTTP API's own.
	ProblemMalformedRequest = "malformed-request"  // bad JSON, wrong field types, unknown fields
	ProblemPayloadTooLarge  = "payload-too-large"  // a body over the gateway's MaxBodyBytes
	ProblemBadCursor        = "bad-cursor"         // a list cursor the gateway did not hand out
	ProblemMethodNotAllowed = "method-not-allowed" // the route exists, the method does not
	ProblemUnavailable      = "unavailable"        // NATS is unreachable or the index is not loaded yet
	// ProblemRegistrationTooLarge: a worker registration over the limits
	// of types, queues or types × queues (MaxRemote*).
	ProblemRegistrationTooLarge = "registration-too-large"
	// ProblemConcurrencyLimit: a claim of a worker that already holds as
	// many live claims as its registered concurrency.
	ProblemConcurrencyLimit = "concurrency-limit"
	// ProblemOverloaded: the gateway holds its most open streams and long
	// polls.
	ProblemOverloaded = "overloaded"
	// ProblemCrossOrigin: an unsafe request a browser sent from a page of
	// another origin (CSRF protection).
	ProblemCrossOrigin = "cross-origin"
	// ProblemNoArchive: a job that ended without a result archive
	// (GET /jobs/{id}/download).
	ProblemNoArchive = "no-archive"
	// ProblemGone: a job that retention purged (410); the problem names
	// when (purged_at).
	ProblemGone = "gone"
)

// titles are the titles of the problem types, by slug: one table for the
// command protocol and the HTTP API.
var titles = map[string]string{
	ProblemInvalidInput:      "Invalid input",
	ProblemNotFound:          "Not found",
	ProblemGone:              "Gone: purged by retention",
	ProblemInvalidTransition: "Invalid transition",
	ProblemConflict:          "Conflict",
	ProblemNotClaimant:       "Not the claimant",
	ProblemBadCommand:        "Bad command",
	ProblemUnknownCommand:    "Unknown command",
	ProblemTimeout:           "Timeout",
	ProblemInternal:          "Internal error",

	ProblemMalformedRequest:     "Malformed request",
	ProblemPayloadTooLarge:      "Payload too large",
	ProblemBadCursor:            "Bad cursor",
	ProblemMethodNotAllowed:     "Method not allowed",
	ProblemUnavailable:          "Service unavailable",
	ProblemRegistrationTooLarge: "Registration too large",
	ProblemConcurrencyLimit:     "Concurrency limit reached",
	ProblemOverloaded:           "Too many open streams",
	ProblemCrossOrigin:          "Cross-origin request refused",
	ProblemNoArchive:            "No result archive",

	"invalid-namespace": "Invalid namespace",
	"unauthenticated":   "No valid token",
	"forbidden":         "Not allowed",
	"unknown-token":     "Unknown token",
	"invalid-category":  "Invalid category",
	"invalid-type-name": "Invalid type name",
	"invalid-schema":    "Invalid schema",
	"schema-violation":  "Payload violates the type's schema",
	"schema-conflict":   "Type registered with another schema",
	"unknown-type":      "Unknown type",
	"internal-type":     "Internal type",
	"type-limit":        "Too many types in the scope",
	"invalid-file-name": "Invalid file name",
	"user-not-allowed":  "Not allowed to submit for another user",
}

// registryStatus is the HTTP status of each problem type of the registry.
var registryStatus = map[string]int{
	"invalid-namespace": http.StatusBadRequest,
	"invalid-category":  http.StatusBadRequest,
	"invalid-type-name": http.StatusBadRequest,
	"invalid-schema":    http.StatusUnprocessableEntity,
	"schema-violation":  http.StatusUnprocessableEntity,
	"schema-conflict":   http.StatusConflict,
	"unknown-type":      http.StatusNotFound,
	"internal-type":     http.StatusForbidden,
	"type-limit":        http.StatusConflict,
	"unauthenticated":   http.StatusUnauthorized,
	"forbidden":         http.StatusForbidden,
	"unknown-token":     http.StatusNotFound,
	"invalid-file-name": http.StatusBadRequest,
	"user-not-allowed":  http.StatusForbidden,
}

// Problem is an RFC 9457 problem detail: the error of a command (the
// "error" of its reply) and the body of every error the HTTP API answers.
type Problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail,omitempty"`
	Instance string `json:"instance,omitempty"`
	JobID    string `json:"job_id,omitempty"`
	WorkerID string `json:"worker_id,omitempty"`
	// Field names the refused field of an invalid-input problem, and the
	// field whose value did not decode of a malformed-request one, when known.
	Field string `json:"field,omitempty"`
	// State is the job's state an invalid-transition was refused in.
	State string `json:"state,omitempty"`
	// PurgedAt is when retention purged the job of a gone problem.
	PurgedAt *time.Time `json:"purged_at,omitempty"`
	// Violations are what a payload's schema refused, each with a JSON
	// pointer into the payload (schema-violation).
	Violations []Violation `json:"violations,omitempty"`
}

func (p *Problem) Error() string { return p.Type + ": " + p.Detail }

// Is makes a problem that came over the wire (a command's reply, an HTTP
// answer) match the sentinel errors its type stands for, as the error it
// was made from did: errors.Is(p, commands.ErrNotFound) for not-found,
// unknown-type and unknown-token; ErrInvalidInput for invalid-input and
// the registry's input problems; commands.ErrUnknownType for unknown-type;
// and so on.
func (p *Problem) Is(target error) bool {
	if slug := commands.RegistrySlug(target); slug != "" {
		return slug == p.Type
	}
	switch target {
	case commands.ErrGone:
		return p.Type == ProblemGone
	case commands.ErrNotFound:
		return p.Type == ProblemNotFound || p.Type == ProblemGone || p.Type == "unknown-type" || p.Type == "unknown-token"
	case commands.ErrInvalidInput:
		return p.Type == ProblemInvalidInput || registryStatus[p.Type] == http.StatusBadRequest ||
			p.Type == "invalid-schema" || p.Type == "schema-violation" || p.Type == "internal-type"
	case commands.ErrInvalidTransition:
		return p.Type == ProblemInvalidTransition
	case commands.ErrTerminal:
		return p.Type == ProblemInvalidTransition && domain.State(p.State).Terminal()
	case commands.ErrNotClaimant:
		return p.Type == ProblemNotClaimant
	case commands.ErrConflict:
		return p.Type == ProblemConflict || p.Type == "schema-conflict" || p.Type == "type-limit"
	case commands.ErrDenied:
		return p.Type == "unauthenticated" || p.Type == "forbidden" || p.Type == "user-not-allowed"
	case context.DeadlineExceeded:
		return p.Type == ProblemTimeout
	}
	return false
}

// NewProblem returns a problem of a slug, with its title.
func NewProblem(slug string, status int, detail string) *Problem {
	title := titles[slug]
	if title == "" {
		title = strings.ReplaceAll(slug, "-", " ")
	}
	return &Problem{Type: slug, Title: title, Status: status, Detail: detail}
}

// ProblemOf turns any error into a problem: a *Problem as it is, a command
// or engine error by Classify, naming the field of an input error and the
// state of a refused transition.
func ProblemOf(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	slug, status := Classify(err)
	pr := NewProblem(slug, status, err.Error())
	var in *commands.InputError
	if errors.As(err, &in) {
		pr.Field = in.Field
	}
	var te *commands.TransitionError
	if errors.As(err, &te) && slug == ProblemInvalidTransition {
		pr.State = string(te.From)
	}
	var gone *commands.GoneError
	if errors.As(err, &gone) {
		at := gone.At.UTC()
		pr.PurgedAt = &at
	}
	var sv *SchemaViolationError
	if errors.As(err, &sv) {
		pr.Violations = sv.Violations
		pr.Field = "payload"
	}
	return pr
}

// Classify maps an error to its problem slug and HTTP status.
func Classify(err error) (slug string, status int) {
	if slug := commands.RegistrySlug(err); slug != "" {
		return slug, registryStatus[slug]
	}
	switch {
	case errors.Is(err, commands.ErrInvalidInput):
		return ProblemInvalidInput, http.StatusBadRequest
	case errors.Is(err, commands.ErrGone):
		return ProblemGone, http.StatusGone
	case errors.Is(err, commands.ErrNotFound):
		return ProblemNotFound, http.StatusNotFound
	case errors.Is(err, commands.ErrNotClaimant):
		return ProblemNotClaimant, http.StatusConflict
	case errors.Is(err, commands.ErrInvalidTransition):
		return ProblemInvalidTransition, http.StatusConflict
	case errors.Is(err, domain.ErrConflict):
		return ProblemConflict, http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded):
		return ProblemTimeout, http.StatusGatewayTimeout
	}
	return ProblemInternal, http.StatusInternalServerError
}
