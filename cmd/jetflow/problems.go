package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/jetflow/jetflow"
)

// The problem types of the CLI's own errors, beside those of the engine
// (jetflow.ProblemOf): the slugs of the HTTP API where one fits.
func problemUsage(field string) *jetflow.Problem {
	return &jetflow.Problem{Type: "usage", Title: "Usage error", Status: http.StatusBadRequest, Field: field}
}

func problemInput(field string) *jetflow.Problem {
	return &jetflow.Problem{Type: "invalid-input", Title: "Invalid input", Status: http.StatusBadRequest, Field: field}
}

func problemUnavailable() *jetflow.Problem {
	return &jetflow.Problem{Type: "unavailable", Title: "Service unavailable", Status: http.StatusServiceUnavailable}
}

func problemTimeout() *jetflow.Problem {
	return &jetflow.Problem{Type: "timeout", Title: "Timeout", Status: http.StatusGatewayTimeout}
}

// errorJSON is an error as --json prints it: {"error": errorJSON}.
type errorJSON struct {
	Type       string              `json:"type"`
	Title      string              `json:"title"`
	Status     int                 `json:"status"`
	Detail     string              `json:"detail"`
	Field      string              `json:"field"`
	Violations []jetflow.Violation `json:"violations,omitempty"`
}

// errorBody is the JSON of a problem (nil: a usage error) whose detail is
// msg.
func errorBody(p *jetflow.Problem, msg string) errorJSON {
	if p == nil {
		p = problemUsage("")
	}
	return errorJSON{Type: p.Type, Title: p.Title, Status: p.Status, Detail: msg, Field: p.Field, Violations: p.Violations}
}

// commandNames are the names of the commands and subcommands (and their
// aliases) that an unknown one is matched against.
func commandNames() []string {
	var names []string
	for _, h := range helps {
		names = append(names, h.name)
		names = append(names, h.aliases...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// unknownCommand reports a command (or, under parent, a subcommand) that
// does not exist, with the one that may have been meant.
func (c *cli) unknownCommand(name, parent string) {
	var cands []string
	for _, n := range commandNames() {
		if parent == "" && !strings.Contains(n, " ") {
			cands = append(cands, n)
		} else if rest, ok := strings.CutPrefix(n, parent+" "); parent != "" && ok {
			cands = append(cands, rest)
		}
	}
	what := "command"
	if parent != "" {
		what = "subcommand"
	}
	msg := fmt.Sprintf("unknown %s %q", what, name)
	if s := suggest(name, cands); s != "" {
		msg += fmt.Sprintf("; did you mean jetflow %s?", strings.TrimSpace(parent+" "+s))
	}
	if parent != "" {
		msg += fmt.Sprintf(" (jetflow %s has: %s)", parent, strings.Join(cands, ", "))
	} else {
		msg += " (jetflow help lists the commands)"
	}
	c.reportAs(problemUsage(""), "%s", msg)
}
