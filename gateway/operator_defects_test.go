package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
)

// Under access control, a visitor without a token learns nothing of the
// system from the pages it may see (the sign-in page, a page not found):
// no namespace name, as GET /api/v1/namespaces answers it 401 (issue 25).
func TestSignInPageRevealsNoNamespace(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	ctx := engine.WithPrincipal(e.ctx, &engine.Principal{TokenID: "setup", Name: "setup", Namespace: "*", Role: commands.RoleAdmin})
	if _, err := e.store.Submit(ctx, &commands.SubmitRequest{Type: "t.secret", Namespace: "acme-secret-customer"}); err != nil {
		t.Fatal(err)
	}
	e.as("admin", "PUT", "/api/v1/types/hidden-scope/x/y", `{}`).want(t, http.StatusCreated)
	// Signed in as an admin, the selector lists them (the index has it).
	if page := e.as("admin", "GET", "/", nil).want(t, http.StatusOK); !strings.Contains(string(page.body), "acme-secret-customer") ||
		!strings.Contains(string(page.body), "hidden-scope") {
		t.Fatalf("an admin's page lists no namespaces:\n%s", page.body)
	}
	e.as("none", "GET", "/api/v1/namespaces", nil).problem(t, http.StatusUnauthorized, "unauthenticated")
	for _, path := range []string{"/login", "/login?namespace=acme", "/no/such/page"} {
		r := e.as("none", "GET", path, nil)
		if r.status != http.StatusOK && r.status != http.StatusNotFound {
			t.Fatalf("%s: %d", path, r.status)
		}
		body := string(r.body)
		for _, name := range []string{"acme-secret-customer", "hidden-scope", "acme", "other", "ns-select", "/queues"} {
			if strings.Contains(body, name) {
				t.Fatalf("%s shows %q to a visitor without a token:\n%s", path, name, body)
			}
		}
	}
}
