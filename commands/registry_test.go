package commands_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Every naming rule of the registry, with the problem it is refused with.
func TestTypeNames(t *testing.T) {
	for _, c := range []struct {
		name string
		want error // nil: accepted
	}{
		{"acme:img:thumb", nil},
		{"@global:img:thumb", nil},
		{"@internal:demo:clock", nil},
		{"acme-2_x:img.v2:thumb-1", nil},
		{"img:thumb", commands.ErrInvalidTypeName},                      // two parts: not a full name
		{"a:b:c:d", commands.ErrInvalidTypeName},                        // four parts
		{":img:thumb", commands.ErrInvalidNamespace},                    // empty scope
		{"@other:img:thumb", commands.ErrInvalidNamespace},              // '@' in a namespace
		{"ac.me:img:thumb", commands.ErrInvalidNamespace},               // a namespace is [A-Za-z0-9_-]
		{"acme::thumb", commands.ErrInvalidCategory},                    // empty category
		{"acme:im@g:thumb", commands.ErrInvalidCategory},                // '@' in a category
		{"acme:img:", commands.ErrInvalidTypeName},                      // empty name
		{"acme:img:th umb", commands.ErrInvalidTypeName},                // a space
		{"acme:img:.thumb", commands.ErrInvalidTypeName},                // a name does not start with '.'
		{fmt.Sprintf("acme:img:%065d", 0), commands.ErrInvalidTypeName}, // 65 characters
	} {
		_, err := commands.ParseTypeName(c.name)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("ParseTypeName(%q) = %v, want %v", c.name, err, c.want)
		}
		if c.want != nil && !errors.Is(err, commands.ErrInvalidInput) {
			t.Errorf("ParseTypeName(%q) = %v, does not match ErrInvalidInput", c.name, err)
		}
		if c.want != nil && commands.RegistrySlug(err) == "" {
			t.Errorf("ParseTypeName(%q) = %v has no problem type", c.name, err)
		}
	}
}

func TestNamespaceIDs(t *testing.T) {
	for ns, ok := range map[string]bool{"default": true, "acme-2_x": true, "": false, "@global": false, "a:b": false,
		"a.b": false, fmt.Sprintf("%065d", 0): false} {
		err := commands.CheckNamespace(ns)
		if ok != (err == nil) || !ok && !errors.Is(err, commands.ErrInvalidNamespace) {
			t.Errorf("CheckNamespace(%q) = %v", ns, err)
		}
	}
}

func TestCategoryAllowList(t *testing.T) {
	n := commands.TypeName{Scope: "acme", Category: "img", Name: "thumb"}
	if err := n.Check([]string{"img", "pdf"}); err != nil {
		t.Fatal(err)
	}
	if err := n.Check([]string{"pdf"}); !errors.Is(err, commands.ErrInvalidCategory) || commands.RegistrySlug(err) != "invalid-category" {
		t.Fatalf("category outside the allow-list: %v", err)
	}
}

// A submit's type resolves: a full name as it is (another namespace's is
// not visible), category:name in the job's namespace, then @global.
func TestCandidates(t *testing.T) {
	for _, c := range []struct {
		ns, typ string
		want    string // the names in order, or the error's slug
	}{
		{"acme", "img:thumb", "[acme:img:thumb @global:img:thumb]"},
		{"acme", "acme:img:thumb", "[acme:img:thumb]"},
		{"acme", "@global:img:thumb", "[@global:img:thumb]"},
		{"acme", "@internal:demo:clock", "[@internal:demo:clock]"},
		{"acme", "other:img:thumb", "unknown-type"},
		{"acme", "img:th umb", "invalid-type-name"},
		{"acme", "a:b:c:d", "invalid-type-name"},
	} {
		names, err := commands.Candidates(c.ns, c.typ)
		got := fmt.Sprint(names)
		if err != nil {
			got = commands.RegistrySlug(err)
		}
		if got != c.want {
			t.Errorf("Candidates(%q, %q) = %s, want %s", c.ns, c.typ, got, c.want)
		}
	}
}

// Registration: a new or deleted type is registered; the same schema (or
// none) again writes nothing; another schema is a conflict.
func TestRegisterTypeDecisions(t *testing.T) {
	n := commands.TypeName{Scope: "acme", Category: "img", Name: "thumb"}
	a, b := []byte(`{"type":"object"}`), []byte(`{"type":"string"}`)
	def := func(s []byte) commands.TypeDef { return commands.TypeDef{Name: n, Schema: s} }
	ev, err := commands.RegisterType(nil, def(a), "x", now(), commands.SchemaEqualBytes)
	if err != nil || ev == nil || ev.TypeDef == nil || string(ev.TypeDef.Schema) != string(a) || ev.JobID != "acme:img:thumb" {
		t.Fatalf("new: %+v %v", ev, err)
	}
	cur := recordOf(ev)
	if ev, err := commands.RegisterType(cur, def(a), "x", now(), commands.SchemaEqualBytes); ev != nil || err != nil {
		t.Fatalf("same schema: %+v %v", ev, err)
	}
	if ev, err := commands.RegisterType(cur, def(nil), "x", now(), commands.SchemaEqualBytes); ev != nil || err != nil {
		t.Fatalf("no schema: %+v %v", ev, err)
	}
	if _, err := commands.RegisterType(cur, def(b), "x", now(), commands.SchemaEqualBytes); !errors.Is(err, commands.ErrSchemaConflict) ||
		!errors.Is(err, commands.ErrConflict) {
		t.Fatalf("another schema: %v", err)
	}
	// A new description is recorded with the schema it has; none, or the
	// same one, writes nothing.
	described := commands.TypeDef{Name: n, Description: "thumbnails"}
	ev, err = commands.RegisterType(cur, described, "x", now(), commands.SchemaEqualBytes)
	if err != nil || ev == nil || ev.Message != "description changed" || ev.TypeDef.Description != "thumbnails" ||
		string(ev.TypeDef.Schema) != string(a) {
		t.Fatalf("new description: %+v %v", ev, err)
	}
	cur = recordOf(ev)
	if ev, err := commands.RegisterType(cur, described, "x", now(), commands.SchemaEqualBytes); ev != nil || err != nil {
		t.Fatalf("same description: %+v %v", ev, err)
	}
	if ev, err := commands.RegisterType(cur, def(a), "x", now(), commands.SchemaEqualBytes); ev != nil || err != nil {
		t.Fatalf("no description keeps it: %+v %v", ev, err)
	}
	del, err := commands.DeleteType(cur, "unused", "x", now())
	if err != nil {
		t.Fatal(err)
	}
	cur.Deleted = true
	_ = del
	ev, err = commands.RegisterType(cur, def(b), "x", now(), commands.SchemaEqualBytes)
	if err != nil || ev == nil || string(ev.TypeDef.Schema) != string(b) || ev.Message != "reactivated" || ev.TypeDef.Description != "thumbnails" {
		t.Fatalf("reactivated with a new schema (and the description it had): %+v %v", ev, err)
	}
	if _, err := commands.DeleteType(cur, "", "x", now()); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("delete a deleted type: %v", err)
	}
	internal := recordOf(mustRegister(t, commands.TypeName{Scope: "@internal", Category: "demo", Name: "clock"}))
	if _, err := commands.DeleteType(internal, "", "x", now()); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("delete an @internal type: %v", err)
	}
}

func now() time.Time { return time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC) }

// recordOf is the record a first registration leaves (projections.FoldType
// is tested with the projections).
func recordOf(ev *domain.Event) *domain.TypeRecord {
	d := ev.TypeDef
	return &domain.TypeRecord{Scope: d.Scope, Category: d.Category, Name: d.Name, Schema: d.Schema, Description: d.Description, Seq: 1}
}

func mustRegister(t *testing.T, n commands.TypeName) *domain.Event {
	t.Helper()
	ev, err := commands.RegisterType(nil, commands.TypeDef{Name: n}, "x", now(), commands.SchemaEqualBytes)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}
