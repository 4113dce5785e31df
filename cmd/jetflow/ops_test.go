package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/gateway"
	"github.com/jetflow/jetflow/internal/testkit"
)

func TestCLIQueuesPauseResumeRetryWorkers(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testkit.Ctx(t)
	out, errs, code := e.jetflow("submit", "demo.echo", `{"n":1}`, "--wait", "--json")
	if code != exitOK {
		t.Fatalf("submit: %d %s", code, errs)
	}
	var orig jetflow.JobInfo
	if err := json.Unmarshal([]byte(out), &orig); err != nil {
		t.Fatal(err)
	}
	// retry: a new job with retry_of, run to success.
	out, errs, code = e.jetflow("retry", orig.ID, "--wait", "--json")
	var again jetflow.JobInfo
	if code != exitOK || json.Unmarshal([]byte(out), &again) != nil || again.RetryOf != orig.ID ||
		again.ID == orig.ID || again.State != jetflow.Succeeded || strings.Join(strings.Fields(string(again.Result)), "") != `{"n":1}` {
		t.Fatalf("retry: %d %q %s", code, out, errs)
	}
	// Retry of a job that is not terminal is refused.
	out, _, _ = e.jetflow("submit", "demo.sleep", `{"seconds":30}`)
	sleeping := strings.Fields(out)[0]
	if _, errs, code := e.jetflow("retry", sleeping); code != exitFailed || !strings.Contains(errs, "invalid transition") {
		t.Fatalf("retry of a live job: %d %s", code, errs)
	}
	if _, errs, code := e.jetflow("cancel", sleeping); code != exitOK {
		t.Fatalf("cancel: %d %s", code, errs)
	}
	if _, _, code := e.jetflow("retry", "01ARZ3NDEKTSV4RRFFQ69G5FAV"); code != exitUsage {
		t.Fatalf("retry of an unknown job: %d", code)
	}
	// queues, pause, resume.
	if out, _, code := e.jetflow("pause", "default"); code != exitOK || strings.TrimSpace(out) != "default\tpaused" {
		t.Fatalf("pause: %d %q", code, out)
	}
	out, _, code = e.jetflow("queues")
	if code != exitOK || !strings.Contains(out, "QUEUE") || !strings.Contains(out, "paused") {
		t.Fatalf("queues: %d %q", code, out)
	}
	if out, _, code := e.jetflow("resume", "default"); code != exitOK || strings.TrimSpace(out) != "default\tresumed" {
		t.Fatalf("resume: %d %q", code, out)
	}
	out, _, code = e.jetflow("queues", "--json")
	var qs []gateway.QueueInfo
	if code != exitOK || json.Unmarshal([]byte(out), &qs) != nil || len(qs) != 1 || qs[0].Name != "default" || qs[0].Paused {
		t.Fatalf("queues --json: %d %q", code, out)
	}
	if _, errs, code := e.jetflow("pause", "nope"); code != exitUsage || !strings.Contains(errs, "not found") {
		t.Fatalf("pause of an unknown queue: %d %s", code, errs)
	}
	// workers: the SDK worker of the demo handlers, then an HTTP one.
	if out, errs, code := e.jetflow("workers"); code != exitOK || strings.Count(out, "\n") != 2 || !strings.Contains(out, " sdk ") {
		t.Fatalf("workers: %d %q %q", code, out, errs)
	}
	g, err := gateway.New(gateway.Config{Client: e.cl, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	reg, err := gateway.OpenRegistry(ctx, testkit.StoreOf(t, e.cl))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reg.Register(ctx, &gateway.RegisterRequest{Name: "py", Types: []string{"a"}, Queues: []string{"default"}, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	out, _, code = e.jetflow("workers")
	if code != exitOK || !strings.Contains(out, rec.ID) || !strings.Contains(out, "py") {
		t.Fatalf("workers: %d %q", code, out)
	}
	out, _, code = e.jetflow("workers", "--json")
	var ws []gateway.WorkerView
	if code != exitOK || json.Unmarshal([]byte(out), &ws) != nil || len(ws) != 2 || ws[1].ID != rec.ID || !ws[1].Live ||
		ws[1].Kind != "http" || ws[0].Kind != "sdk" || !ws[0].Live {
		t.Fatalf("workers --json: %d %q", code, out)
	}
}

// The job JSON of GET /api/v1/jobs/{id} and of `jetflow get ID --json` is
// one object (projections.View): both decode to the same map, for jobs
// that succeeded (with a result, tags, an idempotency key), failed (with
// an error) and were cancelled.
func TestCLIAndAPIJobJSONAreOne(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testkit.Ctx(t)
	g, err := gateway.New(gateway.Config{Client: e.cl, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer g.Stop(context.Background())
	ts := httptest.NewServer(g)
	defer ts.Close()
	submit := func(args ...string) string {
		t.Helper()
		out, errs, _ := e.jetflow(append([]string{"submit"}, args...)...)
		var j map[string]any
		if err := json.Unmarshal([]byte(out), &j); err != nil {
			t.Fatalf("submit %v: %q %s", args, out, errs)
		}
		return j["id"].(string)
	}
	ids := []string{
		submit("demo.echo", `{"x":[1,2],"s":"<b>"}`, "--wait", "--json", "--tag", "a", "--key", "k-1"),
		submit("demo.fail", `{"times":3}`, "--max-retries", "0", "--wait", "--json"),
	}
	out, _, _ := e.jetflow("submit", "demo.sleep", `{"seconds":30}`)
	sleeping := strings.Fields(out)[0]
	if _, errs, code := e.jetflow("cancel", sleeping); code != exitOK {
		t.Fatalf("cancel: %d %s", code, errs)
	}
	ids = append(ids, sleeping)
	for i, id := range ids {
		out, errs, code := e.jetflow("get", id, "--json")
		var cli map[string]any
		if code != exitOK || json.Unmarshal([]byte(out), &cli) != nil {
			t.Fatalf("get %s: %d %q %s", id, code, out, errs)
		}
		res, err := http.Get(ts.URL + "/api/v1/jobs/" + id)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var api map[string]any
		if res.StatusCode != 200 || json.Unmarshal(body, &api) != nil {
			t.Fatalf("GET %s: %d %s", id, res.StatusCode, body)
		}
		if want := []string{"succeeded", "failed", "cancelled"}[i]; cli["state"] != want {
			t.Fatalf("job %s is %v, want %s", id, cli["state"], want)
		}
		if d := cmp.Diff(cli, api); d != "" {
			t.Fatalf("job %s (%v): jetflow get --json and the API differ (-cli +api):\n%s", id, cli["state"], d)
		}
	}
}

// jetflow queue set, queues and submit --user: a user with a limit of one
// runs one job; the next waits in pending and runs after. (The test's demo
// worker serves the default queue only.)
func TestCLIQueueLimits(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("queue", "set", "default", "--max-running", "1", "--max-running-per-user", "1")
	if code != exitOK || out != "default\tmax_running 1\tmax_running_per_user 1\n" {
		t.Fatalf("queue set: %d %q %q", code, out, errs)
	}
	// A limit not given is kept.
	if out, errs, code := e.jetflow("queue", "set", "default", "--max-running", "3"); code != exitOK || out != "default\tmax_running 3\tmax_running_per_user 1\n" {
		t.Fatalf("queue set --max-running only: %d %q %q", code, out, errs)
	}
	out, _, code = e.jetflow("queues", "--json")
	var qs []jetflow.QueueInfo
	if code != exitOK || json.Unmarshal([]byte(out), &qs) != nil {
		t.Fatalf("queues --json: %d %q", code, out)
	}
	found := false
	for _, q := range qs {
		if q.Name == "default" {
			found = q.MaxRunning == 3 && q.MaxRunningPerUser == 1
		}
	}
	if !found {
		t.Fatalf("queues --json does not show default's limits: %s", out)
	}
	submit := func() jetflow.JobInfo {
		t.Helper()
		out, errs, code := e.jetflow("submit", "demo.sleep", `{"seconds":30}`, "--queue", "default", "--user", "ada", "--json")
		var j jetflow.JobInfo
		if code != exitOK || json.Unmarshal([]byte(out), &j) != nil {
			t.Fatalf("submit: %d %q %q", code, out, errs)
		}
		if j.State != jetflow.Pending && j.State != jetflow.Queued && j.State != jetflow.Running {
			t.Fatalf("submitted to a queue with limits: state %s, want pending (or already admitted)", j.State)
		}
		return j
	}
	first, second := submit(), submit()
	get := func(id string) jetflow.JobInfo {
		out, _, _ := e.jetflow("get", id, "--json")
		var j jetflow.JobInfo
		_ = json.Unmarshal([]byte(out), &j)
		return j
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if j := get(first.ID); j.State != jetflow.Running {
			return fmt.Errorf("first is %s", j.State)
		}
		if j := get(second.ID); j.State != jetflow.Pending {
			return fmt.Errorf("second is %s, want pending (ada's limit is 1)", j.State)
		}
		return nil
	})
	// get says who it runs for, why it waits and its place.
	out, _, _ = e.jetflow("get", second.ID)
	for _, want := range []string{"user              ada", "waits             user ada runs 1 in queue default: the queue's max_running_per_user",
		"pending_position  0 pending jobs admitted before it"} {
		if !strings.Contains(out, want) {
			t.Fatalf("get of a pending job does not say %q:\n%s", want, out)
		}
	}
	out, _, code = e.jetflow("queues")
	if code != exitOK || !strings.Contains(out, "MAX RUNNING") || !regexp.MustCompile(`default\s+active\s+\d+\s+\d+\s+\d+\s+3\s+1\s+1\n`).MatchString(out) {
		t.Fatalf("queues: %d %q", code, out)
	}
	if _, errs, code := e.jetflow("cancel", first.ID); code != exitOK {
		t.Fatalf("cancel: %s", errs)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		if j := get(second.ID); j.State != jetflow.Running {
			return fmt.Errorf("second is %s after the first was cancelled", j.State)
		}
		return nil
	})
	if _, errs, code := e.jetflow("cancel", second.ID); code != exitOK {
		t.Fatalf("cancel: %s", errs)
	}
	if out, errs, code := e.jetflow("replay", "--verify"); code != exitOK || !strings.Contains(out, "queue default: 0 running, 0 pending (from the log; the admitter agrees)") {
		t.Fatalf("replay --verify: %d %q %q", code, out, errs)
	}
}
