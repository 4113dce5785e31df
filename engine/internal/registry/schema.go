package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// CanonicalSchema checks that b is a JSON Schema (draft 2020-12) and
// returns it compacted, with object keys in order, so that two schemas that
// say the same compare equal byte for byte. Empty: no schema.
func CanonicalSchema(b []byte) ([]byte, error) {
	if len(bytes.TrimSpace(b)) == 0 || string(bytes.TrimSpace(b)) == "null" {
		return nil, nil
	}
	if len(b) > commands.MaxSchemaBytes {
		return nil, fmt.Errorf("schema is %d bytes, at most %d: %w", len(b), commands.MaxSchemaBytes, commands.ErrInvalidSchema)
	}
	// json.Number keeps every number as written: a float64 would round
	// 12345678901234567891 and change what the schema says.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("schema is not JSON: %v: %w", err, commands.ErrInvalidSchema)
	}
	if dec.More() {
		return nil, fmt.Errorf("schema is not one JSON value: %w", commands.ErrInvalidSchema)
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("schema: %v: %w", err, commands.ErrInvalidSchema)
	}
	if _, err := compile(canon); err != nil {
		return nil, err
	}
	return canon, nil
}

// refuseLoader loads no URL: schemas are self-contained.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref %q: a schema may refer only to itself", url)
}

func compile(schema []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %v: %w", err, commands.ErrInvalidSchema)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// A $ref may point only inside the schema: the default loader would
	// read file:// URLs from the engine's disk for whoever registers a type.
	c.UseLoader(refuseLoader{})
	const url = "mem:///schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("schema: %v: %w", err, commands.ErrInvalidSchema)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("schema: %v: %w", err, commands.ErrInvalidSchema)
	}
	return sch, nil
}

// validate checks a payload against a type's schema, compiled once per
// version of the type.
func (r *Registry) validate(t *domain.TypeRecord, payload []byte) error {
	if len(t.Schema) == 0 {
		return nil
	}
	r.mu.RLock()
	c := r.schemas[t.FullName()]
	r.mu.RUnlock()
	if c == nil || c.seq != t.Seq {
		sch, err := compile(t.Schema)
		if err != nil {
			return err
		}
		c = &compiledSchema{seq: t.Seq, schema: sch}
		r.mu.Lock()
		r.schemas[t.FullName()] = c
		r.mu.Unlock()
	}
	if len(payload) == 0 {
		payload = []byte("null")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return &commands.InputError{Field: "payload", Reason: err.Error()}
	}
	err = c.schema.Validate(inst)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	out := &commands.SchemaViolationError{Type: t.FullName()}
	for _, u := range flatten(ve.BasicOutput()) {
		out.Violations = append(out.Violations, u)
	}
	return out
}

// flatten lists the leaves of a validation's output: each violation once.
func flatten(u *jsonschema.OutputUnit) []commands.Violation {
	var out []commands.Violation
	var walk func(u *jsonschema.OutputUnit)
	walk = func(u *jsonschema.OutputUnit) {
		if u.Error != nil && len(u.Errors) == 0 {
			ptr := u.InstanceLocation
			if ptr == "" {
				ptr = "/"
			}
			out = append(out, commands.Violation{Pointer: ptr, Message: u.Error.String()})
		}
		for i := range u.Errors {
			walk(&u.Errors[i])
		}
	}
	walk(u)
	if len(out) == 0 {
		out = append(out, commands.Violation{Pointer: "/", Message: "does not satisfy the schema"})
	}
	return out
}
