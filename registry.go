package jetflow

import (
	"context"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/projections"
)

// TypeName is a registered type's full name: Scope:Category:Name, the
// scope a namespace, "@global" or "@internal".
type TypeName = commands.TypeName

// ParseTypeName reads a full name scope:category:name and checks each part
// (an *InputError naming the part otherwise), without asking the registry.
func ParseTypeName(fullName string) (TypeName, error) { return commands.ParseTypeName(fullName) }

// CheckNamespace refuses a namespace id that cannot be one: empty, with
// '@' or ':', or not 1-64 of [A-Za-z0-9_-] (an *InputError of the field
// "namespace").
func CheckNamespace(ns string) error { return commands.CheckNamespace(ns) }

// Type returns a registered type by its full name, soft-deleted or not; one
// never registered is an error matching ErrNotFound (problem type
// unknown-type).
func (c *Client) Type(ctx context.Context, fullName string) (*TypeInfo, error) {
	n, err := commands.ParseTypeName(fullName)
	if err != nil {
		return nil, err
	}
	if c.store == nil {
		return nil, c.needsEngine("type")
	}
	t, err := c.store.Types.Type(ctx, n)
	if err != nil {
		return nil, err
	}
	return projections.ViewType(t), nil
}

// Problem is an error as the HTTP API and the command protocol answer it
// (RFC 9457): a stable Type slug (schema-violation, schema-conflict,
// unknown-type, ...), its HTTP Status, the Detail, the Field refused, and
// for a payload refused by its type's schema, each Violation.
type Problem = engine.Problem

// Violation is one way a payload breaks its type's schema: a JSON pointer
// into the payload and the message.
type Violation = engine.Violation

// ProblemOf classifies an error of the Client or the Worker as the HTTP API
// would answer it; any error has one (internal for the unknown).
func ProblemOf(err error) *Problem {
	if err == nil {
		return nil
	}
	return engine.ProblemOf(err)
}
