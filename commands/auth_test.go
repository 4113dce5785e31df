package commands

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

func TestRoles(t *testing.T) {
	want := map[Role][]Action{
		RoleAdmin:    {ActRead, ActSubmit, ActCancel, ActRetry, ActWork, ActRegisterType, ActAdmin},
		RoleProducer: {ActRead, ActSubmit, ActCancel, ActRetry},
		RoleWorker:   {ActWork, ActRegisterType},
		RoleReader:   {ActRead},
	}
	all := []Action{ActRead, ActSubmit, ActCancel, ActRetry, ActWork, ActRegisterType, ActAdmin}
	for _, r := range roles {
		for _, a := range all {
			allowed := false
			for _, w := range want[r] {
				allowed = allowed || w == a
			}
			if roleAllows(r, a) != allowed {
				t.Errorf("%s may %s: %v, want %v", r, a, !allowed, allowed)
			}
		}
	}
	if roleAllows("root", ActRead) {
		t.Error("a role that does not exist allows something")
	}
}

func TestTokenRoundTrip(t *testing.T) {
	id, tok, hash, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if len(tok) != tokenLen || strings.Contains(hash, tok[len(tok)-43:]) {
		t.Fatalf("token %q (len %d), hash %q", tok, len(tok), hash)
	}
	gotID, secret, err := ParseToken(tok)
	if err != nil || gotID != id {
		t.Fatalf("parse: %q %v", gotID, err)
	}
	now := time.Now()
	rec := &domain.TokenRecord{ID: id, Hash: hash}
	if err := CheckToken(rec, secret, now); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		rec    *domain.TokenRecord
		secret string
	}{
		"unknown":  {nil, secret},
		"wrong":    {rec, strings.Repeat("A", 43)},
		"revoked":  {&domain.TokenRecord{ID: id, Hash: hash, Revoked: true}, secret},
		"expired":  {&domain.TokenRecord{ID: id, Hash: hash, ExpiresAt: now}, secret},
		"past due": {&domain.TokenRecord{ID: id, Hash: hash, ExpiresAt: now.Add(-time.Hour)}, secret},
	} {
		if err := CheckToken(c.rec, c.secret, now); !errors.Is(err, ErrUnauthenticated) || !errors.Is(err, ErrDenied) {
			t.Errorf("%s: %v, want ErrUnauthenticated", name, err)
		}
	}
	if err := CheckToken(&domain.TokenRecord{ID: id, Hash: hash, ExpiresAt: now.Add(time.Second)}, secret, now); err != nil {
		t.Errorf("a token before its expiry: %v", err)
	}
}

func TestTokenSpecCheck(t *testing.T) {
	ok := TokenSpec{Name: "ci", Namespace: "acme", Role: RoleProducer}
	if err := ok.Check(); err != nil {
		t.Fatal(err)
	}
	for field, s := range map[string]TokenSpec{
		"role":      {Name: "ci", Namespace: "acme", Role: "root"},
		"namespace": {Name: "ci", Namespace: "a:b", Role: RoleProducer},
		"name":      {Name: "", Namespace: "acme", Role: RoleProducer},
		"ttl":       {Name: "ci", Namespace: "acme", Role: RoleProducer, TTL: time.Millisecond},
	} {
		var in *InputError
		if err := s.Check(); !errors.As(err, &in) || in.Field != field {
			t.Errorf("%+v: %v, want an input error of %s", s, err, field)
		}
	}
	admin := TokenSpec{Name: "a", Namespace: "acme", Role: RoleAdmin}
	var in *InputError
	if err := admin.Check(); !errors.As(err, &in) || in.Field != "namespace" {
		t.Errorf("an admin of one namespace: %v", err)
	}
	if err := (TokenSpec{Name: "ctl\x07", Namespace: "*", Role: RoleReader}).Check(); err == nil {
		t.Error("a name with a control character was accepted")
	}
}

// FuzzParseToken: no input crashes the parse, and whatever it accepts is
// of the token's exact shape.
func FuzzParseToken(f *testing.F) {
	_, tok, _, _ := NewToken()
	for _, s := range []string{tok, "", "jft_", tok[:30], tok + "x", "jft_01ARZ3NDEKTSV4RRFFQ69G5FAV_" + strings.Repeat("é", 22)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, secret, err := ParseToken(s)
		if err != nil {
			if !errors.Is(err, ErrUnauthenticated) {
				t.Fatalf("%q: %v is not ErrUnauthenticated", s, err)
			}
			return
		}
		if s != tokenPrefix+id+"_"+secret || !domain.ValidID(id) || len(secret) != 43 {
			t.Fatalf("%q accepted as %q %q", s, id, secret)
		}
		if CheckToken(&domain.TokenRecord{ID: id, Hash: hashSecret(secret + "x")}, secret, time.Now()) == nil {
			t.Fatal("a wrong hash matched")
		}
	})
}

func TestSubmitUser(t *testing.T) {
	for _, c := range []struct {
		role         Role
		token, asked string
		want         string
		refused      bool
	}{
		{RoleProducer, "ci", "", "ci", false},
		{RoleProducer, "ci", "ci", "ci", false},
		{RoleProducer, "ci", "alice", "", true},
		{RoleWorker, "w", "alice", "", true},
		{RoleReader, "r", "alice", "", true},
		{RoleAdmin, "root", "", "root", false},
		{RoleAdmin, "root", "root", "root", false},
		{RoleAdmin, "root", "alice", "alice", false},
	} {
		got, err := SubmitUser(c.role, c.token, c.asked)
		if c.refused {
			var ue *userError
			if !errors.As(err, &ue) || !errors.Is(err, errUserNotAllowed) || !errors.Is(err, ErrDenied) || got != "" {
				t.Errorf("%s %q asking %q: %q %v, want a userError", c.role, c.token, c.asked, got, err)
			}
			if RegistrySlug(err) != "user-not-allowed" {
				t.Errorf("slug %q", RegistrySlug(err))
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s %q asking %q: %q %v, want %q", c.role, c.token, c.asked, got, err, c.want)
		}
	}
}

// TestAuditNamespace: a namespaced token audits its own namespace
// (forced; naming another is forbidden whether it exists or not), a token
// of every namespace needs the admin role, and no principal (access
// control off) audits what it asks.
func TestAuditNamespace(t *testing.T) {
	for _, c := range []struct {
		p      *Principal
		asked  string
		want   string
		denied bool
	}{
		{nil, "", "", false},
		{nil, "acme", "acme", false},
		{&Principal{Namespace: AllNamespaces, Role: RoleAdmin}, "", "", false},
		{&Principal{Namespace: AllNamespaces, Role: RoleAdmin}, "acme", "acme", false},
		{&Principal{Namespace: AllNamespaces, Role: RoleReader}, "", "", true},
		{&Principal{Namespace: AllNamespaces, Role: RoleReader}, "acme", "", true},
		{&Principal{Namespace: "acme", Role: RoleReader}, "", "acme", false},
		{&Principal{Namespace: "acme", Role: RoleProducer}, "acme", "acme", false},
		{&Principal{Namespace: "acme", Role: RoleReader}, "other", "", true},
		{&Principal{Namespace: "acme", Role: RoleReader}, "nowhere", "", true},
	} {
		got, err := c.p.AuditNamespace(c.asked)
		if got != c.want || (err != nil) != c.denied || err != nil && !errors.Is(err, errForbidden) {
			t.Errorf("%+v asking %q: %q %v, want %q (denied %v)", c.p, c.asked, got, err, c.want, c.denied)
		}
	}
}
