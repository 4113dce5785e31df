package main

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/testkit"
)

// The README's tour, command by command, against `serve --demo` built from
// this tree and run as a process, as a reader would: exit codes and the
// key part of each output.

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// jetflowBinary builds cmd/jetflow once for the tests that run it as a
// process (go build -o, as the README says).
func jetflowBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "jetflow-tour-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "jetflow")
		out, err := exec.Command("go", "build", "-o", builtBin, ".").CombinedOutput()
		if err != nil {
			buildErr = errors.New("go build: " + err.Error() + "\n" + string(out))
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

// TestMain removes the binary built for the process tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// proc is a jetflow process started by a test.
type proc struct {
	cmd    *exec.Cmd
	out    *testkit.SyncBuffer
	exited chan struct{}
}

// startIn starts bin with args in dir (a directory of the test's); it is
// stopped (SIGTERM, then SIGKILL) when the test ends.
func startIn(t *testing.T, dir string, env []string, bin string, args ...string) *proc {
	t.Helper()
	out := &testkit.SyncBuffer{}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, out, out
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("--- %s output:\n%s", strings.Join(args, " "), out.String())
		}
	})
	return &proc{cmd, out, exited}
}

// waitOutput waits until out says s.
func waitOutput(t *testing.T, out *testkit.SyncBuffer, s string) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, func() error {
		if !strings.Contains(out.String(), s) {
			return testkit.Errorf("not yet %q in:\n%s", s, out.String())
		}
		return nil
	})
}

func TestREADMETour(t *testing.T) {
	bin := jetflowBinary(t)
	home := t.TempDir() // where the reader types the commands
	natsAddr, httpAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	serve := startIn(t, home, nil, bin, "serve", "--demo", "--data", filepath.Join(home, "jetflow-data"),
		"--nats-listen", natsAddr, "--http", httpAddr)
	waitOutput(t, serve.out, "jetflow is running")
	env := []string{"JETFLOW_NATS=nats://" + natsAddr, "JETFLOW_NAMESPACE=", "JETFLOW_TOKEN="}
	jetflow := func(wantCode int, args ...string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = home, append(os.Environ(), env...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("jetflow %q: %v", args, err)
		}
		if code := cmd.ProcessState.ExitCode(); code != wantCode {
			t.Fatalf("jetflow %q: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantCode, out.String(), errb.String())
		}
		return out.String(), errb.String()
	}
	has := func(what, out string, patterns ...string) {
		t.Helper()
		for _, p := range patterns {
			if !regexp.MustCompile(p).MatchString(out) {
				t.Fatalf("%s does not match %q:\n%s", what, p, out)
			}
		}
	}
	idOf := func(out string) string { return strings.Fields(out)[0] }

	out, _ := jetflow(0, "submit", "demo.echo", `{"hello":"world"}`, "--wait")
	has("submit demo.echo --wait", out, `\nstate +succeeded\n`, `\nresult +\{"hello":"world"\}\n`)

	out, errs := jetflow(0, "submit", "demo.fail", `{"times":2}`, "--backoff", "0", "--wait")
	has("submit demo.fail --wait", out, `\nattempts +3 \(retries used 2 of 3\)\n`)
	has("submit demo.fail --wait (stderr)", errs, `attempt 1 failed \(DEMO_FAIL: attempt 1 of 2 planned failures\); retry 1 of 3 now\n`,
		`attempt 2 failed \(DEMO_FAIL: attempt 2 of 2 planned failures\); retry 2 of 3 now\n`)
	id := regexp.MustCompile(`submitted (\w+), waiting`).FindStringSubmatch(errs)[1]
	out, _ = jetflow(0, "events", id)
	has("events", out, `job.submitted`, `job.retry_scheduled`, `job.succeeded`)

	out, _ = jetflow(0, "submit", "demo.sleep", `{"seconds":60}`)
	sleeper := idOf(out)
	out, _ = jetflow(0, "cancel", sleeper)
	has("cancel", out, "^"+sleeper+"\tcancelled\n$")

	// The README's fan-out takes about 15 s to watch; a smaller one here.
	out, _ = jetflow(0, "submit", "demo.fanout", `{"batches":300,"fail_every":100,"batch_ms":2}`)
	fan := idOf(out)
	out, _ = jetflow(1, "get", fan, "--watch") // 3 batches fail: the parent fails
	has("get --watch", out, fan+`  demo.fanout  failed  \[#+\] 300/300 batches: 297 succeeded, 3 failed, 0 cancelled\n`, `\nstate +failed\n`)
	out, _ = jetflow(0, "tree", fan)
	has("tree", out, fan+` demo.fanout failed  \[#+\] 300/300 batches`)
	out, errs = jetflow(1, "retry", fan, "--failed-pieces", "--wait") // only the 3 failed batches run, and fail again
	has("retry --failed-pieces --wait", out, `\nstate +failed\n`, `\nfanout +300 batches \(policy all\): 297 succeeded, 3 failed, 0 cancelled`, `\nretry_of +`+fan+` \(its failed pieces only\)\n`)
	out, _ = jetflow(0, "ls", "--state", "failed")
	has("ls --state failed", out, `^ID +NAMESPACE +TYPE`, "\n"+fan+` +default +demo.fanout +default +failed `)
	out, _ = jetflow(0, "replay", "--verify")
	has("replay --verify", out, `: 0 differ\n`)
	out, _ = jetflow(0, "audit", "verify")
	has("audit verify", out, `^verified \d+ events on \d+ subjects, \d+ checkpoints: 0 findings\n`)
	out, _ = jetflow(0, "get", fan, "--at", time.Now().UTC().Format(time.RFC3339Nano))
	has("get --at", out, `\nstate +failed\n`)
	out, _ = jetflow(0, "purge", "--older-than", "1h", "--dry-run")
	has("purge --dry-run", out, `^would purge 0 jobs \(and their children\); nothing written\n$`)
	out, _ = jetflow(0, "queue", "set", "slow", "--max-running", "2", "--max-running-per-user", "1")
	has("queue set", out, "^slow\tmax_running 2\tmax_running_per_user 1\n$")
	out, _ = jetflow(0, "submit", "demo.sleep", `{"seconds":0.1}`, "--queue", "slow", "--user", "ada", "--wait")
	has("submit --queue slow --user ada", out, `\nstate +succeeded\n`, `\nuser +ada\n`)
	out, _ = jetflow(0, "queue", "ls")
	has("queue ls", out, `^QUEUE +STATUS`, `\nslow +active +0 +0 +0 +2 +1 +0\n`)

	// Types and namespaces.
	out, _ = jetflow(0, "types")
	has("types", out, `\ndefault:demo:greet +active +1 +yes`)
	out, _ = jetflow(0, "submit", "demo:greet", `{"name":"Ada"}`, "--wait")
	has("submit demo:greet", out, `\nresult +"hello Ada"\n`)
	schema := `{"type":"object","required":["amount"],"properties":{"amount":{"type":"number","minimum":0}}}`
	if err := os.WriteFile(filepath.Join(home, "refund.json"), []byte(schema+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ = jetflow(0, "type", "register", "shop:billing:refund", "--schema", "refund.json")
	has("type register", out, "^shop:billing:refund\tcreated\n$")
	out, errs = jetflow(0, "submit", "billing:refund", `{"amount":12.5}`, "--namespace", "shop")
	has("submit billing:refund", out, "\tqueued\n$")
	has("submit billing:refund (stderr)", errs, `^jetflow submit: warning: no live worker serves shop:billing:refund in queue default \(workers serve: `)
	_, errs = jetflow(2, "submit", "billing:refund", `{"amount":-1}`, "--namespace", "shop")
	has("submit a bad refund", errs, `schema-violation`, `\n  /amount: minimum: got -1, want 0\n`)
	res, err := http.Post("http://"+httpAddr+"/api/v1/jobs", "application/json",
		strings.NewReader(`{"type":"billing:refund","namespace":"shop","payload":{"amount":"ten"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body.String(), `"schema-violation"`) {
		t.Fatalf("curl: %d %s", res.StatusCode, body.String())
	}
	_, errs = jetflow(2, "submit", "billing:refund", `{"amount":1}`)
	has("submit in namespace default", errs, `unknown-type`)

	// Any program can be a job: a script of the directory the worker was
	// started in, though the job runs in a directory of its own.
	scripts := t.TempDir()
	script := "echo \"built $(cat payload.json) in $(basename \"$PWD\")\"\necho report > \"$JETFLOW_OUTPUT/report.txt\"\n"
	if err := os.WriteFile(filepath.Join(scripts, "build.sh"), []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	worker := startIn(t, scripts, env, bin, "worker", "--exec", "report.build=bash build.sh", "--work-dir", t.TempDir())
	waitOutput(t, worker.out, "running shell jobs of report.build")
	out, errs = jetflow(0, "submit", "report.build", `{"n":1}`, "--wait")
	has("submit report.build --wait", out, `\nstate +succeeded\n`, `"stdout_tail":"built \{\\"n\\":1\} in \w+-1-\w+\\n"`, `"outputs":\["report.txt"\]`)
	if errs != "submitted "+regexp.MustCompile(`\nid +(\w+)\n`).FindStringSubmatch("\n" + out)[1]+", waiting...\n" {
		t.Fatalf("stderr: %q", errs)
	}
}

// A second serve of a data directory or an address in use fails at once,
// naming it, exit 2; a serve killed with SIGKILL leaves no lock behind.
func TestServeRefusesBusyDataDirAndAddresses(t *testing.T) {
	bin := jetflowBinary(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	natsAddr, httpAddr := testkit.FreeAddr(t), testkit.FreeAddr(t)
	first := startIn(t, dir, nil, bin, "serve", "--data", data, "--nats-listen", natsAddr, "--http", httpAddr)
	waitOutput(t, first.out, "jetflow is running")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--data", data, "--nats-listen", testkit.FreeAddr(t), "--http", testkit.FreeAddr(t)},
			`jetflow serve: --data "` + data + `": in use by another jetflow serve (pid ` + strconv.Itoa(first.cmd.Process.Pid) + `): stop it, or give another --data` + "\n"},
		{[]string{"--data", filepath.Join(dir, "other"), "--nats-listen", natsAddr, "--http", testkit.FreeAddr(t)},
			`jetflow serve: --nats-listen "` + natsAddr + `": address in use`},
		{[]string{"--data", filepath.Join(dir, "other"), "--nats-listen", testkit.FreeAddr(t), "--http", httpAddr},
			`jetflow serve: --http "` + httpAddr + `": address in use`},
		{[]string{"--nats", "nats://" + natsAddr, "--http", httpAddr}, `jetflow serve: --http "` + httpAddr + `": address in use`},
	} {
		start := time.Now()
		cmd := exec.Command(bin, append([]string{"serve"}, tc.args...)...)
		b, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(string(b), tc.want) {
			t.Fatalf("%q: exit %d:\n%s\nwant %q", tc.args, code, b, tc.want)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%q: refused after %s", tc.args, d)
		}
	}
	// SIGKILL: no time to unlock. The kernel drops the lock with the process.
	_ = first.cmd.Process.Kill()
	<-first.exited
	again := startIn(t, dir, nil, bin, "serve", "--data", data, "--nats-listen", natsAddr, "--http", httpAddr)
	waitOutput(t, again.out, "jetflow is running")
}
