package jetflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Wait answers at once for a job the log has ended while its record is
// still queued (an in-process claim writes its record late, and the
// outcome's record could not be written): it does not wait for the record
// to be repaired.
func TestWaitEndedInTheLogRecordBehind(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	job, err := cl.Submit(ctx, "behind", nil)
	if err != nil {
		t.Fatal(err)
	}
	st := testkit.StoreOf(t, cl)
	sub, err := st.Record(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The jobs bucket takes no more records: the claim's and the
	// outcome's events land, their records do not.
	kvs, err := st.JS.Stream(ctx, "KV_"+streams.JobsBucket)
	if err != nil {
		t.Fatal(err)
	}
	cfg := kvs.CachedInfo().Config
	tiny := cfg
	tiny.MaxMsgSize = 64
	if _, err := st.JS.UpdateStream(ctx, tiny); err != nil {
		t.Fatal(err)
	}
	defer st.JS.UpdateStream(context.WithoutCancel(ctx), cfg)
	_, started, _ := st.Apply(ctx, "claim", sub, func(j *domain.Job) (*domain.Event, error) {
		return commands.Start(j, "w1", 1, time.Now().UTC())
	})
	if started == nil {
		t.Fatal("the claim was not appended")
	}
	running, err := projections.Fold(sub.Job, started)
	if err != nil {
		t.Fatal(err)
	}
	_, ended, _ := st.Apply(ctx, "complete", engine.Snapshot{Job: running, Rev: sub.Rev}, func(j *domain.Job) (*domain.Event, error) {
		return commands.Outcome{Kind: commands.Succeeded}.Decide(j, "w1", time.Now().UTC(), commands.Jitter())
	})
	if ended == nil || ended.Type != domain.EvSucceeded {
		t.Fatalf("the outcome was not appended: %+v", ended)
	}
	if rec, _ := st.Record(ctx, job.ID); rec.Job.State != domain.StateQueued {
		t.Fatalf("record %s, want queued (not written)", rec.Job.State)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	done, err := cl.Wait(wctx, job.ID)
	if err != nil || done.State != jetflow.Succeeded {
		t.Fatalf("wait: %v %+v", err, done)
	}
}
