package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// Bad credential flags are usage errors (exit 2) naming the flag or the
// environment variable, before anything connects, and never repeat a
// secret.
func TestNATSCredentialFlags(t *testing.T) {
	dir := t.TempDir()
	unreadable := filepath.Join(dir, "unreadable.creds")
	if err := os.WriteFile(unreadable, []byte("x"), 0o000); err != nil {
		t.Fatal(err)
	}
	const secret = "s3cret-value"
	url := "nats://127.0.0.1:1" // nothing listens: nothing may get that far
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"ls", "--nats-user", "u"}, "jetflow ls: --nats-user: needs a password (--nats-password or JETFLOW_NATS_PASSWORD)"},
		{nil, []string{"get", "X", "--nats-password", secret}, "jetflow get: --nats-password: needs a user"},
		{map[string]string{"JETFLOW_NATS_PASSWORD": secret}, []string{"ls"}, "jetflow ls: JETFLOW_NATS_PASSWORD: needs a user"},
		{map[string]string{"JETFLOW_NATS_USER": "u"}, []string{"worker"}, "jetflow worker: JETFLOW_NATS_USER: needs a password"},
		{nil, []string{"ls", "--nats-creds", filepath.Join(dir, "missing.creds")}, `jetflow ls: --nats-creds "` + filepath.Join(dir, "missing.creds") + `": cannot read it: no such file or directory`},
		{nil, []string{"ls", "--nats-creds", dir}, "cannot read it: is a directory"},
		{nil, []string{"ls", "--nats-token", secret, "--nats-user", "u", "--nats-password", secret}, "jetflow ls: --nats-token: not with --nats-user"},
		{map[string]string{"JETFLOW_NATS_TOKEN": secret}, []string{"ls", "--nats-creds", unreadable}, "jetflow ls: JETFLOW_NATS_TOKEN: not with --nats-creds"},
		{nil, []string{"serve", "--nats-token", secret}, "jetflow serve: --nats-token: only with --nats URL"},
		{nil, []string{"serve", "--nats-user", "u", "--nats-password", secret, "--data", dir}, "jetflow serve: --nats-user: only with --nats URL"},
		{nil, []string{"serve", "--nats-auth", "--nats", url}, "jetflow serve: --nats-auth true: only with the embedded server (not with --nats)"},
		{nil, []string{"serve", "--nats-worker-namespaces", "billing", "--data", dir}, "jetflow serve: --nats-worker-namespaces \"billing\": only with --nats-auth"},
		{nil, []string{"serve", "--nats-auth", "--nats-worker-namespaces", "billing,no way", "--data", dir}, "jetflow serve: --nats-worker-namespaces \"billing,no way\": want namespace names separated by commas"},
		{nil, []string{"bench", "--nats-token", secret}, "jetflow bench: --nats-token: only with --nats URL"},
		{nil, []string{"bench", "--nats", url, "--nats-user", "u"}, "jetflow bench: --nats-user: needs a password"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := tc.args
			if args[0] != "serve" && args[0] != "bench" {
				args = append(args, "--nats", url)
			}
			var out, errb bytes.Buffer
			code := run(args, &out, &errb)
			if code != exitUsage || !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("exit %d, stderr %q, want 2 and %q", code, errb.String(), tc.want)
			}
			if strings.Contains(errb.String(), secret) {
				t.Fatalf("the secret is in %q", errb.String())
			}
		})
	}
}

// A client command connects with a user and password from its flags or
// the environment (a flag wins); a wrong one is exit 2 without it.
func TestNATSCredentialsConnect(t *testing.T) {
	dir := t.TempDir()
	users, _, err := jetflow.LoadOrCreateNATSUsers(filepath.Join(dir, jetflow.NATSUsersFile))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := jetflow.StartServer(jetflow.ServerConfig{Dir: dir, Listen: "127.0.0.1:-1", Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	eng, _ := users.Role(jetflow.NATSRoleEngine)
	nc, err := jetflow.ConnectInProcess(srv, "test", nats.UserInfo(eng.User, eng.Password))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := jetflow.NewClient(ctx, nc, jetflow.ClientOptions{Logger: testkit.Logger(t)}); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (int, string) {
		var out, errb bytes.Buffer
		code := run(append(args, "--nats", srv.ClientURL()), &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := cli("ls", "--nats-user", eng.User, "--nats-password", eng.Password); code != 0 {
		t.Fatalf("flags: %d %s", code, out)
	}
	t.Setenv("JETFLOW_NATS_USER", eng.User)
	t.Setenv("JETFLOW_NATS_PASSWORD", "wrong-password")
	if code, out := cli("ls"); code != exitUsage || !strings.Contains(out, "Authorization Violation") || strings.Contains(out, "wrong-password") {
		t.Fatalf("wrong password: %d %s", code, out)
	}
	if code, out := cli("ls", "--nats-password", eng.Password); code != 0 {
		t.Fatalf("the flag wins: %d %s", code, out)
	}
	t.Setenv("JETFLOW_NATS_PASSWORD", eng.Password)
	if code, out := cli("ls"); code != 0 {
		t.Fatalf("environment: %d %s", code, out)
	}
}
