package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

func TestSmokeSubmitRunSucceed(t *testing.T) {
	s := testkit.Server(t)
	nc := testkit.Conn(t, s)
	st := testkit.Store(t, nc, "test")
	ctx := testkit.Ctx(t)

	rt, err := engine.NewRuntime(st, engine.RuntimeConfig{WorkerID: "w1", Log: testkit.Logger(t), Handlers: map[string]engine.Handler{
		"echo": func(ctx context.Context, task *engine.Task) ([]byte, error) { return task.Job.Spec.Payload, nil },
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rt.Stop(ctx)
	p := maintenance.NewPromoter(engine.Internal(st), maintenance.PromoterConfig{Log: testkit.Logger(t)})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(ctx)

	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "echo", Payload: []byte(`{"a": 1}`)})
	if err != nil {
		t.Fatal(err)
	}
	d := commands.Duration(time.Second)
	sub2, err := st.Submit(ctx, &commands.SubmitRequest{Type: "echo", Payload: []byte(`2`), Delay: &d})
	if err != nil {
		t.Fatal(err)
	}
	if sub2.Job.State != domain.StateScheduled {
		t.Fatalf("delayed job is %s", sub2.Job.State)
	}
	for _, id := range []string{sub.Job.ID, sub2.Job.ID} {
		testkit.WaitFor(t, 10*time.Second, func() error {
			snap, err := st.Record(ctx, id)
			if err != nil {
				return err
			}
			if snap.Job.State != domain.StateSucceeded {
				return testkit.Errorf("job %s is %s", id, snap.Job.State)
			}
			return nil
		})
	}
	snap, _ := st.Record(ctx, sub.Job.ID)
	if string(snap.Job.Result) != `{"a":1}` || snap.Job.Attempt != 1 || snap.Job.Events != 3 {
		t.Fatalf("job: result %s attempt %d events %d", snap.Job.Result, snap.Job.Attempt, snap.Job.Events)
	}
	snap2, _ := st.Record(ctx, sub2.Job.ID)
	if snap2.Job.Events != 4 || snap2.Job.StartedAt.Before(sub2.Job.RunAt) {
		t.Fatalf("delayed job: events %d started %s run_at %s", snap2.Job.Events, snap2.Job.StartedAt, sub2.Job.RunAt)
	}
}
