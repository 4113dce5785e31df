package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/testkit"
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
	// --older-than is a real age: the finished job is listed once it is older.
	testkit.WaitFor(t, 5*time.Second, func() error {
		out, errs, code = e.jetflow("purge", "--older-than", "10ms", "--dry-run")
		if code != exitOK || !strings.Contains(out, done) || strings.Contains(out, live) || !strings.Contains(out, "nothing written") {
			return fmt.Errorf("dry run: %d %q %s", code, out, errs)
		}
		return nil
	})
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
