package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLITail: tail --since prints the events of its filter from that far
// back, one JSON object a line, and stops after --count; bad flags exit 2.
func TestCLITail(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("submit", "demo.echo", `{"n":1}`, "--wait", "--json")
	var job struct{ ID string }
	if code != exitOK || json.Unmarshal([]byte(out), &job) != nil {
		t.Fatalf("submit: %d %s", code, errs)
	}
	out, errs, code = e.jetflow("tail", "--since", "10m", "--type", "demo.echo", "--count", "3", "--json")
	if code != exitOK {
		t.Fatalf("tail: %d %s", code, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var types []string
	for _, l := range lines {
		var ev struct {
			Type, Queue string
			JobID       string `json:"job_id"`
			JobType     string `json:"job_type"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		if ev.JobID != job.ID || ev.JobType != "demo.echo" || ev.Queue != "default" {
			t.Fatalf("event %+v, want of %s (demo.echo, default)", ev, job.ID)
		}
		types = append(types, ev.Type)
	}
	if strings.Join(types, ",") != "job.submitted,job.started,job.succeeded" {
		t.Fatalf("tail printed %v", types)
	}
	out, _, code = e.jetflow("tail", "--since", "10m", "--count", "1")
	if code != exitOK || !strings.Contains(out, job.ID) || !strings.Contains(out, "default/demo.echo") || !strings.Contains(out, "job.submitted") {
		t.Fatalf("tail as text: %d %q", code, out)
	}
	for _, bad := range [][]string{{"tail", "--count", "-1"}, {"tail", "--since", "0s"}, {"tail", "--queue", ""}, {"tail", "--queue", "a b", "--count", "1"}, {"tail", "x"}} {
		if _, errs, code := e.jetflow(bad...); code != exitUsage {
			t.Fatalf("%v: %d %s", bad, code, errs)
		}
	}
}
