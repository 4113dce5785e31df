package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// get --at, ls --at and replay's scopes from the command line, and their
// bad input: exit 2 naming the flag, before anything is read.
func TestCLIHistory(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("submit", "demo.echo", `{"n": 1}`, "--wait", "--json")
	if code != exitOK {
		t.Fatalf("submit: %d %s", code, errs)
	}
	var job struct {
		ID        string    `json:"id"`
		CreatedAt time.Time `json:"created_at"`
	}
	if err := json.Unmarshal([]byte(out), &job); err != nil {
		t.Fatal(err)
	}
	// The record is written after the event is stored: every instant
	// from now on sees the job succeeded.
	now := time.Now().UTC().Format(time.RFC3339Nano)
	before := job.CreatedAt.Add(-time.Hour).UTC().Format(time.RFC3339Nano)
	if out, errs, code := e.jetflow("get", job.ID, "--at", now, "--json"); code != exitOK || !strings.Contains(out, `"state": "succeeded"`) {
		t.Errorf("get --at now: %d %q %q", code, out, errs)
	}
	if _, errs, code := e.jetflow("get", job.ID, "--at", before); code != exitUsage || !strings.Contains(errs, "not found") {
		t.Errorf("get --at before: %d %q", code, errs)
	}
	if out, errs, code := e.jetflow("ls", "--at", now, "--state", "succeeded"); code != exitOK || !strings.Contains(out, job.ID) {
		t.Errorf("ls --at now: %d %q %q", code, out, errs)
	}
	if out, errs, code := e.jetflow("ls", "--at", now, "--state", "queued", "--json"); code != exitOK || !strings.Contains(out, `"jobs": []`) {
		t.Errorf("ls --at now --state queued: %d %q %q", code, out, errs)
	}
	if out, errs, code := e.jetflow("replay", "--job", job.ID); code != exitOK || !strings.Contains(out, "rebuilt 1 jobs") || !strings.Contains(out, "succeeded  1") {
		t.Errorf("replay --job: %d %q %q", code, out, errs)
	}
	if out, errs, code := e.jetflow("replay", "--until", before); code != exitOK || !strings.Contains(out, "rebuilt 0 jobs") {
		t.Errorf("replay --until before: %d %q %q", code, out, errs)
	}
	if out, errs, code := e.jetflow("replay", "--verify", "--type", "demo.echo", "--settle", "0"); code != exitOK || !strings.Contains(out, "verified 1 jobs (type demo.echo)") || !strings.Contains(out, "against 1 records: 0 differ") {
		t.Errorf("replay --verify --type: %d %q %q", code, out, errs)
	}
	_, lastSeq := e.written()
	client := func(args ...string) []string { return append([]string{args[0], "--nats", e.url}, args[1:]...) }
	for _, c := range []struct {
		args []string
		want string
	}{
		{client("get", job.ID, "--at", "yesterday"), "jetflow get: --at yesterday: want an instant in RFC 3339"},
		{client("get", job.ID, "--at", ""), `jetflow get: --at "": must not be empty`},
		{client("get", job.ID, "--at", now, "--watch"), "jetflow get: --watch"},
		{client("ls", "--at", "2026-02-30T00:00:00Z"), "jetflow ls: --at 2026-02-30T00:00:00Z: want an instant"},
		{client("ls", "--at", now, "--cursor", "x"), "jetflow ls: --cursor"},
		{client("ls", "--at", now, "--limit", "0"), "jetflow ls: --limit 0: must be 1 to 1000 with --at"},
		{client("ls", "--at", now, "--limit", "1001"), "jetflow ls: --limit 1001: must be 1 to 1000 with --at"},
		{client("ls", "--at", now, "--state", "sleeping"), "sleeping"},
		{client("replay", "--since", "monday"), "jetflow replay: --since monday: want an instant"},
		{client("replay", "--until", "2020-01-01T00:00:00Z", "--since", "2021-01-01T00:00:00Z"), "jetflow replay: --until"},
		{client("replay", "--namespace", "a b"), "jetflow replay: --namespace"},
		{client("replay", "--queue", "a.b"), "jetflow replay: --queue"},
		{client("replay", "--job", ""), "jetflow replay: --job"},
		{client("replay", "--verify", "--type", "a b"), "jetflow replay: --type"},
		{[]string{"bench", "--verify", "--fanout"}, "jetflow bench: --verify"},
		{[]string{"bench", "--cpu-split", "--workflow", "wide"}, "jetflow bench: --cpu-split true: only for plain jobs"},
	} {
		errs, code := runBounded(t, c.args)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d %q, want 2 and %q", c.args, code, errs, c.want)
		}
	}
	if _, seq := e.written(); seq != lastSeq {
		t.Errorf("bad input wrote events %d..%d", lastSeq+1, seq)
	}
}
