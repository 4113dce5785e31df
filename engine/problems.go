package engine

import (
	"context"
	"errors"
	"net/http"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/streams"
)

// Problem type slugs: the stable names of jetflow's errors, shared by the
// command protocol and the HTTP API (RFC 9457 "type").
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
)

// Classify maps an error to its problem slug and HTTP status.
func Classify(err error) (slug string, status int) {
	switch {
	case errors.Is(err, commands.ErrInvalidInput):
		return ProblemInvalidInput, http.StatusBadRequest
	case errors.Is(err, commands.ErrNotFound):
		return ProblemNotFound, http.StatusNotFound
	case errors.Is(err, commands.ErrNotClaimant):
		return ProblemNotClaimant, http.StatusConflict
	case errors.Is(err, commands.ErrInvalidTransition):
		return ProblemInvalidTransition, http.StatusConflict
	case errors.Is(err, streams.ErrConflict):
		return ProblemConflict, http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded):
		return ProblemTimeout, http.StatusGatewayTimeout
	}
	return ProblemInternal, http.StatusInternalServerError
}
