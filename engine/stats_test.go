package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// statsTotals sums a series' counts.
type statsTotals struct{ Submitted, Started, Succeeded, Failed, Cancelled, Retried, Depth, Latencies int }

func totalsOf(s *projections.StatsSeries) statsTotals {
	var t statsTotals
	for i := range s.Time {
		t.Submitted += s.Submitted[i]
		t.Started += s.Started[i]
		t.Succeeded += s.Succeeded[i]
		t.Failed += s.Failed[i]
		t.Cancelled += s.Cancelled[i]
		t.Retried += s.Retried[i]
		if s.LatencyAvg[i] != nil {
			t.Latencies++
		}
	}
	t.Depth = s.Depth[len(s.Depth)-1]
	return t
}

// waitStatsFolded waits until h's StatsKeeper has folded the log to its
// end.
func waitStatsFolded(t *testing.T, h *harness) {
	t.Helper()
	testkit.WaitFor(t, 20*time.Second, func() error {
		info, err := h.st.Events.Info(h.ctx)
		if err != nil {
			return err
		}
		if got := h.eng.Stats.Folded(); got < info.State.LastSeq {
			return fmt.Errorf("statistics folded up to %d of %d", got, info.State.LastSeq)
		}
		return nil
	})
}

// TestStatsFoldedFromTheLog: the StatsKeeper (leader) folds the log into
// per-minute, ten-minute and hour slots per namespace and queue; the
// series count every event once: after a restart from its checkpoint,
// after its checkpoint is lost (slots counted already are not counted
// again), and rebuilt from the log alone when its buckets are gone.
func TestStatsFoldedFromTheLog(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Queue: "st", Handlers: map[string]engine.Handler{
		"st.ok": func(context.Context, *engine.Task) ([]byte, error) { return []byte(`1`), nil },
		"st.bad": func(context.Context, *engine.Task) ([]byte, error) {
			return nil, &engine.PermanentError{Err: errors.New("no")}
		},
	}})
	var ids []string
	for i := 0; i < 12; i++ {
		typ, ns := "st.ok", "default"
		if i%4 == 0 {
			typ = "st.bad"
		}
		if i%3 == 0 {
			ns = "other"
		}
		ids = append(ids, h.submit(commands.SubmitRequest{Type: typ, Queue: "st", Namespace: ns}).Job.ID)
	}
	waiting := h.submit(commands.SubmitRequest{Type: "st.none", Queue: "idle"})
	cancelled := h.submit(commands.SubmitRequest{Type: "st.none", Queue: "idle"})
	if _, err := h.st.Cancel(h.ctx, cancelled.Job.ID, "test"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		h.waitTerminal(id)
	}
	settle := func() { t.Helper(); waitStatsFolded(t, h) }
	settle()
	want := map[projections.StatsDim]statsTotals{
		{}:                                    {Submitted: 14, Started: 12, Succeeded: 9, Failed: 3, Cancelled: 1, Depth: 1, Latencies: 1},
		{Queue: "st"}:                         {Submitted: 12, Started: 12, Succeeded: 9, Failed: 3, Latencies: 1},
		{Queue: "idle"}:                       {Submitted: 2, Cancelled: 1, Depth: 1},
		{Namespace: "other"}:                  {Submitted: 4, Started: 4, Succeeded: 3, Failed: 1, Latencies: 1},
		{Namespace: "other", Queue: "st"}:     {Submitted: 4, Started: 4, Succeeded: 3, Failed: 1, Latencies: 1},
		{Namespace: "default", Queue: "st"}:   {Submitted: 8, Started: 8, Succeeded: 6, Failed: 2, Latencies: 1},
		{Namespace: "nobody"}:                 {},
		{Namespace: "other", Queue: "idle"}:   {},
		{Namespace: "default", Queue: "idle"}: {Submitted: 2, Cancelled: 1, Depth: 1},
		{Namespace: "default"}:                {Submitted: 10, Started: 8, Succeeded: 6, Failed: 2, Cancelled: 1, Depth: 1, Latencies: 1},
	}
	check := func(when string) {
		t.Helper()
		for d, w := range want {
			for _, rng := range []string{"hour", "day", "week"} {
				s, err := h.st.StatsSeries(h.ctx, rng, d, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				got := totalsOf(s)
				if w.Latencies > 0 && got.Latencies > 0 {
					got.Latencies = w.Latencies // the jobs started in one or two slots
				}
				if got != w {
					t.Errorf("%s: %s %+v: %+v, want %+v", when, rng, d, got, w)
				}
			}
		}
		// The oldest wait of the idle queue is the waiting job's.
		s, err := h.st.StatsSeries(h.ctx, "hour", projections.StatsDim{Queue: "idle"}, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		last := s.OldestWait[len(s.OldestWait)-1]
		if age := time.Since(waiting.Job.CreatedAt).Seconds(); last == nil || *last > age+1 || *last < 0 {
			t.Errorf("%s: oldest wait %v, job waiting %.1fs", when, last, age)
		}
		if s.AsOf == nil {
			t.Errorf("%s: no as_of", when)
		}
	}
	check("live")
	if t.Failed() {
		t.FailNow()
	}

	restart := func() {
		h.eng.Stats.Stop(h.ctx)
		if err := h.eng.Stats.Start(h.ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A restart resumes from the checkpoint.
	restart()
	more := h.submit(commands.SubmitRequest{Type: "st.ok", Queue: "st"})
	h.waitTerminal(more.Job.ID)
	settle()
	for _, d := range []projections.StatsDim{{}, {Queue: "st"}, {Namespace: "default", Queue: "st"}, {Namespace: "default"}} {
		w := want[d]
		w.Submitted, w.Started, w.Succeeded = w.Submitted+1, w.Started+1, w.Succeeded+1
		want[d] = w
	}
	check("resumed")

	// The checkpoint lost: the log is folded again from its start into
	// slots that already count it; nothing is counted twice.
	hourKV, err := h.st.JS.KeyValue(h.ctx, streams.StatsBucket("1h"))
	if err != nil {
		t.Fatal(err)
	}
	h.eng.Stats.Stop(h.ctx)
	if err := hourKV.Purge(h.ctx, streams.StatsCursorKey); err != nil {
		t.Fatal(err)
	}
	if err := h.eng.Stats.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	settle()
	check("checkpoint lost")

	// Every bucket gone: rebuilt from the log alone.
	h.eng.Stats.Stop(h.ctx)
	for _, res := range []string{"1m", "10m", "1h"} {
		if err := h.st.JS.DeleteKeyValue(h.ctx, streams.StatsBucket(res)); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.eng.Stats.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	settle()
	check("rebuilt")
	if _, err := h.st.StatsSeries(h.ctx, "month", projections.StatsDim{}, time.Now()); !errors.Is(err, commands.ErrInvalidInput) {
		t.Fatalf("range month: %v", err)
	}
}

func (h *harness) waitTerminal(id string) *domain.Job {
	h.t.Helper()
	var j *domain.Job
	testkit.WaitFor(h.t, 15*time.Second, func() error {
		j = h.get(id)
		if !j.State.Terminal() {
			return fmt.Errorf("job %s %s", id, j.State)
		}
		return nil
	})
	return j
}

// TestStatsKeeperKeepsOneConsumer: the StatsKeeper reads the log through
// one server consumer for as long as its session lasts, not a new one for
// every read (an ordered consumer's Fetch makes one each time: dozens a
// second under load, each counting the log's pending messages), and
// deletes it when it stops.
func TestStatsKeeperKeepsOneConsumer(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	statsConsumers := func() ([]string, error) {
		var names []string
		lister := h.st.Events.ConsumerNames(h.ctx)
		for name := range lister.Name() {
			if strings.HasPrefix(name, streams.StatsConsumerPrefix) {
				names = append(names, name)
			}
		}
		return names, lister.Err()
	}
	var first string
	testkit.WaitFor(t, 10*time.Second, func() error {
		names, err := statsConsumers()
		if err != nil || len(names) != 1 {
			return fmt.Errorf("statistics consumers %v: %v", names, err)
		}
		first = names[0]
		return nil
	})
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Queue: "one", Handlers: map[string]engine.Handler{
		"one.ok": func(context.Context, *engine.Task) ([]byte, error) { return nil, nil },
	}})
	round := func() {
		t.Helper()
		for i := 0; i < 20; i++ {
			h.waitTerminal(h.submit(commands.SubmitRequest{Type: "one.ok", Queue: "one"}).Job.ID)
		}
		waitStatsFolded(t, h)
	}
	// Three rounds of events, each folded (at least one flush, one read, apart).
	for range 3 {
		round()
	}
	names, err := statsConsumers()
	if err != nil || len(names) != 1 || names[0] != first {
		t.Fatalf("statistics consumers after three rounds: %v (%v), want only %s", names, err, first)
	}
	// The server loses it (as a restart loses a memory consumer): another
	// is made, and the events after are folded, each once.
	if err := h.st.Events.DeleteConsumer(h.ctx, first); err != nil {
		t.Fatal(err)
	}
	round()
	names, err = statsConsumers()
	if err != nil || len(names) != 1 || names[0] == first {
		t.Fatalf("statistics consumers after the first was lost: %v (%v)", names, err)
	}
	testkit.WaitFor(t, 10*time.Second, func() error { // written at the next flush
		s, err := h.st.StatsSeries(h.ctx, "hour", projections.StatsDim{Queue: "one"}, time.Now())
		if err != nil {
			return err
		}
		if got := totalsOf(s); got.Submitted != 80 || got.Succeeded != 80 || got.Started != 80 {
			return fmt.Errorf("totals of the queue after four rounds: %+v, want 80 submitted, started and succeeded", got)
		}
		return nil
	})
	h.eng.Stop(context.Background())
	testkit.WaitFor(t, 10*time.Second, func() error {
		if names, err := statsConsumers(); err != nil || len(names) != 0 {
			return fmt.Errorf("statistics consumers after the engine stopped: %v (%v)", names, err)
		}
		return nil
	})
}
