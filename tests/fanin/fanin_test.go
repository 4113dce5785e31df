// Package fanin tests fan-in across processes: a batch worker killed with
// SIGKILL in the middle of a fan-out, and the parent still completes once.
package fanin

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/testkit"
)

var binary string

func TestMain(m *testing.M) {
	testkit.MainWithJetflow(m, &binary)
}

func TestKilledBatchWorkerParentCompletesOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	addr := testkit.FreeAddr(t)
	url := "nats://" + addr
	serve := testkit.StartProc(t, "serve", nil, binary, "serve", "--data", t.TempDir(), "--nats-listen", addr,
		"--http", "off", "--projector-lag", "300ms")
	serve.WaitOutput(t, 30*time.Second, "jetflow is running")
	ctx := testkit.Ctx(t)
	client := testkit.Connect(t, url)

	victim := testkit.StartProc(t, "worker A", nil, binary, "worker", "--nats", url, "--lease", "1s", "--concurrency", "8", "--id", "A")
	const batches = 2000
	job, err := client.Submit(ctx, "demo.fanout", map[string]int{"batches": batches, "batch_ms": 50})
	if err != nil {
		t.Fatal(err)
	}
	// Kill worker A once a fifth of the batches are done, with some in hand
	// (A alone needs about 12 s for all of them: 8 at a time, 50 ms each).
	testkit.WaitFor(t, 30*time.Second, func() error {
		j, err := client.Get(ctx, job.ID)
		if err != nil {
			return err
		}
		if j.Fanout == nil || j.Fanout.Finished < batches/5 {
			return fmt.Errorf("not far enough: %+v", j.Fanout)
		}
		return nil
	})
	victim.Kill(t)
	mid, err := client.Get(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if mid.State != jetflow.Waiting {
		t.Fatalf("after the kill the parent is %s", mid.State)
	}
	testkit.StartProc(t, "worker B", nil, binary, "worker", "--nats", url, "--lease", "1s", "--concurrency", "8", "--id", "B")
	done := testkit.WaitTerminal(t, client, job.ID, 2*time.Minute)
	if done.State != jetflow.Succeeded || done.Fanout.Succeeded != batches || done.Fanout.Failed != 0 {
		t.Fatalf("parent %s, fanout %+v", done.State, done.Fanout)
	}
	var sum struct{ Total, Succeeded int }
	if err := json.Unmarshal(done.Result, &sum); err != nil || sum.Total != batches || sum.Succeeded != batches {
		t.Fatalf("summary %s", done.Result)
	}
	events, err := client.Events(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	ends := 0
	for _, e := range events {
		if e.To.Terminal() {
			ends++
		}
	}
	if ends != 1 {
		t.Fatalf("the parent ended %d times", ends)
	}
	// The counts the parent shows are what its piece events say.
	counted, err := engine.CountPieces(ctx, testkit.StoreOf(t, client).NC, job.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	if counted.Succeeded != batches || counted.Failed != 0 {
		t.Fatalf("recounted %+v", counted)
	}
	rep, err := engine.Verify(ctx, testkit.StoreOf(t, client).JS, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diffs) != 0 {
		t.Fatalf("replay --verify: %+v", rep.Diffs)
	}
}
