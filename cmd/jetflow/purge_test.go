package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestCLIPurge(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("submit", "demo.echo", `{"n":1}`, "--wait", "--json")
	var job struct{ ID string }
	if code != exitOK || json.Unmarshal([]byte(out), &job) != nil {
		t.Fatalf("submit: %d %s", code, errs)
	}
	done := job.ID
	out, _, _ = e.jetflow("submit", "demo.sleep", `{"seconds":30}`)
	live := strings.Fields(out)[0]
	for _, bad := range [][]string{{"purge"}, {"purge", "--older-than", "-1h"}, {"purge", "--older-than", "1h", "--namespace", "a b"}} {
		if _, errs, code := e.jetflow(bad...); code != exitUsage || !strings.Contains(errs, "--") {
			t.Fatalf("%v: %d %s", bad, code, errs)
		}
	}
	time.Sleep(20 * time.Millisecond) // --older-than is a real age: let the finished job get older than it
	out, errs, code = e.jetflow("purge", "--older-than", "10ms", "--dry-run")
	if code != exitOK || !strings.Contains(out, done) || strings.Contains(out, live) || !strings.Contains(out, "nothing written") {
		t.Fatalf("dry run: %d %q %s", code, out, errs)
	}
	if _, _, code := e.jetflow("get", done); code != exitOK {
		t.Fatal("a dry run purged")
	}
	out, errs, code = e.jetflow("purge", "--older-than", "10ms")
	if code != exitOK || !strings.Contains(out, "purged 1 jobs") {
		t.Fatalf("purge: %d %q %s", code, out, errs)
	}
	if _, errs, code := e.jetflow("get", done); code == exitOK || !strings.Contains(errs, "purged") {
		t.Fatalf("get of a purged job: %d %s", code, errs)
	}
	if _, _, code := e.jetflow("get", live); code != exitOK {
		t.Fatal("the live job was purged")
	}
}
