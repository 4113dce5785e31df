package engine_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// warnings is a slog handler that keeps the records at Warn and above
// (and passes everything to next).
type warnings struct {
	next slog.Handler
	mu   *sync.Mutex
	got  *[]string
}

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return w.next.Enabled(ctx, l) || l >= slog.LevelWarn
}
func (w warnings) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		line := r.Message
		r.Attrs(func(a slog.Attr) bool { line += " " + a.String(); return true })
		w.mu.Lock()
		*w.got = append(*w.got, line)
		w.mu.Unlock()
	}
	return w.next.Handle(ctx, r)
}
func (w warnings) WithAttrs(as []slog.Attr) slog.Handler {
	return warnings{next: w.next.WithAttrs(as), mu: w.mu, got: w.got}
}
func (w warnings) WithGroup(n string) slog.Handler {
	return warnings{next: w.next.WithGroup(n), mu: w.mu, got: w.got}
}

// A clean first start, jobs in new queues and a queue that gets limits
// log no warning: the admitter's first session, and the queue records its
// first jobs make, are not "admission restarts" (issue 25).
func TestCleanStartLogsNoWarning(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []string
	log := slog.New(warnings{next: testkit.Logger(t).Handler(), mu: &mu, got: &got})
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "client")
	eng := engine.NewEngine(testkit.Store(t, testkit.Conn(t, srv), "engine"),
		engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Log: log})
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	testkit.WaitFor(t, 10*time.Second, func() error {
		if !eng.Leader.Leading() {
			return fmt.Errorf("not leading yet")
		}
		return nil
	})
	var ids []string
	for _, q := range []string{"default", "fresh", "other"} {
		res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "sl.job", Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Job.ID)
	}
	if _, err := st.SetQueuePaused(ctx, "fresh", true); err != nil {
		t.Fatal(err)
	}
	// A queue with limits: its job waits for admission, which admits it.
	if _, err := st.SetQueueLimits(ctx, "limited", domain.QueueLimits{MaxRunning: 1}); err != nil {
		t.Fatal(err)
	}
	res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "sl.job", Queue: "limited"})
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 15*time.Second, func() error {
		snap, err := st.Record(ctx, res.Job.ID)
		if err != nil || snap.Job.State != domain.StateQueued {
			return fmt.Errorf("limited job %v %v", snap.Job, err)
		}
		return nil
	})
	for _, id := range ids {
		if snap, err := st.Record(ctx, id); err != nil || snap.Job.State != domain.StateQueued {
			t.Fatalf("job %s: %v %v", id, snap.Job, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) > 0 {
		t.Fatalf("warnings on a clean start:\n%s", strings.Join(got, "\n"))
	}
}
