package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestCLISearch: jetflow ls narrows by a payload field, a tag and an id's
// beginning; an empty search flag is refused.
func TestCLISearch(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testkit.Ctx(t)
	var ids []string
	for i := range 4 {
		var opts []jetflow.SubmitOption
		if i%2 == 1 {
			opts = append(opts, jetflow.Tags("vip"))
		}
		j, err := e.cl.Submit(ctx, "search.park", map[string]any{"customer": map[string]any{"id": i}}, opts...)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	ls := func(args ...string) []string {
		t.Helper()
		out, errs, code := e.jetflow(append([]string{"ls", "--type", "search.park", "--json"}, args...)...)
		var list struct{ Jobs []jetflow.JobInfo }
		if code != exitOK || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("ls %q: exit %d %s %s", args, code, out, errs)
		}
		var got []string
		for _, j := range list.Jobs {
			got = append(got, j.ID)
		}
		return got
	}
	if got := ls("--payload", "customer.id=2"); strings.Join(got, ",") != ids[2] {
		t.Fatalf("--payload customer.id=2: %v, want %s", got, ids[2])
	}
	if got := ls("--tag", "vip"); strings.Join(got, ",") != ids[3]+","+ids[1] {
		t.Fatalf("--tag vip: %v, want %s,%s", got, ids[3], ids[1])
	}
	if got := ls("--tag", "vip", "--payload", "customer.id=1"); strings.Join(got, ",") != ids[1] {
		t.Fatalf("--tag vip --payload customer.id=1: %v, want %s", got, ids[1])
	}
	if got := ls("--id", ids[0]); strings.Join(got, ",") != ids[0] {
		t.Fatalf("--id %s: %v", ids[0], got)
	}
	if got := ls("--error-code", "TIMEOUT"); len(got) != 0 {
		t.Fatalf("--error-code TIMEOUT of queued jobs: %v", got)
	}
	if _, errs, code := e.jetflow("ls", "--tag", ""); code != exitUsage || !strings.Contains(errs, "--tag") {
		t.Fatalf("an empty --tag: exit %d %s", code, errs)
	}
}
