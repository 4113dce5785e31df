package process

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// The CLI killed in a unique submit, after the job's first event (its
// record and the key's claim not written) or after its record and work
// item (the claim not written): the next submit of the key gets that job,
// claims the key for it, and once it is cancelled the key takes a new job;
// replay --verify is clean.
func TestUniqueSubmitCrashPoints(t *testing.T) {
	for _, point := range []string{"submit:appended", "submit:dispatched"} {
		t.Run(strings.ReplaceAll(point, ":", "-"), func(t *testing.T) {
			s := startSystem(t)
			const key = "report-2026-11"
			if _, sig, out := s.cli([]string{"JETFLOW_CRASH_AT=" + point}, "submit", "nobody.runs.this", "--unique-key", key); sig != syscall.SIGKILL {
				t.Fatalf("submit was not killed at %s:\n%s", point, out)
			}
			id := domain.UniqueID(domain.DefaultNS, key, 0)
			submit := func() jetflow.JobInfo {
				t.Helper()
				code, _, out := s.cli(nil, "submit", "nobody.runs.this", "--unique-key", key, "--json")
				var j jetflow.JobInfo
				if err := json.Unmarshal([]byte(out), &j); code != 0 || err != nil {
					t.Fatalf("submit exited %d: %s", code, out)
				}
				return j
			}
			for range 2 {
				if j := submit(); j.ID != id || j.State != jetflow.Queued || j.Unique == nil || j.Unique.Key != key {
					t.Fatalf("after the crash: %+v, want the crashed submit's job %s", j, id)
				}
			}
			if _, err := s.client.Cancel(testkit.Ctx(t), id, "test"); err != nil {
				t.Fatal(err)
			}
			if next := submit(); next.ID == id || next.State != jetflow.Queued {
				t.Fatalf("after the cancel: %+v", next)
			}
			s.wantEvents(id, domain.EvSubmitted, domain.EvDuplicate, domain.EvDuplicate, domain.EvCancelled)
			s.verify()
			if _, _, out := s.cli(nil, "replay", "--verify"); !strings.Contains(out, "2 unique jobs checked against the jobs of their key before them") {
				t.Fatalf("replay --verify:\n%s", out)
			}
		})
	}
}
