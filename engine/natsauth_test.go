package engine_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/auth"
)

// The users are made once, readable by their owner only, and read back
// as they are on later starts.
func TestLoadOrCreateNATSUsers(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), engine.NATSUsersFile)
	users, created, err := engine.LoadOrCreateNATSUsers(path)
	if err != nil || !created {
		t.Fatalf("created %v, %v", created, err)
	}
	for _, role := range auth.NATSRoles {
		u, ok := users.Role(role)
		if !ok || u.User != role || len(u.Password) < 26 {
			t.Fatalf("role %s: %+v", role, u)
		}
	}
	if e, _ := users.Role(engine.NATSRoleEngine); e.Password == users[1].Password {
		t.Fatal("two roles share a password")
	}
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", st.Mode(), err)
	}
	again, created, err := engine.LoadOrCreateNATSUsers(path)
	if err != nil || created {
		t.Fatalf("again: created %v, %v", created, err)
	}
	if d := cmp.Diff(users, again); d != "" {
		t.Fatal(d)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".nats-users-*")); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}

	// A file without every role is refused, naming the role; the error
	// never holds a password.
	if err := os.WriteFile(path, []byte(`{"users":[{"role":"engine","user":"engine","password":"s3cret"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err = engine.LoadOrCreateNATSUsers(path)
	if err == nil || !strings.Contains(err.Error(), "no user of role worker") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("incomplete file: %v", err)
	}
}
