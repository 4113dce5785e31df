package process

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// serve --nats-auth: the users are made once (mode 0600, reused on a
// restart, the path logged and no password); the CLI connects as the
// engine with flags, `jetflow worker` as the worker with the environment,
// and runs a job; without credentials nothing connects.
func TestServeNATSAuth(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel()
	addr, data := testkit.FreeAddr(t), t.TempDir()
	url := "nats://" + addr
	args := []string{"serve", "--data", data, "--nats-listen", addr, "--http", "off", "--nats-auth", "--projector-lag", "300ms"}
	serve := testkit.StartProc(t, "serve", nil, binary, args...)
	serve.WaitOutput(t, 30*time.Second, "jetflow is running")

	path := filepath.Join(data, jetflow.NATSUsersFile)
	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", path, st, err)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Users jetflow.NATSUsers }
	if err := json.Unmarshal(first, &file); err != nil {
		t.Fatal(err)
	}
	eng, _ := file.Users.Role(jetflow.NATSRoleEngine)
	wrk, _ := file.Users.Role(jetflow.NATSRoleWorker)
	if !strings.Contains(serve.Output(), "NATS users created") || !strings.Contains(serve.Output(), path) {
		t.Fatalf("serve did not log the users file:\n%s", serve.Output())
	}
	for _, u := range file.Users {
		if strings.Contains(serve.Output(), u.Password) {
			t.Fatalf("serve logged the password of %s", u.User)
		}
	}

	run := func(env []string, args ...string) (int, string) {
		t.Helper()
		s := &system{t: t, url: url}
		code, _, out := s.cli(env, args...)
		return code, out
	}
	// Without credentials, or with a wrong password: refused, exit 2, and
	// the password given is not repeated.
	if code, out := run(nil, "ls"); code != 2 || !strings.Contains(out, "Authorization Violation") {
		t.Fatalf("no credentials: %d %s", code, out)
	}
	if code, out := run(nil, "ls", "--nats-user", "engine", "--nats-password", "not-it"); code != 2 ||
		!strings.Contains(out, "Authorization Violation") || strings.Contains(out, "not-it") {
		t.Fatalf("wrong password: %d %s", code, out)
	}
	// As the engine, with flags (a flag wins over the environment).
	code, out := run([]string{"JETFLOW_NATS_PASSWORD=not-it"}, "submit", "demo.echo", `{"a":1}`,
		"--nats-user", eng.User, "--nats-password", eng.Password, "--json")
	if code != 0 {
		t.Fatalf("submit as engine: %d %s", code, out)
	}
	var job jetflow.JobInfo
	if err := json.Unmarshal([]byte(out), &job); err != nil {
		t.Fatalf("%v: %s", err, out)
	}

	// The worker, as the worker user, by the environment.
	w := testkit.StartProc(t, "worker", []string{"JETFLOW_NATS_USER=" + wrk.User, "JETFLOW_NATS_PASSWORD=" + wrk.Password},
		binary, "worker", "--nats", url, "--id", "w1")
	w.WaitOutput(t, 30*time.Second, "worker w1 running")
	client, err := jetflow.Connect(testkit.Ctx(t), url, jetflow.ClientOptions{
		NATSOptions: []nats.Option{nats.UserInfo(eng.User, eng.Password)}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if done := testkit.WaitTerminal(t, client, job.ID, time.Minute); done.State != jetflow.Succeeded {
		t.Fatalf("job %s: %s", job.ID, done.State)
	}
	if strings.Contains(w.Output(), "iolation") {
		t.Fatalf("the worker met a permission violation:\n%s", w.Output())
	}

	// A restart reads the same users.
	serve.Signal(t, syscall.SIGTERM)
	if code, _ := serve.WaitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	again := testkit.StartProc(t, "serve again", nil, binary, args...)
	again.WaitOutput(t, 30*time.Second, "jetflow is running")
	if !strings.Contains(again.Output(), "NATS users read") {
		t.Fatalf("restart:\n%s", again.Output())
	}
	if now, err := os.ReadFile(path); err != nil || string(now) != string(first) {
		t.Fatalf("users changed on restart: %v", err)
	}
}
