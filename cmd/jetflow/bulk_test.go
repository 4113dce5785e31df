package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/testkit"
)

// TestCLIBulk: bulk retry and cancel select as ls does, say how many, need
// --yes without a terminal, change each job once, skip what does not apply,
// and a second retry of the same failures runs none twice.
func TestCLIBulk(t *testing.T) {
	e := newCLIEnv(t)
	var failed []string
	for range 3 {
		out, errs, code := e.jetflow("submit", "demo.fail", `{"times":5}`, "--max-retries", "0", "--wait", "--json")
		var job struct{ ID, State string }
		if code != exitFailed || json.Unmarshal([]byte(out), &job) != nil || job.State != "failed" {
			t.Fatalf("submit: %d %q %s", code, out, errs)
		}
		failed = append(failed, job.ID)
	}
	if _, errs, code := e.jetflow("submit", "demo.echo", `{}`, "--wait"); code != exitOK {
		t.Fatalf("submit echo: %d %s", code, errs)
	}
	for _, bad := range [][]string{{"bulk"}, {"bulk", "frob", "--state", "failed"}, {"bulk", "retry", "--state", ""},
		{"bulk", "retry", "--since", "-1h"}, {"bulk", "retry", "--reason", "x"}, {"bulk", "retry", "cancel"}} {
		if _, errs, code := e.jetflow(bad...); code != exitUsage {
			t.Fatalf("%v: %d %s", bad, code, errs)
		}
	}
	var res bulkResult
	out, errs, code := e.jetflow("bulk", "retry", "--state", "failed", "--type", "demo.fail", "--dry-run", "--json")
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Matched != 3 || res.Changed != 0 || !res.DryRun {
		t.Fatalf("dry run: %d %q %s", code, out, errs)
	}
	// Without a terminal to confirm on, --yes is needed; nothing changes.
	if _, errs, code := e.jetflow("bulk", "retry", "--state", "failed", "--type", "demo.fail"); code != exitUsage || !strings.Contains(errs, "--yes") {
		t.Fatalf("without --yes: %d %s", code, errs)
	}
	out, errs, code = e.jetflow("bulk", "retry", "--state", "failed", "--type", "demo.fail", "--yes", "--json")
	res = bulkResult{}
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Matched != 3 || res.Changed != 3 || res.Skipped != 0 || res.Failed != 0 {
		t.Fatalf("retry: %d %q %s", code, out, errs)
	}
	// Each failure has exactly one retry; they fail too (demo.fail 5 times).
	testkit.WaitFor(t, 30*time.Second, func() error {
		out, _, _ := e.jetflow("ls", "--state", "failed", "--type", "demo.fail", "--limit", "0", "--json")
		var l struct {
			Jobs []struct {
				ID      string
				RetryOf string `json:"retry_of"`
			}
		}
		if err := json.Unmarshal([]byte(out), &l); err != nil {
			return err
		}
		retries := map[string]int{}
		for _, j := range l.Jobs {
			if j.RetryOf != "" {
				retries[j.RetryOf]++
			}
		}
		for _, id := range failed {
			if retries[id] != 1 {
				return fmt.Errorf("%s has %d failed retries: %v", id, retries[id], l.Jobs)
			}
		}
		return nil
	})
	// Again: the originals were retried already (skipped); the retries run once.
	out, errs, code = e.jetflow("bulk", "retry", "--state", "failed", "--type", "demo.fail", "--yes", "--json")
	res = bulkResult{}
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Matched != 6 || res.Changed != 3 || res.Skipped != 3 {
		t.Fatalf("second retry: %d %q %s", code, out, errs)
	}
	// Cancel: the queued jobs of a queue no worker serves are cancelled;
	// a second time they are skipped.
	for range 2 {
		if _, errs, code := e.jetflow("submit", "demo.echo", `{}`, "--queue", "held"); code != exitOK {
			t.Fatalf("submit held: %d %s", code, errs)
		}
	}
	out, errs, code = e.jetflow("bulk", "cancel", "--queue", "held", "--reason", "bad deploy", "--yes")
	if code != exitOK || !strings.Contains(out, "cancel: 2 selected, 2 changed, 0 skipped, 0 failed") {
		t.Fatalf("cancel: %d %q %s", code, out, errs)
	}
	out, _, _ = e.jetflow("ls", "--queue", "held", "--state", "cancelled", "--json")
	var l struct{ Jobs []struct{ ID string } }
	if json.Unmarshal([]byte(out), &l) != nil || len(l.Jobs) != 2 {
		t.Fatalf("cancelled: %q", out)
	}
	out, _, _ = e.jetflow("events", l.Jobs[0].ID, "--json")
	if !strings.Contains(out, "bad deploy") {
		t.Fatalf("the cancel's reason is not in the events: %s", out)
	}
	out, errs, code = e.jetflow("bulk", "cancel", "--queue", "held", "--yes")
	if code != exitOK || !strings.Contains(out, "cancel: 2 selected, 0 changed, 2 skipped, 0 failed") {
		t.Fatalf("cancel again: %d %q %s", code, out, errs)
	}

	// Purge: the cancelled jobs of queue held and a queued one (skipped:
	// not finished); their records are gone, their events stay.
	if _, errs, code := e.jetflow("submit", "demo.echo", `{}`, "--queue", "held"); code != exitOK {
		t.Fatalf("submit held: %d %s", code, errs)
	}
	out, errs, code = e.jetflow("bulk", "purge", "--queue", "held", "--reason", "test data", "--yes")
	if code != exitOK || !strings.Contains(out, "purge: 3 selected, 2 changed, 1 skipped, 0 failed") {
		t.Fatalf("purge: %d %q %s", code, out, errs)
	}
	for _, j := range l.Jobs {
		// The answer is the job.purged event's: when, and why.
		if _, errs, code := e.jetflow("get", j.ID); code == exitOK || !strings.Contains(errs, "purged at") || !strings.Contains(errs, "(test data)") {
			t.Fatalf("get of a purged job: %d %s", code, errs)
		}
	}
	out, _, _ = e.jetflow("ls", "--queue", "held", "--json")
	if json.Unmarshal([]byte(out), &l) != nil || len(l.Jobs) != 1 {
		t.Fatalf("left in held: %q", out)
	}
}
