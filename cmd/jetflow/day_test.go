package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// The tests of issue 25, "An operator's day": what an operator typed and
// what jetflow answered.

// runCLIArgs runs the CLI with args as given (no --nats added).
func runCLIArgs(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// An unknown flag names itself and the command, with the flag that was
// meant; an unknown command, with the command that was meant; exit 2.
func TestCLIUnknownFlagsAndCommands(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "demo.echo", "--retries", "3"}, "jetflow: unknown flag --retries for jetflow submit; did you mean --max-retries?\n"},
		{[]string{"submit", "demo.echo", "--dealy=5"}, "jetflow: unknown flag --dealy for jetflow submit; did you mean --delay?\n"},
		{[]string{"ls", "-stat", "failed"}, "jetflow: unknown flag --stat for jetflow ls; did you mean --state?\n"},
		{[]string{"ls", "--frobnicate"}, "jetflow: unknown flag --frobnicate for jetflow ls (jetflow ls --help lists its flags)\n"},
		{[]string{"sumbit", "demo.echo"}, "jetflow: unknown command \"sumbit\"; did you mean jetflow submit? (jetflow help lists the commands)\n"},
		{[]string{"purg"}, "did you mean jetflow purge?"},
		{[]string{"frobnicate"}, "jetflow: unknown command \"frobnicate\" (jetflow help lists the commands)\n"},
		{[]string{"help", "sumbit"}, "jetflow help: unknown command \"sumbit\"; did you mean jetflow submit?"},
		{[]string{"--jsno", "ls"}, "jetflow: unknown flag --jsno before the command; did you mean --json?\n"},
		{[]string{"--wait", "submit", "x"}, "jetflow: unknown flag --wait before the command (before it only the global flags: --json, --namespace, --nats,"},
		{[]string{"submit", "demo.echo", "--max-retries"}, "jetflow submit: --max-retries: needs a value\n"},
		{[]string{"submit", "demo.echo", "--max-retries", "many"}, "jetflow submit: --max-retries many: want a whole number\n"},
		{[]string{"submit", "demo.echo", "--wait=maybe"}, "jetflow submit: --wait maybe: want true or false\n"},
		{[]string{"queue", "frob", "q"}, "jetflow queue: unknown subcommand \"frob\" (jetflow queue has: ls, pause, resume, set)\n"},
		{[]string{"queue", "lss"}, "jetflow queue: unknown subcommand \"lss\"; did you mean jetflow queue ls? (jetflow queue has: ls, pause, resume, set)\n"},
		{[]string{"queue"}, "jetflow queue: want a subcommand: ls, set, pause or resume"},
	} {
		out, errs, code := runCLIArgs(append(tc.args, "--nats", "nats://127.0.0.1:1")...)
		if code != exitUsage || !strings.Contains(errs, tc.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.args, code, out, errs, tc.want)
		}
	}
	if s := suggest("retries", []string{"max-retries", "backoff"}); s != "max-retries" {
		t.Errorf("suggest retries: %q", s)
	}
	if d := editDistance("sumbit", "submit"); d != 1 {
		t.Errorf("sumbit/submit: distance %d", d)
	}
}

// Every duration flag takes seconds (5, 0.5) and Go durations (5s,
// 1m30s); a negative or malformed one is refused naming the flag.
func TestCLIDurationFlags(t *testing.T) {
	e := newCLIEnv(t)
	for in, want := range map[string]time.Duration{"5": 5 * time.Second, "5s": 5 * time.Second, "1m30s": 90 * time.Second,
		"0.5": 500 * time.Millisecond, "0": 0, "1e2": 100 * time.Second} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("%q: %s %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "-1s", "soon", "5 s", "NaN", "Inf", "0x10", "1e300"} {
		if got, err := parseDuration(in); err == nil {
			t.Errorf("%q: accepted as %s", in, got)
		}
	}
	for _, tc := range []struct{ delay, want string }{{"5", "5s"}, {"1m30s", "1m30s"}, {"2.5", "2.5s"}} {
		out, errs, code := e.jetflow("submit", "demo.echo", "--delay", tc.delay, "--timeout", "60", "--backoff", "1.5", "--json")
		var j jetflow.JobInfo
		if code != exitOK || json.Unmarshal([]byte(out), &j) != nil || j.RunAt == nil {
			t.Fatalf("--delay %s: exit %d %q %s", tc.delay, code, out, errs)
		}
		want, _ := time.ParseDuration(tc.want)
		if d := j.RunAt.Sub(j.CreatedAt); d < want || d > want+time.Second {
			t.Errorf("--delay %s: runs %s after its submit, want %s", tc.delay, d, want)
		}
		if j.TimeoutSeconds != 60 || j.BackoffSeconds != 1.5 {
			t.Errorf("--timeout 60 --backoff 1.5: %v %v", j.TimeoutSeconds, j.BackoffSeconds)
		}
	}
	_, seq := e.written()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "demo.echo", "--delay", "-5"}, "jetflow submit: --delay -5: must not be negative\n"},
		{[]string{"submit", "demo.echo", "--delay", "soon"}, "jetflow submit: --delay soon: want a duration: 5 (seconds), 0.5, 5s, 1m30s\n"},
		{[]string{"submit", "demo.echo", "--timeout", "1h-"}, "jetflow submit: --timeout 1h-: want a duration"},
		{[]string{"wait", domain.NewID(), "--timeout", "x"}, "jetflow wait: --timeout x: want a duration"},
		{[]string{"purge", "--older-than", "-1"}, "jetflow purge: --older-than -1: must not be negative\n"},
		{[]string{"replay", "--verify", "--settle", "three"}, "jetflow replay: --settle three: want a duration"},
		{[]string{"worker", "--lease", "-30"}, "jetflow worker: --lease -30: must not be negative\n"},
	} {
		_, errs, code := e.jetflow(tc.args...)
		if code != exitUsage || !strings.Contains(errs, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want %q", tc.args, code, errs, tc.want)
		}
	}
	if _, after := e.written(); after != seq {
		t.Fatalf("refused durations wrote %d events", after-seq)
	}
}

// queue ls lists the queues as queues does; queue pause and resume are
// pause and resume.
func TestCLIQueueSubcommands(t *testing.T) {
	e := newCLIEnv(t)
	if _, errs, code := e.jetflow("submit", "demo.echo", "--queue", "reports"); code != exitOK {
		t.Fatalf("submit: %d %s", code, errs)
	}
	queues, _, code := e.jetflow("queues")
	out, errs, code2 := e.jetflow("queue", "ls")
	if code != exitOK || code2 != exitOK || !strings.Contains(out, "reports") || !strings.HasPrefix(out, "QUEUE") {
		t.Fatalf("queue ls: exit %d %q %s", code2, out, errs)
	}
	if strings.Fields(out)[0] != strings.Fields(queues)[0] || strings.Count(out, "\n") != strings.Count(queues, "\n") {
		t.Fatalf("queue ls:\n%s\nqueues:\n%s", out, queues)
	}
	if out, errs, code := e.jetflow("queue", "pause", "reports"); code != exitOK || out != "reports\tpaused\n" {
		t.Fatalf("queue pause: %d %q %s", code, out, errs)
	}
	out, _, _ = e.jetflow("queue", "ls", "--json")
	var qs []jetflow.QueueInfo
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "reports" && !q.Paused {
			t.Fatalf("reports not paused: %+v", q)
		}
	}
	if out, errs, code := e.jetflow("queue", "resume", "reports"); code != exitOK || out != "reports\tresumed\n" {
		t.Fatalf("queue resume: %d %q %s", code, out, errs)
	}
	if out, errs, code := e.jetflow("queue", "set", "reports", "--max-running", "2"); code != exitOK || !strings.Contains(out, "max_running 2") {
		t.Fatalf("queue set: %d %q %s", code, out, errs)
	}
}

// version (and --version): the module's version and Go's.
func TestCLIVersion(t *testing.T) {
	t.Parallel()
	out, errs, code := runCLIArgs("version")
	if code != exitOK || !strings.HasPrefix(out, "jetflow ") || !strings.Contains(out, runtime.Version()) || errs != "" {
		t.Fatalf("version: %d %q %q", code, out, errs)
	}
	if again, _, code := runCLIArgs("--version"); code != exitOK || again != out {
		t.Fatalf("--version: %d %q", code, again)
	}
	out, _, code = runCLIArgs("--json", "version")
	var v versionInfo
	if code != exitOK || json.Unmarshal([]byte(out), &v) != nil || v.Go != runtime.Version() || v.Version == "" {
		t.Fatalf("version --json: %d %q", code, out)
	}
}

// help COMMAND, COMMAND -h and COMMAND --help print the command's help
// (summary, usage, its flags, examples) and exit 0; help lists every
// command by group.
func TestCLIHelp(t *testing.T) {
	t.Parallel()
	out, errs, code := runCLIArgs("help", "submit")
	if code != exitOK || errs != "" {
		t.Fatalf("help submit: %d %s", code, errs)
	}
	for _, want := range []string{"jetflow submit: submit a job\n", "Usage:\n  jetflow submit TYPE [JSON] [flags]\n",
		"\nFlags:\n", "  --delay duration ", "  --max-retries int ", "(default 3)", "\nGlobal flags (also before the command):\n", "  --json ",
		"\nExamples:\n  jetflow submit demo.echo '{\"hello\":\"world\"}' --wait\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("help submit does not say %q:\n%s", want, out)
		}
	}
	for _, args := range [][]string{{"submit", "-h"}, {"submit", "--help"}, {"submit", "demo.echo", "--wait", "--help"}, {"--help", "submit"}} {
		if again, errs, code := runCLIArgs(args...); code != exitOK || again != out || errs != "" {
			t.Errorf("%q: exit %d, stderr %q, same as help submit: %v", args, code, errs, again == out)
		}
	}
	// Every command and subcommand has its help, and every one is listed.
	overview, _, code := runCLIArgs("help")
	if code != exitOK {
		t.Fatalf("help: exit %d", code)
	}
	for _, g := range helpGroups {
		if !strings.Contains(overview, "\n"+g+":\n") {
			t.Errorf("help has no group %q", g)
		}
	}
	for _, h := range helps {
		out, errs, code := runCLIArgs(append([]string{"help"}, strings.Fields(h.name)...)...)
		if code != exitOK || !strings.Contains(out, "jetflow "+h.name+": "+h.summary) || !strings.Contains(out, "Usage:\n  jetflow ") || errs != "" {
			t.Errorf("help %s: exit %d, stderr %q:\n%s", h.name, code, errs, out)
		}
		if h.group != "" && !regexp.MustCompile(`\n  `+regexp.QuoteMeta(h.name)+`( \(.*\))?  +`+regexp.QuoteMeta(h.summary)).MatchString(overview) {
			t.Errorf("help does not list %s", h.name)
		}
	}
	if _, _, code := runCLIArgs(); code != exitUsage {
		t.Errorf("no command: exit %d", code)
	}
}

// Help does not print a secret default: the environment's token, or a
// password in $JETFLOW_NATS.
func TestCLIHelpHidesSecrets(t *testing.T) {
	t.Setenv("JETFLOW_TOKEN", "jft_secret")
	t.Setenv("JETFLOW_NATS", "nats://u:hunter2@127.0.0.1:4222")
	out, _, code := runCLIArgs("ls", "--help")
	if code != exitOK || strings.Contains(out, "jft_secret") || strings.Contains(out, "hunter2") || !strings.Contains(out, "--token string") {
		t.Fatalf("help shows a secret:\n%s", out)
	}
}

// The global flags are taken before the command as after it.
func TestCLIGlobalFlagsAnywhere(t *testing.T) {
	e := newCLIEnv(t)
	t.Setenv(envNamespace, "")
	out, errs, code := runCLIArgs("--nats", e.url, "--json", "--namespace", "ops", "submit", "demo.echo", `{"n":1}`, "--wait")
	var j jetflow.JobInfo
	if code != exitOK || json.Unmarshal([]byte(out), &j) != nil || j.Namespace != "ops" || j.State != jetflow.Succeeded {
		t.Fatalf("globals first: exit %d %q %s", code, out, errs)
	}
	before, _, code1 := runCLIArgs("--json", "--nats="+e.url, "ls", "--namespace", "ops")
	after, _, code2 := runCLIArgs("ls", "--namespace", "ops", "--nats", e.url, "--json")
	if code1 != exitOK || code2 != exitOK || before != after || !strings.Contains(before, j.ID) {
		t.Fatalf("--json ls and ls --json differ:\n%s\n%s", before, after)
	}
	if out, _, code := runCLIArgs("--nats", e.url, "queue", "--json", "ls"); code != exitOK || !strings.HasPrefix(out, "[") {
		t.Fatalf("queue --json ls: %d %q", code, out)
	}
}

// ls stops at --limit (100) and says how many more there are, with the
// command of the next page; the pages together are every job once.
func TestCLIListPages(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testkit.Ctx(t)
	var want []string
	for i := range 7 {
		var opts []jetflow.SubmitOption
		if i%2 == 0 { // ids that do not sort by time
			opts = append(opts, jetflow.IdempotencyKey(fmt.Sprintf("page-%d", i)))
		}
		j, err := e.cl.Submit(ctx, "page.park", i, opts...)
		if err != nil {
			t.Fatal(err)
		}
		want = append([]string{j.ID}, want...)
	}
	args := []string{"ls", "--type", "page.park", "--limit", "3"}
	var got []string
	for page := 0; page < 3; page++ {
		out, errs, code := e.jetflow(args...)
		if code != exitOK {
			t.Fatalf("%q: exit %d %s", args, code, errs)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")[1:]
		for _, l := range lines {
			got = append(got, strings.Fields(l)[0])
		}
		left := 7 - len(got)
		if left == 0 {
			if errs != "" {
				t.Fatalf("last page: %q", errs)
			}
			break
		}
		m := regexp.MustCompile(`^(\d+) more: jetflow ls --cursor (\S+) --type page.park --limit 3\n$`).FindStringSubmatch(errs)
		if m == nil || m[1] != fmt.Sprint(left) {
			t.Fatalf("page %d: stderr %q, want %d more", page, errs, left)
		}
		args = []string{"ls", "--cursor", m[2], "--type", "page.park", "--limit", "3"}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("pages:\n%v\nwant\n%v", got, want)
	}
	// --json: the jobs and the cursor of the next page ("" on the last).
	var list struct {
		Jobs       []jetflow.JobInfo `json:"jobs"`
		NextCursor string            `json:"next_cursor"`
	}
	out, _, _ := e.jetflow("ls", "--type", "page.park", "--limit", "5", "--json")
	if json.Unmarshal([]byte(out), &list) != nil || len(list.Jobs) != 5 || list.NextCursor != list.Jobs[4].Cursor() {
		t.Fatalf("ls --json: %q", out)
	}
	out, _, _ = e.jetflow("ls", "--type", "page.park", "--limit", "5", "--cursor", list.NextCursor, "--json")
	if json.Unmarshal([]byte(out), &list) != nil || len(list.Jobs) != 2 || list.NextCursor != "" || list.Jobs[1].ID != want[6] {
		t.Fatalf("ls --json, second page: %q", out)
	}
	if _, errs, code := e.jetflow("ls", "--cursor", "nope"); code != exitUsage || !strings.Contains(errs, `jetflow ls: --cursor nope: not a cursor`) {
		t.Fatalf("bad cursor: %d %s", code, errs)
	}
}

// Under --json an error is a problem on stdout, and the exit code is the
// same as without.
func TestCLIErrorsAsJSON(t *testing.T) {
	e := newCLIEnv(t)
	type problem struct {
		Error *struct {
			Type, Title, Detail, Field string
			Status                     int
		} `json:"error"`
	}
	for _, tc := range []struct {
		args              []string
		code              int
		typ, field, inMsg string
		status            int
	}{
		{[]string{"get", domain.NewID(), "--json"}, exitUsage, "not-found", "", "not found", 404},
		{[]string{"--json", "submit", "demo.echo", "--max-retries", "-1"}, exitUsage, "invalid-input", "--max-retries", "--max-retries -1: must be 0-1000", 400},
		{[]string{"submit", "demo.echo", "--retries", "1", "--json"}, exitUsage, "usage", "--retries", "did you mean --max-retries?", 400},
		{[]string{"submit", "bad type!", "--json"}, exitUsage, "invalid-input", "type", "", 400},
		{[]string{"--json", "sumbit"}, exitUsage, "usage", "", "did you mean jetflow submit?", 400},
		{[]string{"ls", "--json", "--nats", "nats://127.0.0.1:1"}, exitUsage, "unavailable", "", "127.0.0.1:1", 503},
	} {
		args := tc.args
		if !strings.Contains(strings.Join(args, " "), "--nats") {
			args = append(args, "--nats", e.url)
		}
		out, errs, code := runCLIArgs(args...)
		var p problem
		if code != tc.code || json.Unmarshal([]byte(out), &p) != nil || p.Error == nil || errs != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", tc.args, code, out, errs)
			continue
		}
		if p.Error.Type != tc.typ || p.Error.Status != tc.status || p.Error.Field != tc.field || p.Error.Title == "" ||
			!strings.Contains(p.Error.Detail, tc.inMsg) {
			t.Errorf("%q: %+v; want type %s, status %d, field %q, detail with %q", tc.args, *p.Error, tc.typ, tc.status, tc.field, tc.inMsg)
		}
	}
	// wait --timeout: the problem and the job, one object, exit 3.
	j, _ := e.cl.Submit(testkit.Ctx(t), "nobody.runs.this", nil)
	out, _, code := e.jetflow("wait", j.ID, "--timeout", "0.1", "--json")
	var timeout struct {
		Error struct{ Type string }
		Job   struct{ ID, State string }
	}
	if code != exitTimeout || json.Unmarshal([]byte(out), &timeout) != nil || timeout.Error.Type != "timeout" || timeout.Job.ID != j.ID {
		t.Fatalf("wait --timeout --json: %d %q", code, out)
	}
}

// Cancel of a job that has ended cancels nothing, says so and exits 1.
func TestCLICancelEndedJob(t *testing.T) {
	e := newCLIEnv(t)
	out, _, code := e.jetflow("submit", "demo.echo", `"x"`, "--wait", "--json")
	var j jetflow.JobInfo
	if code != exitOK || json.Unmarshal([]byte(out), &j) != nil {
		t.Fatalf("submit: %d %q", code, out)
	}
	_, seq := e.written()
	out, errs, code := e.jetflow("cancel", j.ID)
	if code != exitFailed || out != "" || errs != "jetflow cancel: job "+j.ID+" already succeeded: nothing to cancel\n" {
		t.Fatalf("cancel of a succeeded job: exit %d %q %q", code, out, errs)
	}
	out, _, code = e.jetflow("cancel", j.ID, "--json")
	var res struct {
		ID        string
		State     string
		Cancelled *bool
	}
	if code != exitFailed || json.Unmarshal([]byte(out), &res) != nil || res.ID != j.ID || res.State != "succeeded" || res.Cancelled == nil || *res.Cancelled {
		t.Fatalf("cancel --json of a succeeded job: exit %d %q", code, out)
	}
	if _, after := e.written(); after != seq {
		t.Fatalf("cancel of an ended job wrote %d events", after-seq)
	}
	// A job that runs: cancelled, exit 0 (--json: cancelled true); then
	// already cancelled, exit 1.
	out, _, _ = e.jetflow("submit", "demo.sleep", `{"seconds":30}`)
	id := strings.Fields(out)[0]
	out, errs, code = e.jetflow("cancel", id, "--json")
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.State != "cancelled" || res.Cancelled == nil || !*res.Cancelled {
		t.Fatalf("cancel --json: exit %d %q %s", code, out, errs)
	}
	if _, errs, code := e.jetflow("cancel", id); code != exitFailed || !strings.Contains(errs, "already cancelled: nothing to cancel") {
		t.Fatalf("second cancel: exit %d %s", code, errs)
	}
}

// submit --wait tells each failed attempt as it happens, on stderr,
// before the final job.
func TestCLIWaitTellsAttempts(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("submit", "demo.fail", `{"times":2}`, "--backoff", "0.2", "--wait")
	if code != exitOK || !strings.Contains(out, "state        succeeded") {
		t.Fatalf("exit %d:\n%s\n%s", code, out, errs)
	}
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	want := []string{`^submitted \w+, waiting\.\.\.$`,
		`^attempt 1 failed \(DEMO_FAIL: attempt 1 of 2 planned failures\); retry 1 of 3 (now|in [0-9.]+m?s)$`,
		`^attempt 2 failed \(DEMO_FAIL: attempt 2 of 2 planned failures\); retry 2 of 3 (now|in [0-9.]+m?s)$`}
	if len(lines) != len(want) {
		t.Fatalf("stderr:\n%s", errs)
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(lines[i]) {
			t.Fatalf("line %d %q, want %s", i, lines[i], w)
		}
	}
	_, errs, code = e.jetflow("submit", "demo.fail", `{"times":5}`, "--max-retries", "1", "--backoff", "0", "--wait")
	if code != exitFailed || !strings.Contains(errs, "attempt 1 failed (DEMO_FAIL: attempt 1 of 5 planned failures); retry 1 of 1 now\n") ||
		!strings.HasSuffix(errs, "attempt 2 failed (DEMO_FAIL: attempt 2 of 5 planned failures); no retries left\n") {
		t.Fatalf("exit %d:\n%s", code, errs)
	}
	// --json: stdout is the job, stderr says nothing.
	out, errs, code = e.jetflow("submit", "demo.fail", `{"times":1}`, "--backoff", "0", "--wait", "--json")
	if code != exitOK || errs != "" || json.Unmarshal([]byte(out), new(jetflow.JobInfo)) != nil {
		t.Fatalf("--json: exit %d %q %q", code, out, errs)
	}
}

// A job that no live worker serves gets a warning, with the type that was
// meant; get of such a queued job says it again.
func TestCLIWarnsUnservedType(t *testing.T) {
	e := newCLIEnv(t)
	// The demo worker is live once it beat.
	testkit.WaitFor(t, 10*time.Second, func() error {
		ws, err := e.cl.Workers(testkit.Ctx(t))
		if err != nil || len(ws) == 0 || !ws[0].Live {
			return testkit.Errorf("workers %v %v", ws, err)
		}
		return nil
	})
	out, errs, code := e.jetflow("submit", "demo.ecko", `{"a":1}`)
	if code != exitOK || !strings.HasSuffix(out, "\tqueued\n") {
		t.Fatalf("submit: %d %q %s", code, out, errs)
	}
	want := "jetflow submit: warning: no live worker serves demo.ecko in queue default (workers serve: default:demo:greet, demo.echo, demo.fail, demo.fanout, demo.sleep; did you mean demo.echo?)\n"
	if errs != want {
		t.Fatalf("stderr\n%q\nwant\n%q", errs, want)
	}
	id := strings.Fields(out)[0]
	out, errs, code = e.jetflow("get", id)
	if code != exitOK || !regexp.MustCompile(`\nstate +queued\n`).MatchString(out) ||
		errs != strings.Replace(want, "jetflow submit:", "jetflow get:", 1) {
		t.Fatalf("get: %d %q", code, errs)
	}
	if _, errs, _ := e.jetflow("submit", "demo.echo"); errs != "" {
		t.Fatalf("a served type: %q", errs)
	}
	// The demo worker serves queue default only.
	if _, errs, _ := e.jetflow("submit", "demo.echo", "--queue", "other"); errs !=
		"jetflow submit: warning: no live worker serves demo.echo in queue other (no live worker serves that queue; the job waits until one does)\n" {
		t.Fatalf("another queue: %q", errs)
	}
	if _, errs, _ := e.jetflow("submit", "demo.ecko", "--json"); errs != "" {
		t.Fatalf("--json: %q", errs)
	}
	if note := unservedNote(&jetflow.JobInfo{Type: "x", Queue: "q"}, nil); note != "no live worker serves x in queue q (no live worker serves that queue; the job waits until one does)" {
		t.Fatalf("no workers: %q", note)
	}
}

// get --watch prints a line per change until the job ends, then the job,
// and exits as wait does.
func TestCLIGetWatch(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testkit.Ctx(t)
	step := make(chan struct{})
	w := jetflow.NewWorker(e.cl, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	jetflow.Register(w, "cli.watched", func(ctx context.Context, job *jetflow.Job[struct{ Fail bool }]) (string, error) {
		for i := 1; i <= 2; i++ {
			<-step
			if err := job.Progress(int64(i), 2, fmt.Sprintf("step %d", i)); err != nil {
				return "", err
			}
		}
		<-step
		if job.Payload.Fail {
			return "", jetflow.Permanent(fmt.Errorf("as asked"))
		}
		return "done", nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	for _, fail := range []bool{false, true} {
		job, err := e.cl.Submit(ctx, "cli.watched", map[string]bool{"Fail": fail}, jetflow.MaxRetries(0))
		if err != nil {
			t.Fatal(err)
		}
		out := &testkit.SyncBuffer{}
		done := make(chan int, 1)
		go func() { done <- run([]string{"get", job.ID, "--watch", "--nats", e.url}, out, &testkit.SyncBuffer{}) }()
		for _, want := range []string{"running", "[##########..........] 1/2 (50.0%) step 1", "[####################] 2/2 (100.0%) step 2"} {
			testkit.WaitFor(t, 10*time.Second, func() error {
				if !strings.Contains(out.String(), want) {
					return testkit.Errorf("get --watch has not shown %q:\n%s", want, out.String())
				}
				return nil
			})
			step <- struct{}{}
		}
		code := <-done
		state, wantCode := "succeeded", exitOK
		if fail {
			state, wantCode = "failed", exitFailed
		}
		lines := strings.Split(out.String(), "\n")
		if code != wantCode || !strings.HasPrefix(lines[0], job.ID+"  cli.watched  ") ||
			!strings.Contains(out.String(), job.ID+"  cli.watched  "+state+"  [####################] 2/2 (100.0%) step 2\n\nid ") {
			t.Fatalf("get --watch: exit %d\n%s", code, out.String())
		}
		for i := 1; i < len(lines) && lines[i] != ""; i++ {
			if lines[i] == lines[i-1] {
				t.Fatalf("a line printed twice: %q", lines[i])
			}
		}
	}
}
