package main

import (
	"encoding/json"
	"testing"

	"github.com/jetflow/jetflow/internal/testkit"
)

// bench --sync always runs every job through the group commit of the log
// and reports its writes and CPU per job, and the group commit's batches (a count, not a speed: throughput
// is never asserted in a test).
func TestBenchSyncAlwaysReportsWritesPerJob(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a bench")
	}
	var out, errb testkit.SyncBuffer
	if code := run([]string{"bench", "--sync", "always", "--jobs", "40", "--workers", "4", "--rate", "0", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, errb.String())
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	// A job is three events, three records and a work item at least.
	if res.Jobs != 40 || res.Storage != "file, sync always" || res.WritesPerJob < 7 || res.CPUMicrosPerJob <= 0 {
		t.Fatalf("bench result %+v", res)
	}
	// Every event of the 40 jobs went through the group commit (three at
	// least a job): in batches, alone, or again alone after a refused batch.
	if n := res.GroupBatched + res.GroupAlone + res.GroupResent; n < 3*40 || res.GroupBatches > res.GroupBatched || res.GroupResent < 0 {
		t.Fatalf("group commit: %d batches of %d appends, %d alone, %d resent", res.GroupBatches, res.GroupBatched, res.GroupAlone, res.GroupResent)
	}
}
