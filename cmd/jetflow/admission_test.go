package main

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// jetflow queue set --max-running-per-key and --rate-limit, submit
// --concurrency-key: a key's second job waits for its first; get says
// why; queues shows the limits; --rate-limit 0 removes the period and key
// too. (The test's demo worker serves the default queue only.)
func TestCLIKeyAndRateLimits(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("queue", "set", "default", "--max-running-per-key", "1", "--rate-limit", "100", "--rate-period", "1m", "--rate-key", "concurrency_key")
	if code != exitOK || out != "default\tmax_running none\tmax_running_per_user none\tmax_running_per_key 1\trate_limit 100/1m0s per concurrency_key\n" {
		t.Fatalf("queue set: %d %q %q", code, out, errs)
	}
	out, _, code = e.jetflow("queues")
	if code != exitOK || !strings.Contains(out, "PER KEY") || !regexp.MustCompile(`\ndefault\s+active\s+\d+\s+\d+\s+\d+\s+none\s+none\s+\d+\s+1\s+100/1m0s per concurrency_key\s+no\n`).MatchString(out) {
		t.Fatalf("queues: %d %q", code, out)
	}
	out, _, _ = e.jetflow("queues", "--json")
	var qs []jetflow.QueueInfo
	if err := json.Unmarshal([]byte(out), &qs); err != nil || len(qs) == 0 || qs[0].RateLimit != 100 || qs[0].RatePeriodSeconds != 60 ||
		qs[0].RateKey != "concurrency_key" || qs[0].MaxRunningPerKey != 1 {
		t.Fatalf("queues --json: %s", out)
	}
	submit := func() jetflow.JobInfo {
		t.Helper()
		out, errs, code := e.jetflow("submit", "demo.sleep", `{"seconds":30}`, "--concurrency-key", "cust-9", "--json")
		var j jetflow.JobInfo
		if code != exitOK || json.Unmarshal([]byte(out), &j) != nil || j.ConcurrencyKey != "cust-9" {
			t.Fatalf("submit: %d %q %q", code, out, errs)
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
		if j := get(second.ID); j.State != jetflow.Pending || j.Hold == nil || j.Hold.Reason != "key" {
			return fmt.Errorf("second is %s, hold %+v; want pending for its key", j.State, j.Hold)
		}
		return nil
	})
	out, _, _ = e.jetflow("get", second.ID)
	for _, want := range []string{"concurrency_key   cust-9", `waits             key "cust-9" runs 1 in queue default`} {
		if !strings.Contains(out, want) {
			t.Fatalf("get of a job held by its key does not say %q:\n%s", want, out)
		}
	}
	for _, id := range []string{first.ID, second.ID} {
		if _, errs, code := e.jetflow("cancel", id); code != exitOK {
			t.Fatalf("cancel: %s", errs)
		}
	}
	if out, errs, code := e.jetflow("replay", "--verify"); code != exitOK || !regexp.MustCompile(`\n  [12] admissions of queues with a rate limit checked against it\n`).MatchString(out) {
		t.Fatalf("replay --verify: %d %q %q", code, out, errs)
	}
	if out, errs, code := e.jetflow("queue", "set", "default", "--rate-limit", "0"); code != exitOK ||
		out != "default\tmax_running none\tmax_running_per_user none\tmax_running_per_key 1\trate_limit none\n" {
		t.Fatalf("queue set --rate-limit 0: %d %q %q", code, out, errs)
	}
}

func TestCLIPriorities(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("queue", "set", "reports", "--priorities", "--max-queued", "5")
	if code != exitOK || out != "reports\tmax_running none\tmax_running_per_user none\tpriorities true\tmax_queued 5\n" {
		t.Fatalf("queue set --priorities: %d %q %q", code, out, errs)
	}
	out, _, code = e.jetflow("queues")
	if code != exitOK || !regexp.MustCompile(`\nreports\s+active\s+\d+\s+\d+\s+\d+\s+none\s+none\s+\d+\s+none\s+none\s+yes \(max_queued 5\)\n`).MatchString(out) {
		t.Fatalf("queues: %d %q", code, out)
	}
	out, _, _ = e.jetflow("queues", "--json")
	var qs []jetflow.QueueInfo
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(qs, func(q jetflow.QueueInfo) bool { return q.Name == "reports" })
	if i < 0 || !qs[i].Priorities || qs[i].MaxQueued != 5 {
		t.Fatalf("queues --json: %s", out)
	}
	_, errs, code = e.jetflow("queue", "set", "reports", "--max-queued", "-1")
	if code != exitUsage || !strings.Contains(errs, "--max-queued") {
		t.Fatalf("queue set --max-queued -1: %d %q", code, errs)
	}
	// The window given back: 100 with priorities.
	out, errs, code = e.jetflow("queue", "set", "reports", "--max-queued", "0")
	if code != exitOK || out != "reports\tmax_running none\tmax_running_per_user none\tpriorities true\tmax_queued none\n" {
		t.Fatalf("queue set --max-queued 0: %d %q %q", code, out, errs)
	}
	out, errs, code = e.jetflow("queue", "set", "reports", "--priorities=false")
	if code != exitOK || out != "reports\tmax_running none\tmax_running_per_user none\n" {
		t.Fatalf("queue set --priorities=false: %d %q %q", code, out, errs)
	}
}

// jetflow reprioritize: a scheduled job takes its new priority (get shows
// it, its history has the job.reprioritized); an ended job is refused
// with exit 1 naming why; an unknown one with exit 2.
func TestCLIReprioritize(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("submit", "demo.echo", `{}`, "--delay", "1h", "--json")
	var j jetflow.JobInfo
	if code != exitOK || json.Unmarshal([]byte(out), &j) != nil || j.State != jetflow.Scheduled {
		t.Fatalf("submit: %d %q %q", code, out, errs)
	}
	out, errs, code = e.jetflow("reprioritize", j.ID, "--priority", "-5")
	if code != exitOK || out != j.ID+"\tscheduled\tpriority -5\n" {
		t.Fatalf("reprioritize: %d %q %q", code, out, errs)
	}
	out, _, _ = e.jetflow("get", j.ID, "--json")
	var got jetflow.JobInfo
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.Priority != -5 || got.Hold == nil ||
		got.Hold.Reason != "schedule" || got.Hold.Until == nil || got.RunAt == nil || !got.Hold.Until.Equal(*got.RunAt) {
		t.Fatalf("get: %q", out)
	}
	// Why it waits: its time.
	if out, _, _ = e.jetflow("get", j.ID); !regexp.MustCompile(`\nwaits +scheduled: starts at `).MatchString(out) {
		t.Fatalf("get of a scheduled job does not say why it waits:\n%s", out)
	}
	out, _, _ = e.jetflow("events", j.ID)
	if !strings.Contains(out, "job.reprioritized") || !strings.Contains(out, "priority -5, was 0") {
		t.Fatalf("events: %q", out)
	}
	if _, errs, code := e.jetflow("cancel", j.ID); code != exitOK {
		t.Fatalf("cancel: %s", errs)
	}
	if _, errs, code := e.jetflow("reprioritize", j.ID, "--priority", "3"); code != exitFailed || !strings.Contains(errs, "job.reprioritized") {
		t.Fatalf("reprioritize a cancelled job: %d %q", code, errs)
	}
	if _, errs, code := e.jetflow("reprioritize", "01JD3K2Q4V8ZB7R1X9C0M5T6NA", "--priority", "3"); code != exitUsage || !strings.Contains(errs, "not found") {
		t.Fatalf("reprioritize an unknown job: %d %q", code, errs)
	}
}
