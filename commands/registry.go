package commands

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// Errors of the type registry; each matches a broader sentinel too
// (ErrInvalidInput, ErrNotFound, ErrConflict) for callers that only know
// those.
var (
	errInvalidNamespace = &registryError{slug: "invalid-namespace", base: ErrInvalidInput}
	errInvalidCategory  = &registryError{slug: "invalid-category", base: ErrInvalidInput}
	errInvalidTypeName  = &registryError{slug: "invalid-type-name", base: ErrInvalidInput}
	ErrInvalidSchema    = &registryError{slug: "invalid-schema", base: ErrInvalidInput}
	ErrSchemaViolation  = &registryError{slug: "schema-violation", base: ErrInvalidInput}
	ErrSchemaConflict   = &registryError{slug: "schema-conflict", base: ErrConflict}
	ErrUnknownType      = &registryError{slug: "unknown-type", base: ErrNotFound}
	ErrInternalType     = &registryError{slug: "internal-type", base: ErrInvalidInput}
	ErrTypeLimit        = &registryError{slug: "type-limit", base: ErrConflict}
)

// Limits of the registry: a schema's size, and how many types (active or
// deleted) one scope holds.
const (
	MaxSchemaBytes    = 64 << 10
	MaxTypesPerScope  = 1000
	maxDescriptionLen = 1024
)

// registryError is a sentinel of the registry with its problem slug.
type registryError struct {
	slug string
	base error
}

func (e *registryError) Error() string        { return strings.ReplaceAll(e.slug, "-", " ") }
func (e *registryError) Is(target error) bool { return target == e.base }

// Slug is the problem type of a registry error.
func (e *registryError) Slug() string { return e.slug }

// Scopes of a type besides namespaces.
const (
	ScopeGlobal   = "@global"   // visible from every namespace
	ScopeInternal = "@internal" // run by the engine itself, never by a remote worker
)

// TypeName is a registered type's full name: scope:category:name.
type TypeName struct {
	Scope, Category, Name string
}

func (n TypeName) String() string { return n.Scope + ":" + n.Category + ":" + n.Name }

// Internal reports whether the type is run by the engine itself.
func (n TypeName) Internal() bool { return n.Scope == ScopeInternal }

// CheckNamespace refuses a namespace id that is empty, contains '@' or ':',
// or is not 1-64 of [A-Za-z0-9_-] (errInvalidNamespace).
func CheckNamespace(ns string) error {
	if ns == "" || strings.ContainsAny(ns, "@:") || !domain.ValidQueue(ns) {
		return &InputError{Field: "namespace", Value: fmt.Sprintf("%q", ns),
			Reason: "want 1-64 of [A-Za-z0-9_-], no '@' or ':'", Err: errInvalidNamespace}
	}
	return nil
}

// checkScope refuses a scope that is neither a namespace nor @global or
// @internal.
func checkScope(scope string) error {
	if scope == ScopeGlobal || scope == ScopeInternal {
		return nil
	}
	return CheckNamespace(scope)
}

// checkPart refuses a category or name that is empty, too long, contains
// ':' or characters a job type may not.
func checkPart(what, s string, err error) error {
	if s == "" || len(s) > 64 || strings.Contains(s, ":") || !domain.ValidType(s) || strings.Contains(s, "@") {
		return &InputError{Field: what, Value: fmt.Sprintf("%q", s), Reason: "want 1-64 of [A-Za-z0-9_-.], no ':' or '@'", Err: err}
	}
	return nil
}

// ParseTypeName reads a full name scope:category:name.
func ParseTypeName(full string) (TypeName, error) {
	parts := strings.Split(full, ":")
	if len(parts) != 3 {
		return TypeName{}, &InputError{Field: "type", Value: fmt.Sprintf("%q", full), Reason: "want scope:category:name", Err: errInvalidTypeName}
	}
	n := TypeName{Scope: parts[0], Category: parts[1], Name: parts[2]}
	return n, n.Check(nil)
}

// Check checks each part of a name, the category against an allow-list
// (none: any).
func (n TypeName) Check(categories []string) error {
	if err := checkScope(n.Scope); err != nil {
		return err
	}
	if err := checkPart("category", n.Category, errInvalidCategory); err != nil {
		return err
	}
	if len(categories) > 0 && !slices.Contains(categories, n.Category) {
		return &InputError{Field: "category", Value: fmt.Sprintf("%q", n.Category),
			Reason: "not one of " + strings.Join(categories, ", "), Err: errInvalidCategory}
	}
	return checkPart("name", n.Name, errInvalidTypeName)
}

// Registered reports whether a job type names a registered type (it has a
// ':'), rather than a free-form one such as demo.echo.
func Registered(jobType string) bool { return strings.Contains(jobType, ":") }

// Candidates are the full names a job type given at submit may stand for,
// in the order they are looked up: a full name as it is; category:name in
// the job's namespace, then @global.
func Candidates(ns, jobType string) ([]TypeName, error) {
	parts := strings.Split(jobType, ":")
	switch len(parts) {
	case 3:
		n, err := ParseTypeName(jobType)
		if err != nil {
			return nil, err
		}
		if n.Scope != ScopeGlobal && n.Scope != ScopeInternal && n.Scope != ns {
			// Another namespace's type is not visible: as unknown as one
			// that does not exist.
			return nil, fmt.Errorf("type %s: not visible from namespace %s: %w", jobType, ns, ErrUnknownType)
		}
		return []TypeName{n}, nil
	case 2:
		local := TypeName{Scope: ns, Category: parts[0], Name: parts[1]}
		if err := local.Check(nil); err != nil {
			return nil, err
		}
		return []TypeName{local, {Scope: ScopeGlobal, Category: parts[0], Name: parts[1]}}, nil
	}
	return nil, &InputError{Field: "type", Value: fmt.Sprintf("%q", jobType), Reason: "want category:name or scope:category:name", Err: errInvalidTypeName}
}

// TypeDef is a registration: a type's name, its payload schema (JSON
// Schema, compacted; empty: no opinion) and description.
type TypeDef struct {
	Name        TypeName
	Schema      []byte
	Description string
}

// RegisterType decides a registration against the type's record (nil:
// never registered): a new type, or a deleted one reactivated, is
// registered (type.registered, the new schema replacing a deleted type's);
// an active type registered again with the same schema, or with none,
// writes nothing (nil event, no error); with a different schema it is
// refused (ErrSchemaConflict). schemaEqual compares two schemas.
func RegisterType(cur *domain.TypeRecord, def TypeDef, actor string, now time.Time, schemaEqual func(a, b []byte) bool) (*domain.Event, error) {
	if len(def.Description) > maxDescriptionLen {
		return nil, inputErr("description", "%d bytes: at most %d", len(def.Description), maxDescriptionLen)
	}
	if cur != nil && !cur.Deleted {
		if len(def.Schema) != 0 && !schemaEqual(cur.Schema, def.Schema) {
			return nil, fmt.Errorf("type %s is registered with another schema (delete it, or register it under another name): %w",
				def.Name, ErrSchemaConflict)
		}
		if def.Description == "" || def.Description == cur.Description {
			return nil, nil // as it is (a registration without a description keeps the one it has)
		}
		// The same type with a new description: recorded, schema kept.
		return &domain.Event{Type: domain.EvTypeRegistered, JobID: def.Name.String(), Time: now, Actor: actor, Level: domain.LevelInfo,
			Message: "description changed", TypeDef: &domain.TypeDefinition{Scope: def.Name.Scope, Category: def.Name.Category,
				Name: def.Name.Name, Schema: cur.Schema, Description: def.Description}}, nil
	}
	schema := def.Schema
	if len(schema) == 0 && cur != nil {
		schema = cur.Schema // reactivated with the schema it had
	}
	msg, desc := "registered", def.Description
	if cur != nil {
		msg = "reactivated"
		if desc == "" {
			desc = cur.Description // reactivated with the description it had
		}
	}
	return &domain.Event{Type: domain.EvTypeRegistered, JobID: def.Name.String(), Time: now, Actor: actor, Level: domain.LevelInfo, Message: msg,
		TypeDef: &domain.TypeDefinition{Scope: def.Name.Scope, Category: def.Name.Category, Name: def.Name.Name,
			Schema: schema, Description: desc}}, nil
}

// DeleteType soft-deletes an active type (type.deleted): its history stays,
// the next registration reactivates it. @internal types are never deleted.
func DeleteType(cur *domain.TypeRecord, reason, actor string, now time.Time) (*domain.Event, error) {
	if cur == nil || cur.Deleted {
		return nil, fmt.Errorf("type not registered or deleted already: %w", ErrInvalidTransition)
	}
	if cur.Scope == ScopeInternal {
		return nil, fmt.Errorf("type %s: @internal types are never deleted: %w", cur.FullName(), ErrInvalidTransition)
	}
	return &domain.Event{Type: domain.EvTypeDeleted, JobID: cur.FullName(), Time: now, Actor: actor, Level: domain.LevelInfo, Message: reason,
		TypeDef: &domain.TypeDefinition{Scope: cur.Scope, Category: cur.Category, Name: cur.Name}}, nil
}

// SetNamespace decides a namespace's new settings: nil event when they are
// what the record says already.
func SetNamespace(cur *domain.NamespaceRecord, ns string, s domain.NamespaceSettings, actor string, now time.Time) (*domain.Event, error) {
	if err := CheckNamespace(ns); err != nil {
		return nil, err
	}
	if s.Retention < 0 {
		return nil, valueErr("retention", time.Duration(s.Retention).String(), "must be positive")
	}
	if cur != nil && cur.Settings == s {
		return nil, nil
	}
	return &domain.Event{Type: domain.EvNamespaceSet, JobID: ns, Time: now, Actor: actor, Level: domain.LevelInfo,
		Namespace: &domain.NamespaceChange{Name: ns, Settings: s}}, nil
}

// SchemaEqualBytes compares two compacted schemas byte for byte (callers
// that canonicalize key order first can use it as schemaEqual).
func SchemaEqualBytes(a, b []byte) bool { return bytes.Equal(a, b) }

// RegistrySlug is the problem type of a registry error, "" for others.
func RegistrySlug(err error) string {
	var re *registryError
	if errors.As(err, &re) {
		return re.slug
	}
	return ""
}
