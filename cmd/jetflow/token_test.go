package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestCLITokens: token create refuses what it cannot create (exit 2
// naming the flag, nothing written), prints a new token once on stdout;
// token ls lists it without its secret; token revoke revokes it, an
// unknown id is exit 1.
func TestCLITokens(t *testing.T) {
	e := newCLIEnv(t)
	for _, c := range []struct {
		args []string
		flag string
	}{
		{[]string{"token", "create", "--role", "reader"}, "--namespace"},
		{[]string{"token", "create", "--namespace", "acme"}, "--role"},
		{[]string{"token", "create", "--namespace", "acme", "--role", "root"}, "--role"},
		{[]string{"token", "create", "--namespace", "a:b", "--role", "reader"}, "--namespace"},
		{[]string{"token", "create", "--namespace", "acme", "--role", "admin"}, "--namespace"},
		{[]string{"token", "create", "--namespace", "acme", "--role", "reader", "--ttl", "0s"}, "--ttl"},
		{[]string{"token", "create", "--namespace", "acme", "--role", "reader", "--ttl", "-1h"}, "--ttl"},
		{[]string{"token", "create", "--namespace", "acme", "--role", "reader", "--name", ""}, "--name"},
	} {
		_, errs, code := e.jetflow(c.args...)
		if code != exitUsage || !strings.Contains(errs, c.flag) {
			t.Errorf("%v: exit %d %q, want 2 naming %s", c.args, code, errs, c.flag)
		}
	}
	if ts, err := e.cl.Tokens(t.Context()); err != nil || len(ts) != 0 {
		t.Fatalf("refused creates wrote %d tokens (%v)", len(ts), err)
	}
	out, errs, code := e.jetflow("token", "create", "--namespace", "acme", "--role", "producer", "--ttl", "720h")
	tok := strings.TrimSpace(out)
	if code != exitOK || !strings.HasPrefix(tok, "jft_") || !strings.Contains(errs, "shown this once") {
		t.Fatalf("create: exit %d out %q err %q", code, out, errs)
	}
	out, _, code = e.jetflow("token", "ls", "--json")
	var ls struct {
		Tokens []struct {
			ID, Name, Role, Namespace, Token string
			Revoked                          bool
		}
	}
	if code != exitOK || json.Unmarshal([]byte(out), &ls) != nil || len(ls.Tokens) != 1 {
		t.Fatalf("ls: exit %d %s", code, out)
	}
	got := ls.Tokens[0]
	if got.Name != "producer@acme" || got.Role != "producer" || got.Namespace != "acme" || got.Token != "" || got.Revoked {
		t.Fatalf("ls: %+v", got)
	}
	if strings.Contains(out, tok[len(tok)-43:]) {
		t.Fatal("ls shows the secret")
	}
	out, _, code = e.jetflow("token", "revoke", got.ID)
	if code != exitOK || !strings.Contains(out, "revoked") {
		t.Fatalf("revoke: exit %d %s", code, out)
	}
	out, _, _ = e.jetflow("token", "ls")
	if !strings.Contains(out, "revoked") {
		t.Fatalf("ls after revoke: %s", out)
	}
	if _, errs, code := e.jetflow("token", "revoke", "01ARZ3NDEKTSV4RRFFQ69G5FAV"); code != exitFailed || !strings.Contains(errs, "no such token") {
		t.Fatalf("revoke unknown: exit %d %s", code, errs)
	}
}

// TestServeRefusesPublicHTTPWithoutAuth: an HTTP API reachable from other
// machines without access control is refused before anything starts.
func TestServeRefusesPublicHTTPWithoutAuth(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:18080", ":18080", "192.0.2.1:18080", "[::]:18080"} {
		var out, errb bytes.Buffer
		code := run([]string{"serve", "--data", t.TempDir(), "--http", addr}, &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), "--http "+addr) || !strings.Contains(errb.String(), "--auth") {
			t.Errorf("serve --http %s: exit %d %q", addr, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "--data", t.TempDir(), "--open-ops"}, &out, &errb); code != exitUsage || !strings.Contains(errb.String(), "--open-ops") {
		t.Errorf("--open-ops without --auth: exit %d %q", code, errb.String())
	}
	for _, addr := range []string{"127.0.0.1:1", "localhost:1", "[::1]:1"} {
		if !isLoopback(addr) {
			t.Errorf("%s is loopback", addr)
		}
	}
}

// TestCLIWithToken: client commands with --token (or $JETFLOW_TOKEN) speak
// the engine's command service: a submit goes to the token's namespace
// and waits for its end, ls lists that namespace only, a command the
// service does not offer says so (exit 1), and a token command refuses
// --token (exit 2).
func TestCLIWithToken(t *testing.T) {
	srv := testkit.Server(t, "127.0.0.1:-1")
	ctx := testkit.Ctx(t)
	cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.NewEngine(testkit.StoreOf(t, cl), engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Auth: true, Log: testkit.Logger(t)})
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	w := jetflow.NewWorker(cl, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	registerDemo(w, "", false)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	tok, err := cl.CreateToken(ctx, jetflow.TokenSpec{Name: "cli", Namespace: "acme", Role: jetflow.RoleProducer})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Submit(ctx, "demo.echo", "theirs", jetflow.Namespace("other")); err != nil {
		t.Fatal(err)
	}
	e := &cliEnv{t: t, url: srv.ClientURL(), cl: cl}
	out, errs, code := e.jetflow("submit", "demo.echo", `{"a":1}`, "--wait", "--json", "--token", tok.Token)
	var job struct{ Namespace, State string }
	if code != exitOK || json.Unmarshal([]byte(out), &job) != nil || job.Namespace != "acme" || job.State != "succeeded" {
		t.Fatalf("submit --token: exit %d %s %s", code, out, errs)
	}
	t.Setenv("JETFLOW_TOKEN", tok.Token)
	out, _, code = e.jetflow("ls", "--json")
	var ls struct{ Jobs []struct{ Namespace string } }
	if code != exitOK || json.Unmarshal([]byte(out), &ls) != nil || len(ls.Jobs) != 1 || ls.Jobs[0].Namespace != "acme" {
		t.Fatalf("ls with $JETFLOW_TOKEN: exit %d %s", code, out)
	}
	// Every command works with a token (the command protocol serves every
	// Client method), within what the token's role allows.
	if out, errs, code := e.jetflow("queues", "--json"); code != exitOK || !strings.Contains(out, "default") {
		t.Fatalf("queues with a token: exit %d %s %s", code, out, errs)
	}
	// A value the engine refuses names its flag (exit 2), as with a direct
	// client.
	if _, errs, code := e.jetflow("ls", "--at", time.Now().UTC().Format(time.RFC3339), "--state", "bogus"); code != exitUsage || !strings.Contains(errs, "--state") {
		t.Fatalf("ls --at --state bogus with a token: exit %d %s", code, errs)
	}
	// audit verify with a token: the engine verifies the token's namespace
	// (a producer may read); another namespace is refused (exit 1, denied).
	var rep engine.AuditReport
	if out, errs, code := e.jetflow("audit", "verify", "--json"); code != exitOK || json.Unmarshal([]byte(out), &rep) != nil ||
		rep.Events < 3 || len(rep.Findings) != 0 {
		t.Fatalf("audit verify with a token: exit %d %s %s", code, out, errs)
	}
	if _, errs, code := e.jetflow("audit", "verify", "--namespace", "other"); code != exitFailed || !strings.Contains(errs, `forbidden: this token may not read in namespace "other"`) {
		t.Fatalf("audit verify --namespace other with acme's token: exit %d %s", code, errs)
	}
	// export with a token: the token's namespace's part, streamed by the
	// engine (audit_export); another namespace is refused, nothing written.
	file := filepath.Join(t.TempDir(), "acme.jsonl")
	if out, errs, code := e.jetflow("export", "-o", file, "--json"); code != exitOK || !strings.Contains(out, `"Events":`) {
		t.Fatalf("export with a token: exit %d %s %s", code, out, errs)
	}
	if b, err := os.ReadFile(file); err != nil || !bytes.Contains(b, []byte(`"kind":"header"`)) || !bytes.Contains(b, []byte(`"namespace":"acme"`)) {
		t.Fatalf("the export with a token: %v %.200s", err, b)
	}
	other := filepath.Join(t.TempDir(), "other.jsonl")
	if _, errs, code := e.jetflow("export", "-o", other, "--namespace", "other"); code != exitFailed || !strings.Contains(errs, `forbidden`) {
		t.Fatalf("export --namespace other with acme's token: exit %d %s", code, errs)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused export left its file: %v", err)
	}
	if _, errs, code := e.jetflow("token", "ls", "--token", tok.Token); code != exitUsage || !strings.Contains(errs, "--token") {
		t.Fatalf("token ls --token: exit %d %s", code, errs)
	}
	if out, _, code := e.jetflow("token", "ls"); code != exitOK || !strings.Contains(out, "cli") {
		t.Fatalf("token ls with $JETFLOW_TOKEN set: exit %d %s", code, out)
	}
}
