// Package problems names jetflow's errors: the problem types (RFC 9457)
// that the command protocol and the HTTP API answer, and which error is
// which, with the status each has (an HTTP status code, as a plain number:
// the gateway answers with it, the command service puts it in a header).
package problems

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Problem type slugs: the stable names of jetflow's errors, shared by the
// command protocol and the HTTP API (RFC 9457 "type"). The HTTP API adds
// its own; every slug has its title in titles.
const (
	InvalidInput      = "invalid-input"
	NotFound          = "not-found"
	InvalidTransition = "invalid-transition"
	conflict          = "conflict"
	NotClaimant       = "not-claimant"
	BadCommand        = "bad-command"
	UnknownCommand    = "unknown-command"
	timeout           = "timeout"
	Internal          = "internal"

	// The HTTP API's own.
	MalformedRequest = "malformed-request"  // bad JSON, wrong field types, unknown fields
	PayloadTooLarge  = "payload-too-large"  // a body over the gateway's MaxBodyBytes
	BadCursor        = "bad-cursor"         // a list cursor the gateway did not hand out
	MethodNotAllowed = "method-not-allowed" // the route exists, the method does not
	Unavailable      = "unavailable"        // NATS is unreachable or the index is not loaded yet
	// RegistrationTooLarge: a worker registration over the limits
	// of types, queues or types × queues (MaxRemote*).
	RegistrationTooLarge = "registration-too-large"
	// ConcurrencyLimit: a claim of a worker that already holds as
	// many live claims as its registered concurrency.
	ConcurrencyLimit = "concurrency-limit"
	// Overloaded: the gateway holds its most open streams and long
	// polls.
	Overloaded = "overloaded"
	// CrossOrigin: an unsafe request a browser sent from a page of
	// another origin (CSRF protection).
	CrossOrigin = "cross-origin"
	// NoArchive: a job that ended without a result archive
	// (GET /jobs/{id}/download).
	NoArchive = "no-archive"
	// Gone: a job that retention purged (410); the problem names
	// when (purged_at).
	Gone = "gone"
)

// titles are the titles of the problem types, by slug: one table for the
// command protocol and the HTTP API.
var titles = map[string]string{
	InvalidInput:      "Invalid input",
	NotFound:          "Not found",
	Gone:              "Gone: purged by retention",
	InvalidTransition: "Invalid transition",
	conflict:          "Conflict",
	NotClaimant:       "Not the claimant",
	BadCommand:        "Bad command",
	UnknownCommand:    "Unknown command",
	timeout:           "Timeout",
	Internal:          "Internal error",

	MalformedRequest:     "Malformed request",
	PayloadTooLarge:      "Payload too large",
	BadCursor:            "Bad cursor",
	MethodNotAllowed:     "Method not allowed",
	Unavailable:          "Service unavailable",
	RegistrationTooLarge: "Registration too large",
	ConcurrencyLimit:     "Concurrency limit reached",
	Overloaded:           "Too many open streams",
	CrossOrigin:          "Cross-origin request refused",
	NoArchive:            "No result archive",

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
	"invalid-workflow":  "Invalid workflow",
}

// registryStatus is the status of each problem type of the registry.
var registryStatus = map[string]int{
	"invalid-namespace": 400,
	"invalid-category":  400,
	"invalid-type-name": 400,
	"invalid-schema":    422,
	"schema-violation":  422,
	"schema-conflict":   409,
	"unknown-type":      404,
	"internal-type":     403,
	"type-limit":        409,
	"unauthenticated":   401,
	"forbidden":         403,
	"unknown-token":     404,
	"invalid-file-name": 400,
	"user-not-allowed":  403,
	"invalid-workflow":  400,
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
	Violations []commands.Violation `json:"violations,omitempty"`
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
		return p.Type == Gone
	case commands.ErrNotFound:
		return p.Type == NotFound || p.Type == Gone || p.Type == "unknown-type" || p.Type == "unknown-token"
	case commands.ErrInvalidInput:
		return p.Type == InvalidInput || registryStatus[p.Type] == 400 ||
			p.Type == "invalid-schema" || p.Type == "schema-violation" || p.Type == "internal-type"
	case commands.ErrInvalidTransition:
		return p.Type == InvalidTransition
	case commands.ErrTerminal:
		return p.Type == InvalidTransition && domain.State(p.State).Terminal()
	case commands.ErrNotClaimant:
		return p.Type == NotClaimant
	case commands.ErrConflict:
		return p.Type == conflict || p.Type == "schema-conflict" || p.Type == "type-limit"
	case commands.ErrDenied:
		return p.Type == "unauthenticated" || p.Type == "forbidden" || p.Type == "user-not-allowed"
	case context.DeadlineExceeded:
		return p.Type == timeout
	}
	return false
}

// New returns a problem of a slug, with its title.
func New(slug string, status int, detail string) *Problem {
	title := titles[slug]
	if title == "" {
		title = strings.ReplaceAll(slug, "-", " ")
	}
	return &Problem{Type: slug, Title: title, Status: status, Detail: detail}
}

// Of turns any error into a problem: a *Problem as it is, a command
// or engine error by classify, naming the field of an input error and the
// state of a refused transition.
func Of(err error) *Problem {
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	slug, status := classify(err)
	pr := New(slug, status, err.Error())
	var in *commands.InputError
	if errors.As(err, &in) {
		pr.Field = in.Field
	}
	var te *commands.TransitionError
	if errors.As(err, &te) && slug == InvalidTransition {
		pr.State = string(te.From)
	}
	var gone *commands.GoneError
	if errors.As(err, &gone) {
		at := gone.At.UTC()
		pr.PurgedAt = &at
	}
	var sv *commands.SchemaViolationError
	if errors.As(err, &sv) {
		pr.Violations = sv.Violations
		pr.Field = "payload"
	}
	return pr
}

// classify maps an error to its problem slug and status (an HTTP status
// code).
func classify(err error) (slug string, status int) {
	if slug := commands.RegistrySlug(err); slug != "" {
		return slug, registryStatus[slug]
	}
	switch {
	case errors.Is(err, commands.ErrInvalidInput):
		return InvalidInput, 400
	case errors.Is(err, commands.ErrGone):
		return Gone, 410
	case errors.Is(err, commands.ErrNotFound):
		return NotFound, 404
	case errors.Is(err, commands.ErrNotClaimant):
		return NotClaimant, 409
	case errors.Is(err, commands.ErrInvalidTransition):
		return InvalidTransition, 409
	case errors.Is(err, domain.ErrConflict):
		return conflict, 409
	case errors.Is(err, context.DeadlineExceeded):
		return timeout, 504
	}
	return Internal, 500
}
