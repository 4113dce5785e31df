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
	if code := run([]string{"bench", "--sync", "always", "--jobs", "200", "--workers", "4", "--rate", "0", "--json", "--cpu-split"}, &out, &errb); code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, errb.String())
	}
	var res benchResult
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	// A job is three events, two records (a quick handler's claim is
	// folded into its outcome's record: store.ClaimRecordAfter) and a work
	// item at least.
	if res.Jobs != 200 || res.Storage != "file, sync always" || res.WritesPerJob < 6 || res.CPUMicrosPerJob <= 0 {
		t.Fatalf("bench result %+v", res)
	}
	// The settle waits for the Projector, which reads the log 2 s behind
	// it: the drain's last event is checked 2 s after it was written.
	if res.SettleMs < 1500 || res.CPUSettleMicrosPerJob <= 0 {
		t.Fatalf("settle %.0f ms, %.1f µs CPU per job", res.SettleMs, res.CPUSettleMicrosPerJob)
	}
	// --cpu-split: the three parts add up to the CPU per job (a profile of a
	// short run may have no sample of one part, but not of all).
	sum := res.CPUServerMicrosPerJob + res.CPUEngineMicrosPerJob + res.CPURuntimeMicrosPerJob
	if sum <= 0 || sum < res.CPUMicrosPerJob*0.999 || sum > res.CPUMicrosPerJob*1.001 {
		t.Fatalf("cpu split %.1f + %.1f + %.1f, cpu per job %.1f", res.CPUServerMicrosPerJob, res.CPUEngineMicrosPerJob, res.CPURuntimeMicrosPerJob, res.CPUMicrosPerJob)
	}
	// Every event of the 200 jobs went through the group commit (three at
	// least a job): in batches, alone, or again alone after a refused batch.
	if n := res.GroupBatched + res.GroupAlone + res.GroupResent; n < 3*200 || res.GroupBatches > res.GroupBatched || res.GroupResent < 0 {
		t.Fatalf("group commit: %d batches of %d appends, %d alone, %d resent", res.GroupBatches, res.GroupBatched, res.GroupAlone, res.GroupResent)
	}
}

// bench --workflow wide runs the graph, then as many plain jobs of the same
// handler, and reports both, end to end, with their ratios (figures, not
// asserted speeds: only that each part ran and was counted).
func TestBenchWideWorkflowAgainstPlainJobs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a bench")
	}
	var out, errb testkit.SyncBuffer
	if code := run([]string{"bench", "--workflow", "wide", "--jobs", "200", "--layers", "4", "--workers", "8", "--json"}, &out, &errb); code != 0 {
		t.Fatalf("bench exited %d:\n%s", code, errb.String())
	}
	var res workflowBenchResult
	if err := json.Unmarshal([]byte(out.String()), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if res.State != "succeeded" || res.Steps != 200 || res.Layers != 4 || res.EndToEndStepsPerSec <= 0 || res.CPUSettledPerStepUs <= 0 {
		t.Fatalf("bench result %+v", res)
	}
	p, r := res.Plain, res.Ratio
	if p == nil || r == nil || p.Jobs != 200 || p.EndToEndPerSec <= 0 || p.DrainPerSec <= 0 || p.CPUSettledPerUs <= 0 {
		t.Fatalf("plain %+v, ratio %+v", p, r)
	}
	if r.EndToEnd != res.EndToEndStepsPerSec/p.EndToEndPerSec || r.CPU != res.CPUSettledPerStepUs/p.CPUSettledPerUs {
		t.Fatalf("ratio %+v of %+v and %+v", r, res, p)
	}
}
