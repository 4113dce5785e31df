package jetflow_test

import (
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// A dry run of a purge lists every job the purge then purges, beyond the
// purge's first page (engine.DefaultPurgeMax), and writes nothing.
func TestPurgeDryRunCountsEveryPage(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000 + 37 // engine.DefaultPurgeMax, and a second page
	reqs := make([]*jetflow.SubmitRequest, n)
	for i := range reqs {
		if reqs[i], err = jetflow.NewRequest("purge.park", i); err != nil {
			t.Fatal(err)
		}
	}
	jobs, errs := cl.SubmitMany(ctx, reqs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	for _, j := range jobs {
		if _, err := cl.Cancel(ctx, j.ID, ""); err != nil {
			t.Fatal(err)
		}
	}
	live, err := cl.Submit(ctx, "purge.park", "live")
	if err != nil {
		t.Fatal(err)
	}
	events := func() uint64 {
		info, err := testkit.StoreOf(t, cl).Events.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	before := events()
	opts := jetflow.PurgeOptions{OlderThan: time.Millisecond, DryRun: true}
	var ids []string
	testkit.WaitFor(t, 10*time.Second, func() error { // every job older than 1ms
		var purged int
		var err error
		ids, purged, err = cl.Purge(ctx, opts)
		if err != nil || len(ids) != n || purged != 0 {
			return testkit.Errorf("dry run: %d ids, %d purged, %v; want %d, 0", len(ids), purged, err, n)
		}
		return nil
	})
	if after := events(); after != before {
		t.Fatalf("the dry run wrote %d events", after-before)
	}
	if got, err := cl.List(ctx, jetflow.ListFilter{}); err != nil || len(got) != n+1 {
		t.Fatalf("after the dry run: %d jobs, %v", len(got), err)
	}
	opts.DryRun = false
	purgedIDs, purged, err := cl.Purge(ctx, opts)
	if err != nil || purged != n || len(purgedIDs) != n {
		t.Fatalf("purge: %d ids, %d purged, %v", len(purgedIDs), purged, err)
	}
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	for _, id := range purgedIDs {
		if !seen[id] {
			t.Fatalf("purged %s, which the dry run did not list", id)
		}
	}
	if got, err := cl.List(ctx, jetflow.ListFilter{}); err != nil || len(got) != 1 || got[0].ID != live.ID {
		t.Fatalf("after the purge: %d jobs, %v", len(got), err)
	}
}
