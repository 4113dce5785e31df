package domain

import (
	"encoding/json"
	"fmt"
	"time"
)

// Event types of the registry.
const (
	EvTypeRegistered = "type.registered" // a type registered, or reactivated
	EvTypeDeleted    = "type.deleted"    // soft-deleted: no live worker, no job left
	EvNamespaceSet   = "namespace.set"   // a namespace's settings
)

// TypeDefinition is what a type.registered event (or, naming the type, a
// type.deleted one) carries.
type TypeDefinition struct {
	Scope       string `msgpack:"scope"`
	Category    string `msgpack:"category"`
	Name        string `msgpack:"name"`
	Schema      []byte `msgpack:"schema,omitempty"` // JSON Schema (2020-12), compacted; empty: any payload
	Description string `msgpack:"description,omitempty"`
}

// TypeRecord is a registered type: the fold of its events, in TypesBucket.
type TypeRecord struct {
	Scope        string    `msgpack:"scope"`
	Category     string    `msgpack:"category"`
	Name         string    `msgpack:"name"`
	Schema       []byte    `msgpack:"schema,omitempty"`
	Description  string    `msgpack:"description,omitempty"`
	Deleted      bool      `msgpack:"deleted"`
	RegisteredAt time.Time `msgpack:"registered_at"`
	UpdatedAt    time.Time `msgpack:"updated_at"`
	Seq          uint64    `msgpack:"seq"`                          // the last event folded
	LastHash     []byte    `msgpack:"last_hash,omitempty" json:"-"` // its chain hash
}

// FullName is scope:category:name.
func (t *TypeRecord) FullName() string { return t.Scope + ":" + t.Category + ":" + t.Name }

// NamespaceSettings are a namespace's settings.
type NamespaceSettings struct {
	// StrictTypes accepts only registered types (scope:category:name or
	// category:name) in the namespace, no free-form ones.
	StrictTypes bool `msgpack:"strict_types" json:"strict_types"`
	// Retention is how long the namespace's terminal jobs are kept before
	// they are purged; zero: the engine's default.
	Retention Period `msgpack:"retention,omitempty" json:"retention,omitempty"`
}

// Period is a duration that JSON writes and reads as a Go duration string
// ("720h"). Zero or negative is refused: a setting that is not wanted is
// left out.
type Period time.Duration

// MarshalJSON writes the duration string.
func (p Period) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(p).String()) }

// UnmarshalJSON reads a duration string such as "720h".
func (p *Period) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration such as \"720h\"")
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration such as \"720h\"", s)
	}
	if d <= 0 {
		return fmt.Errorf("%q: must be positive", s)
	}
	*p = Period(d)
	return nil
}

// NamespaceChange is what a namespace.set event carries.
type NamespaceChange struct {
	Name     string            `msgpack:"name"`
	Settings NamespaceSettings `msgpack:"settings"`
}

// NamespaceRecord is a namespace's settings: the fold of its events, in
// NamespacesBucket.
type NamespaceRecord struct {
	Name      string            `msgpack:"name"`
	Settings  NamespaceSettings `msgpack:"settings"`
	UpdatedAt time.Time         `msgpack:"updated_at"`
	Seq       uint64            `msgpack:"seq"`
	LastHash  []byte            `msgpack:"last_hash,omitempty" json:"-"` // its chain hash
}
