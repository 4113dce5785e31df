package shell_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/jetflowtest"
	"github.com/jetflow/jetflow/shell"
)

// setup starts an embedded jetflow whose worker runs script for jobType
// (the script is written to a file and run with bash); cfg's zero fields
// mean a work dir of the test's and a kill grace of 300ms.
func setup(t *testing.T, jobType, script string, cfg shell.Config) (*jetflowtest.Env, *shell.Runner) {
	t.Helper()
	env := jetflowtest.New(t, jetflowtest.Options{Worker: jetflow.WorkerConfig{ShutdownGrace: 200 * time.Millisecond}})
	path := filepath.Join(t.TempDir(), "script.sh")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Command = "bash " + path
	if cfg.WorkDir == "" {
		cfg.WorkDir = filepath.Join(t.TempDir(), "jobs")
	}
	if cfg.KillGrace == 0 {
		cfg.KillGrace = 300 * time.Millisecond
	}
	r, err := shell.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	env.Worker.Handle(jobType, r)
	if err := env.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return env, r
}

func submit(t *testing.T, env *jetflowtest.Env, jobType string, payload any, opts ...jetflow.SubmitOption) *jetflow.JobInfo {
	t.Helper()
	j, err := env.Client.Submit(context.Background(), jobType, payload, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func wait(t *testing.T, env *jetflowtest.Env, id string) *jetflow.JobInfo {
	t.Helper()
	j, err := env.Wait(id, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func events(t *testing.T, env *jetflowtest.Env, id string) []*jetflow.EventInfo {
	t.Helper()
	evs, err := env.Client.Events(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// named returns the job.event events called name, waiting until there is
// at least one.
func named(t *testing.T, env *jetflowtest.Env, id, name string) []*jetflow.EventInfo {
	t.Helper()
	var got []*jetflow.EventInfo
	testkit.WaitFor(t, 20*time.Second, func() error {
		got = got[:0]
		for _, e := range events(t, env, id) {
			if e.Type == domain.EvCustom && e.Name == name {
				got = append(got, e)
			}
		}
		if len(got) == 0 {
			return fmt.Errorf("no event %s yet", name)
		}
		return nil
	})
	return got
}

func gone(pid int) bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) }

// collected is what the Prepare and Collect hooks saw of each attempt.
type collected struct {
	mu       sync.Mutex
	dirs     []string
	modes    []os.FileMode
	stdout   []string
	stderr   []string
	outputs  [][]shell.File
	exitCode []int
}

func (c *collected) hooks(cfg *shell.Config) {
	cfg.Prepare = func(_ context.Context, _ *jetflow.RawJob, a *shell.Attempt) error {
		info, err := os.Stat(a.Dir)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.dirs = append(c.dirs, a.Dir)
		c.modes = append(c.modes, info.Mode().Perm())
		c.mu.Unlock()
		return os.WriteFile(filepath.Join(a.Dir, "input.txt"), []byte("from the input"), 0o600)
	}
	cfg.Collect = func(_ context.Context, _ *jetflow.RawJob, a *shell.Attempt) error {
		out, err1 := os.ReadFile(a.Stdout)
		errs, err2 := os.ReadFile(a.Stderr)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stdout = append(c.stdout, string(out))
		c.stderr = append(c.stderr, string(errs))
		c.outputs = append(c.outputs, a.Outputs)
		c.exitCode = append(c.exitCode, a.ExitCode)
		return errors.Join(err1, err2)
	}
}

// A command that exits 0: the job succeeds with the exit code, the tail of
// stdout and its output files (links left out); ::progress and ::event
// lines become job.progress and job.event events and stay out of
// stdout.txt; the directory is private, has the inputs Prepare placed and
// is removed after; a process the command left running is stopped.
func TestExitZeroSucceeds(t *testing.T) {
	t.Parallel()
	var c collected
	// The worker's own JETFLOW_* variables are not passed on.
	cfg := shell.Config{Env: append(os.Environ(), "JETFLOW_NATS=nats://secret@example")}
	c.hooks(&cfg)
	env, _ := setup(t, "sh.ok", `set -eu
echo "::progress 1/2 half way"
echo hello
cat input.txt > "$JETFLOW_OUTPUT/a.txt"
mkdir "$JETFLOW_OUTPUT/sub"
printf 'bb' > "$JETFLOW_OUTPUT/sub/b.txt"
ln -s /etc/passwd "$JETFLOW_OUTPUT/passwd"
ln -s / "$JETFLOW_OUTPUT/root"
test "$(cat payload.json)" = "$JETFLOW_PAYLOAD"
test "$JETFLOW_PAYLOAD" = '{"n":1}'
test -d "$TMPDIR"
test -z "${JETFLOW_NATS:-}"
echo "::event step.done wrote two files"
echo "warned" >&2
sleep 1000 &
read -r -a st < /proc/$$/stat
echo "::event pgid ${st[4]} $!"
echo "::progress 2/2 done"
echo "$JETFLOW_JOB_ID $JETFLOW_ATTEMPT $JETFLOW_TYPE $JETFLOW_NAMESPACE $JETFLOW_QUEUE"
`, cfg)
	job := submit(t, env, "sh.ok", map[string]int{"n": 1})
	done := wait(t, env, job.ID)
	if done.State != jetflow.Succeeded || done.Attempts != 1 {
		t.Fatalf("job %s after %d attempts: %+v", done.State, done.Attempts, done.Error)
	}
	var res shell.Result
	if err := json.Unmarshal(done.Result, &res); err != nil {
		t.Fatal(err)
	}
	stdout := "hello\n" + job.ID + " 1 sh.ok default default\n"
	if diff := cmp.Diff(shell.Result{ExitCode: 0, StdoutTail: stdout, Outputs: []string{"a.txt", "sub/b.txt"},
		OutputCount: 2, OutputBytes: 16, DurationSeconds: res.DurationSeconds}, res); diff != "" || res.DurationSeconds <= 0 {
		t.Fatalf("result (-want +got):\n%s", diff)
	}
	c.mu.Lock()
	if len(c.dirs) != 1 || c.modes[0] != 0o700 || c.stdout[0] != stdout || c.stderr[0] != "warned\n" || c.exitCode[0] != 0 {
		t.Fatalf("dirs %v modes %v stdout %q stderr %q exit %v", c.dirs, c.modes, c.stdout, c.stderr, c.exitCode)
	}
	if diff := cmp.Diff([]shell.File{{Name: "a.txt", Size: 14}, {Name: "sub/b.txt", Size: 2}}, c.outputs[0]); diff != "" {
		t.Fatalf("outputs (-want +got):\n%s", diff)
	}
	if _, err := os.Stat(c.dirs[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the attempt's directory is still there: %v", err)
	}
	c.mu.Unlock()

	evs := events(t, env, job.ID)
	var progress []jetflow.ProgressReport
	var custom []string
	for _, e := range evs {
		switch e.Type {
		case domain.EvProgress:
			progress = append(progress, *e.Progress)
		case domain.EvCustom:
			custom = append(custom, e.Name+": "+e.Message)
		}
	}
	// Progress is coalesced (at most one write per 250ms): the first and
	// the last are written, or the last alone.
	if len(progress) == 0 || progress[len(progress)-1] != (jetflow.ProgressReport{Current: 2, Total: 2, Message: "done"}) {
		t.Fatalf("progress events %+v", progress)
	}
	if len(custom) != 2 || custom[0] != "step.done: wrote two files" || !strings.HasPrefix(custom[1], "pgid: ") {
		t.Fatalf("job.event events %q", custom)
	}
	ids := strings.Fields(strings.TrimPrefix(custom[1], "pgid: "))
	pgid, _ := strconv.Atoi(ids[0])
	child, _ := strconv.Atoi(ids[1])
	if pgid == 0 || child == 0 || !gone(-pgid) || !gone(child) {
		t.Fatalf("process group %d or its background child %d outlived the attempt", pgid, child)
	}
}

// A command that exits 3 fails with code EXIT_3 and the tail of its stderr
// as the message (at most 2 KiB, valid UTF-8); retried while retries are
// left, not at all when no_retry_on names EXIT_3.
func TestNonZeroExitFails(t *testing.T) {
	t.Parallel()
	var c collected
	var cfg shell.Config
	c.hooks(&cfg)
	// 3000 bytes of "é" then the last words: the tail's cut falls inside
	// a rune, which is dropped.
	env, _ := setup(t, "sh.fail", `for i in $(seq 1500); do printf 'é' >&2; done
echo "the last words" >&2
echo "to stdout"
exit 3
`, cfg)
	for _, tc := range []struct {
		name            string
		opts            []jetflow.SubmitOption
		attempts, retry int
	}{
		{"no_retry_on", []jetflow.SubmitOption{jetflow.MaxRetries(3), jetflow.NoRetryOn("EXIT_3")}, 1, 0},
		{"retried", []jetflow.SubmitOption{jetflow.MaxRetries(2), jetflow.Backoff(10 * time.Millisecond)}, 3, 2},
		{"retry_on another", []jetflow.SubmitOption{jetflow.MaxRetries(2), jetflow.RetryOn("EXIT_4")}, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := submit(t, env, "sh.fail", nil, tc.opts...)
			done := wait(t, env, job.ID)
			if done.State != jetflow.Failed || done.Attempts != tc.attempts || done.Retries != tc.retry {
				t.Fatalf("job %s after %d attempts, %d retries; want failed, %d, %d", done.State, done.Attempts, done.Retries, tc.attempts, tc.retry)
			}
			msg := done.Error.Message
			if done.Error.Code != "EXIT_3" || !strings.HasSuffix(msg, "éthe last words") || len(msg) > shell.TailBytes ||
				len(msg) < shell.TailBytes-4 || !strings.HasPrefix(msg, "é") {
				t.Fatalf("error %s: %d bytes, %q", done.Error.Code, len(msg), msg)
			}
		})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.exitCode) != 5 {
		t.Fatalf("collected %d attempts, want 5", len(c.exitCode))
	}
	for i, code := range c.exitCode {
		if code != 3 || c.stdout[i] != "to stdout\n" || !strings.HasSuffix(c.stderr[i], "the last words\n") || len(c.stderr[i]) != 3015 {
			t.Fatalf("attempt %d: exit %d, stdout %q, stderr of %d bytes", i, code, c.stdout[i], len(c.stderr[i]))
		}
	}
}

// Exit 75 with a delay on the last line of stdout: the job is retried
// later (job.retry_later, no retry used up) and runs again no sooner.
func TestExit75RetriesLater(t *testing.T) {
	t.Parallel()
	env, _ := setup(t, "sh.later", `if [ "$JETFLOW_ATTEMPT" = 1 ]; then
  echo "the GPU is busy" >&2
  echo "::progress 1/3"
  echo "700ms"
  exit 75
fi
echo "attempt $JETFLOW_ATTEMPT"
`, shell.Config{})
	job := submit(t, env, "sh.later", nil, jetflow.MaxRetries(0))
	done := wait(t, env, job.ID)
	if done.State != jetflow.Succeeded || done.Attempts != 2 || done.Retries != 0 {
		t.Fatalf("job %s after %d attempts, %d retries", done.State, done.Attempts, done.Retries)
	}
	var later, second *jetflow.EventInfo
	for _, e := range events(t, env, job.ID) {
		switch {
		case e.Type == domain.EvRetryLater:
			later = e
		case e.Type == domain.EvStarted && e.Attempt == 2:
			second = e
		}
	}
	if later == nil || second == nil || later.RunAt == nil {
		t.Fatalf("retry_later %+v, second start %+v", later, second)
	}
	if d := later.RunAt.Sub(later.Time); d < 690*time.Millisecond || d > 800*time.Millisecond ||
		second.Time.Before(*later.RunAt) || !strings.Contains(later.Message, "the GPU is busy") {
		t.Fatalf("retry later at +%s (%q), second attempt at +%s", d, later.Message, second.Time.Sub(later.Time))
	}
}

// killTree is a command whose process tree ignores SIGTERM: bash itself,
// a background child, and that child's child. It reports the group and the
// pids as an event, then waits.
const killTree = `trap '' TERM
sleep 1000 &
child=$!
bash -c 'sleep 1000 & wait' &
grand=$!
timeout 1000 sleep 1000 &
stray=$!
read -r -a st < /proc/$$/stat
echo "::event pids ${st[4]} $child $grand $stray"
wait
`

// killTree's last pid is GNU timeout, which moves to a process group of its
// own (setpgid): it must not outlive the attempt either.

func pids(t *testing.T, e *jetflow.EventInfo) []int {
	t.Helper()
	var out []int
	for _, f := range strings.Fields(e.Message) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	if len(out) != 4 {
		t.Fatalf("pids %q", e.Message)
	}
	out[0] = -out[0] // the group
	return out
}

// The job's timeout kills the whole tree, SIGTERM then SIGKILL after the
// grace: when the job is failed (code TIMEOUT), no process of it is left.
func TestTimeoutKillsTheProcessTree(t *testing.T) {
	t.Parallel()
	env, _ := setup(t, "sh.hang", killTree, shell.Config{})
	job := submit(t, env, "sh.hang", nil, jetflow.Timeout(time.Second), jetflow.MaxRetries(0))
	started := time.Now()
	ev := named(t, env, job.ID, "pids")[0]
	done := wait(t, env, job.ID)
	if done.State != jetflow.Failed || done.Error.Code != "TIMEOUT" || done.Attempts != 1 {
		t.Fatalf("job %s after %d attempts: %+v", done.State, done.Attempts, done.Error)
	}
	for _, pid := range pids(t, ev) {
		if !gone(pid) {
			t.Fatalf("%d outlived the attempt (pids %s)", pid, ev.Message)
		}
	}
	if took := time.Since(started); took < 1300*time.Millisecond {
		t.Fatalf("ended %s after submit: before the timeout and the grace", took)
	}
}

// Cancelling a running job kills its tree the same way; Close waits for
// the attempt to end, and then none of its processes is left.
func TestCancelKillsTheProcessTree(t *testing.T) {
	t.Parallel()
	env, r := setup(t, "sh.hang", killTree, shell.Config{})
	job := submit(t, env, "sh.hang", nil)
	ev := named(t, env, job.ID, "pids")[0]
	if _, err := env.Client.Cancel(context.Background(), job.ID, "enough"); err != nil {
		t.Fatal(err)
	}
	if done := wait(t, env, job.ID); done.State != jetflow.Cancelled {
		t.Fatalf("job %s", done.State)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids(t, ev) {
		if !gone(pid) {
			t.Fatalf("%d outlived the attempt (pids %s)", pid, ev.Message)
		}
	}
}

// A worker that stops hands the job back (job.requeued) and its process
// tree is killed: Close returns once it is gone.
func TestShutdownKillsTheProcessTree(t *testing.T) {
	t.Parallel()
	env, r := setup(t, "sh.hang", killTree, shell.Config{})
	job := submit(t, env, "sh.hang", nil)
	ev := named(t, env, job.ID, "pids")[0]
	env.Worker.Stop(context.Background())
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids(t, ev) {
		if !gone(pid) {
			t.Fatalf("%d outlived the attempt (pids %s)", pid, ev.Message)
		}
	}
	j, err := env.Client.Get(context.Background(), job.ID)
	if err != nil || j.State != jetflow.Queued {
		t.Fatalf("job %+v, %v: want queued again", j, err)
	}
}

// A command that writes more than MaxOutput, to a file or to stdout, is
// killed at once and fails with OUTPUT_TOO_LARGE; what it wrote to its logs
// is cut at the limit.
func TestOutputOverTheCapFails(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	for _, tc := range []struct{ name, script string }{
		{"file", `head -c 5000000 /dev/zero > "$JETFLOW_OUTPUT/big"; trap '' TERM; sleep 1000`},
		{"stdout", `trap '' TERM; yes`},
		{"file then exit", `head -c 3000000 /dev/zero > big; exit 0`},
		{"into stdout.txt", `head -c 20000000 /dev/zero >> stdout.txt; echo ok`},
		{"sparse output", `truncate -s 2G "$JETFLOW_OUTPUT/big"; exit 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c collected
			cfg := shell.Config{MaxOutput: limit, KillGrace: time.Minute}
			c.hooks(&cfg)
			env, _ := setup(t, "sh.big", tc.script, cfg)
			job := submit(t, env, "sh.big", nil, jetflow.MaxRetries(0))
			done := wait(t, env, job.ID)
			if done.State != jetflow.Failed || done.Error.Code != shell.CodeOutputTooLarge {
				t.Fatalf("job %s: %+v", done.State, done.Error)
			}
			c.mu.Lock()
			defer c.mu.Unlock()
			if len(c.stdout[0]) > limit {
				t.Fatalf("stdout.txt has %d bytes", len(c.stdout[0]))
			}
			// Nothing of what went over is handed to Collect to archive.
			if len(c.outputs[0]) != 0 {
				t.Fatalf("outputs of an attempt over the cap: %+v", c.outputs[0])
			}
		})
	}
}

// Outputs never name anything outside the output directory: links are
// left out, and an output directory replaced by a link has no outputs.
func TestOutputsSkipLinks(t *testing.T) {
	t.Parallel()
	var c collected
	var cfg shell.Config
	c.hooks(&cfg)
	env, _ := setup(t, "sh.links", `mkdir elsewhere; echo x > elsewhere/secret
rm -r "$JETFLOW_OUTPUT"; ln -s "$PWD/elsewhere" "$JETFLOW_OUTPUT"`, cfg)
	done := wait(t, env, submit(t, env, "sh.links", nil).ID)
	var res shell.Result
	if err := json.Unmarshal(done.Result, &res); err != nil || done.State != jetflow.Succeeded || len(res.Outputs) != 0 || res.OutputCount != 0 {
		t.Fatalf("job %s, result %s", done.State, done.Result)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.outputs[0]) != 0 {
		t.Fatalf("outputs %+v", c.outputs[0])
	}
}

// A payload over MaxEnvPayload is only in payload.json, not in
// JETFLOW_PAYLOAD.
func TestLargePayloadIsOnlyInTheFile(t *testing.T) {
	t.Parallel()
	env, _ := setup(t, "sh.large", `test -z "${JETFLOW_PAYLOAD+set}" || { echo "JETFLOW_PAYLOAD is set" >&2; exit 1; }
wc -c < payload.json`, shell.Config{})
	payload := strings.Repeat("x", shell.MaxEnvPayload)
	done := wait(t, env, submit(t, env, "sh.large", payload, jetflow.MaxRetries(0)).ID)
	var res shell.Result
	if err := json.Unmarshal(done.Result, &res); err != nil || done.State != jetflow.Succeeded ||
		strings.TrimSpace(res.StdoutTail) != strconv.Itoa(len(payload)+2) {
		t.Fatalf("job %s %+v, result %s", done.State, done.Error, done.Result)
	}
}

// A workflow step run by a command finds its dependencies' results in
// inputs.json, and its name and the file's path in the environment; a job
// that is not a step has neither.
func TestStepInputsInTheDirectory(t *testing.T) {
	t.Parallel()
	env := jetflowtest.New(t, jetflowtest.Options{Worker: jetflow.WorkerConfig{ShutdownGrace: 200 * time.Millisecond}})
	env.Worker.Handle("sh.make", jetflow.HandlerFunc(func(_ context.Context, j *jetflow.RawJob) (json.RawMessage, error) {
		return json.RawMessage(`{"made":` + string(j.Payload) + `}`), nil
	}))
	path := filepath.Join(t.TempDir(), "script.sh")
	script := `set -eu
if [ -z "${JETFLOW_STEP:-}" ]; then
  test ! -e inputs.json
  test -z "${JETFLOW_INPUTS:-}"
  echo "not a step"
  exit 0
fi
test "$JETFLOW_STEP" = use
test "$JETFLOW_INPUTS" = "$PWD/inputs.json"
cat inputs.json
`
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := shell.New(shell.Config{Command: "bash " + path, WorkDir: filepath.Join(t.TempDir(), "jobs"), KillGrace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	env.Worker.Handle("sh.use", r)
	if err := env.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })

	wf := jetflow.NewWorkflow("shell-inputs")
	wf.Step("use", "sh.use", nil).After(wf.Step("a", "sh.make", 1), wf.Step("b", "sh.make", 2))
	ctx := context.Background()
	res, err := env.Client.SubmitWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	if done := wait(t, env, res.ID); done.State != jetflow.Succeeded {
		t.Fatalf("workflow %s: %+v", done.State, done.Error)
	}
	info, err := env.Client.GetWorkflow(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out shell.Result
	if s := info.Step("use"); s == nil || json.Unmarshal(s.Result, &out) != nil {
		t.Fatalf("step use: %+v", s)
	}
	if out.StdoutTail != `{"a":{"made":1},"b":{"made":2}}` {
		t.Fatalf("inputs.json: %q", out.StdoutTail)
	}
	plain := wait(t, env, submit(t, env, "sh.use", nil).ID)
	if err := json.Unmarshal(plain.Result, &out); err != nil || plain.State != jetflow.Succeeded || out.StdoutTail != "not a step\n" {
		t.Fatalf("plain job %s: %s %+v", plain.State, plain.Result, plain.Error)
	}
}
