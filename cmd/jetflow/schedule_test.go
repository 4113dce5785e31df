package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestCLIScheduleMistakes: each mistake in schedule create is exit 2
// naming the flag (or the argument) at fault, and nothing is written.
func TestCLIScheduleMistakes(t *testing.T) {
	e := newCLIEnv(t)
	t.Setenv(envNamespace, "")
	create := func(args ...string) []string { return append([]string{"schedule", "create"}, args...) }
	for _, c := range []struct {
		args []string
		want string
	}{
		{create("x", "demo.echo"), "--cron or --every is required"},
		{create("x", "demo.echo", "--cron", "* * * * *", "--every", "1m"), "--every"},
		{create("x", "demo.echo", "--cron", "* * 32 * *"), "--cron"},
		{create("x", "demo.echo", "--cron", "*/5 * * * * *"), "--cron"},
		{create("x", "demo.echo", "--cron", "0 3 * * *", "--timezone", "Moon/Base"), "--timezone"},
		{create("x", "demo.echo", "--every", "0.5"), "--every"},
		{create("x", "demo.echo", "--every", "0"), "--every"},
		{create("x", "demo.echo", "--every", "-1s"), "--every"},
		{create("x", "demo.echo", "--every", "soon"), "--every"},
		{create("x", "demo.echo", "--every", "1m", "--overlap", "wait"), "--overlap"},
		{create("x", "demo.echo", "--every", "1m", "--misfire", "later"), "--misfire"},
		{create("x", "demo.echo", "--every", "1m", "--jitter", "2m"), "--jitter"},
		{create("x", "demo.echo", "--every", "1m", "--max-retries", "-1"), "--max-retries"},
		{create("x", "demo.echo", "--every", "1m", "--queue", ""), "--queue"},
		{create("x", "demo.echo", "--every", "1m", "--namespace", "a@b"), "--namespace"},
		{create("x", "demo.echo", "--every", "1m", "--when", "now"), "--when"},
		{create("a.b", "demo.echo", "--every", "1m"), "name"},
		{create("x", "demo.echo", "{not json", "--every", "1m"), "payload"},
		{create("x"), "2 to 3 arguments"},
		{[]string{"schedule", "get"}, "1 argument"},
		{[]string{"schedule", "get", "a.b"}, "name"},
		{[]string{"schedule", "ls", "--namespace", "a:b"}, "--namespace"},
		{[]string{"schedule", "nope"}, "nope"},
		{[]string{"schedule"}, "want a subcommand"},
	} {
		_, errs, code := e.jetflow(c.args...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%q: exit %d %q, want 2 naming %s", c.args, code, errs, c.want)
		}
	}
	// The same mistake under --json: a problem naming the flag.
	out, _, code := e.jetflow("schedule", "create", "x", "demo.echo", "--cron", "0 3 * * *", "--timezone", "Moon/Base", "--json")
	var p struct{ Error jetflow.Problem }
	if code != exitUsage || json.Unmarshal([]byte(out), &p) != nil || p.Error.Field != "--timezone" || p.Error.Type != "invalid-input" {
		t.Fatalf("--json: exit %d %s", code, out)
	}
	if ss, err := e.cl.Schedules(t.Context(), ""); err != nil || len(ss) != 0 {
		t.Fatalf("refused creates wrote %d schedules (%v)", len(ss), err)
	}
}

// TestCLISchedules: create (created, then exists; another spec exit 1),
// ls, get with the last runs naming the jobs that ran, pause, resume,
// delete, and a schedule that is not there (exit 2).
func TestCLISchedules(t *testing.T) {
	e := newCLIEnv(t)
	t.Setenv(envNamespace, "")
	out, errs, code := e.jetflow("schedule", "create", "beat", "demo.echo", `{"n":1}`, "--every", "1s", "--overlap", "allow", "--max-retries", "0")
	if code != exitOK || !strings.HasPrefix(out, "beat\tcreated\tnext ") {
		t.Fatalf("create: exit %d %q %q", code, out, errs)
	}
	if out, _, code := e.jetflow("schedule", "create", "beat", "demo.echo", `{"n":1}`, "--every", "1s", "--overlap", "allow", "--max-retries", "0"); code != exitOK || !strings.HasPrefix(out, "beat\texists\t") {
		t.Fatalf("create again: exit %d %q", code, out)
	}
	if _, errs, code := e.jetflow("schedule", "create", "beat", "demo.echo", "--every", "2s"); code != exitFailed || !strings.Contains(errs, "another spec") {
		t.Fatalf("create another spec: exit %d %q", code, errs)
	}
	out, errs, code = e.jetflow("schedule", "create", "nightly", "demo.echo", "--cron", "0 3 * * *", "--timezone", "Europe/Berlin", "--namespace", "shop", "--json")
	var night struct {
		Name, Namespace, Cron, Timezone, Overlap, Misfire string
		NextRunAt                                         *time.Time `json:"next_run_at"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &night) != nil || night.Namespace != "shop" || night.Cron != "0 3 * * *" ||
		night.Timezone != "Europe/Berlin" || night.Overlap != "skip" || night.Misfire != "once" || night.NextRunAt == nil ||
		night.NextRunAt.In(mustLoad(t, "Europe/Berlin")).Hour() != 3 {
		t.Fatalf("create --json: exit %d %s %s", code, out, errs)
	}

	// A tick fires a job that ran; get names it.
	var got struct {
		LastRuns []struct {
			At      time.Time `json:"at"`
			Outcome string    `json:"outcome"`
			JobID   string    `json:"job_id"`
		} `json:"last_runs"`
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		out, errs, code := e.jetflow("schedule", "get", "beat", "--json")
		if code != exitOK || json.Unmarshal([]byte(out), &got) != nil {
			return fmt.Errorf("get: exit %d %s %s", code, out, errs)
		}
		if len(got.LastRuns) == 0 {
			return fmt.Errorf("no tick yet")
		}
		return nil
	})
	run := got.LastRuns[0]
	if run.Outcome != "fired" || run.JobID == "" {
		t.Fatalf("run %+v", run)
	}
	job, err := e.cl.Wait(t.Context(), run.JobID)
	if err != nil || job.Type != "demo.echo" || job.State != jetflow.Succeeded || job.Namespace != "default" ||
		job.IdempotencyKey != fmt.Sprintf("schedule:beat:%d", run.At.UnixNano()) {
		t.Fatalf("job %+v %v", job, err)
	}
	out, _, code = e.jetflow("schedule", "get", "beat")
	if code != exitOK || !strings.Contains(out, "every 1s") || !strings.Contains(out, "Last runs") || !strings.Contains(out, run.JobID) {
		t.Fatalf("get: exit %d\n%s", code, out)
	}

	// ls: every namespace, or one.
	out, _, code = e.jetflow("schedule", "ls")
	if code != exitOK || !strings.Contains(out, "NEXT RUN") || !strings.Contains(out, "beat") || !strings.Contains(out, "0 3 * * * (Europe/Berlin)") {
		t.Fatalf("ls: exit %d\n%s", code, out)
	}
	var ls struct {
		Schedules []struct{ Name, Namespace string }
	}
	out, _, code = e.jetflow("schedule", "ls", "--namespace", "shop", "--json")
	if code != exitOK || json.Unmarshal([]byte(out), &ls) != nil || len(ls.Schedules) != 1 || ls.Schedules[0].Name != "nightly" {
		t.Fatalf("ls --namespace shop: exit %d %s", code, out)
	}

	// pause, resume, delete.
	if out, _, code := e.jetflow("schedule", "pause", "nightly", "--namespace", "shop"); code != exitOK || out != "nightly\tpaused\n" {
		t.Fatalf("pause: exit %d %q", code, out)
	}
	out, _, _ = e.jetflow("schedule", "get", "nightly", "--namespace", "shop", "--json")
	var st struct {
		Paused    bool       `json:"paused"`
		NextRunAt *time.Time `json:"next_run_at"`
	}
	if json.Unmarshal([]byte(out), &st) != nil || !st.Paused || st.NextRunAt != nil {
		t.Fatalf("paused: %s", out)
	}
	if out, _, code := e.jetflow("schedule", "resume", "nightly", "--namespace", "shop"); code != exitOK || out != "nightly\tresumed\n" {
		t.Fatalf("resume: exit %d %q", code, out)
	}
	if out, _, code := e.jetflow("schedule", "delete", "beat"); code != exitOK || out != "beat\tdeleted\n" {
		t.Fatalf("delete: exit %d %q", code, out)
	}
	for _, verb := range []string{"get", "pause", "delete"} {
		if _, errs, code := e.jetflow("schedule", verb, "beat"); code != exitUsage || !strings.Contains(errs, `schedule "beat": no such schedule`) {
			t.Fatalf("%s deleted: exit %d %q", verb, code, errs)
		}
	}
	if _, errs, code := e.jetflow("schedule", "get", "nightly"); code != exitUsage || !strings.Contains(errs, "no such schedule") {
		t.Fatalf("get of another namespace: exit %d %q", code, errs)
	}
}

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}
