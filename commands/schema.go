package commands

import (
	"fmt"
	"strings"
)

// Violation is one way a payload breaks its type's schema: where (a JSON
// pointer into the payload) and what.
type Violation struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// SchemaViolationError is a payload refused by its type's schema. It
// matches ErrSchemaViolation.
type SchemaViolationError struct {
	Type       string
	Violations []Violation
}

func (e *SchemaViolationError) Error() string {
	parts := make([]string, len(e.Violations))
	for i, v := range e.Violations {
		parts[i] = fmt.Sprintf("%s: %s", v.Pointer, v.Message)
	}
	return fmt.Sprintf("payload does not satisfy the schema of %s: %s", e.Type, strings.Join(parts, "; "))
}

func (e *SchemaViolationError) Unwrap() error { return ErrSchemaViolation }
