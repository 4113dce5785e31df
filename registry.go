package jetflow

import (
	"context"
	"errors"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
)

// ParseTypeName reads a full name scope:category:name and checks each part
// (an *InputError naming the part otherwise), without asking the registry.
func ParseTypeName(fullName string) (TypeName, error) {
	n, err := commands.ParseTypeName(fullName)
	return TypeName{Scope: n.Scope, Category: n.Category, Name: n.Name}, publicErr(err)
}

// CheckNamespace refuses a namespace id that cannot be one: empty, with
// '@' or ':', or not 1-64 of [A-Za-z0-9_-] (an *InputError of the field
// "namespace").
func CheckNamespace(ns string) error { return publicErr(commands.CheckNamespace(ns)) }

// Type returns a registered type by its full name, soft-deleted or not; one
// never registered is an error matching ErrNotFound (problem type
// unknown-type).
func (c *Client) Type(ctx context.Context, fullName string) (*TypeInfo, error) {
	n, err := commands.ParseTypeName(fullName)
	if err != nil {
		return nil, publicErr(err)
	}
	t, err := c.b.typ(ctx, n)
	if err != nil {
		return nil, publicErr(err)
	}
	return typeInfo(t), nil
}

// ProblemOf classifies an error of the Client or the Worker as the HTTP API
// would answer it; any error has one (internal for the unknown).
func ProblemOf(err error) *Problem {
	if err == nil {
		return nil
	}
	var p *Problem
	if errors.As(err, &p) {
		return p
	}
	return problemOf(engine.ProblemOf(err))
}
