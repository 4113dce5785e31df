package engine

import (
	"github.com/jetflow/jetflow/engine/internal/problems"
)

// Problem is an RFC 9457 problem detail: the error of a command and the
// body of every error the HTTP API answers.
type Problem = problems.Problem

// Problem type slugs.
const (
	ProblemInvalidInput         = problems.InvalidInput
	ProblemNotFound             = problems.NotFound
	ProblemInvalidTransition    = problems.InvalidTransition
	ProblemNotClaimant          = problems.NotClaimant
	ProblemBadCommand           = problems.BadCommand
	ProblemUnknownCommand       = problems.UnknownCommand
	ProblemInternal             = problems.Internal
	ProblemMalformedRequest     = problems.MalformedRequest
	ProblemPayloadTooLarge      = problems.PayloadTooLarge
	ProblemBadCursor            = problems.BadCursor
	ProblemMethodNotAllowed     = problems.MethodNotAllowed
	ProblemUnavailable          = problems.Unavailable
	ProblemRegistrationTooLarge = problems.RegistrationTooLarge
	ProblemConcurrencyLimit     = problems.ConcurrencyLimit
	ProblemOverloaded           = problems.Overloaded
	ProblemCrossOrigin          = problems.CrossOrigin
	ProblemNoArchive            = problems.NoArchive
	ProblemGone                 = problems.Gone
)

// NewProblem returns a problem of a slug, with its title.
func NewProblem(slug string, status int, detail string) *Problem {
	return problems.New(slug, status, detail)
}

// ProblemOf turns any error into a problem.
func ProblemOf(err error) *Problem { return problems.Of(err) }
