package process

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/testkit"
)

// TestServeAuthFirstAdminToken: serve --auth on a data directory with no
// admin token writes one to <data>/admin-token (mode 0600), logs the path
// and never the token; the HTTP API refuses requests without it and takes
// them with it; a restart on the same data keeps the token (writes no
// other).
func TestServeAuthFirstAdminToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	data, addr, web := t.TempDir(), testkit.FreeAddr(t), testkit.FreeAddr(t)
	args := []string{"serve", "--data", data, "--nats-listen", addr, "--http", web, "--auth"}
	serve := testkit.StartProc(t, "serve", nil, binary, args...)
	serve.WaitOutput(t, 30*time.Second, "jetflow is running")
	path := filepath.Join(data, "admin-token")
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin-token mode %v, want 0600", fi.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(string(b))
	if !strings.HasPrefix(tok, "jft_") {
		t.Fatalf("admin-token holds %q", tok)
	}
	if strings.Contains(serve.Output(), tok[len(tok)-43:]) {
		t.Fatal("serve logged the token")
	}
	if !strings.Contains(serve.Output(), path) {
		t.Fatalf("serve did not log the token's path: %s", serve.Output())
	}
	get := func(tok string) int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+web+"/api/v1/jobs", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if s := get(""); s != http.StatusUnauthorized {
		t.Fatalf("no token: %d", s)
	}
	if s := get(tok); s != http.StatusOK {
		t.Fatalf("admin token: %d", s)
	}
	serve.Signal(t, 15)
	if code, _ := serve.WaitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	serve = testkit.StartProc(t, "serve again", nil, binary, args...)
	serve.WaitOutput(t, 30*time.Second, "jetflow is running")
	if b2, _ := os.ReadFile(path); string(b2) != string(b) {
		t.Fatal("a restart wrote another admin token")
	}
	if s := get(tok); s != http.StatusOK {
		t.Fatalf("admin token after a restart: %d", s)
	}
}
