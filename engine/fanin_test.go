package engine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// waitingParent makes a parent that waits for total children, without a
// coordinator handler: its pieces are then published by the test.
func (h *harness) waitingParent(total int) engine.Snapshot {
	h.t.Helper()
	sub := h.submit(commands.SubmitRequest{Type: "coord.by.hand"})
	run, _, err := h.st.Apply(h.ctx, "claim", sub, func(j *domain.Job) (*domain.Event, error) {
		return commands.Start(j, "w", 1, time.Now())
	})
	if err != nil {
		h.t.Fatal(err)
	}
	waiting, _, err := h.st.Apply(h.ctx, "wait", run, func(j *domain.Job) (*domain.Event, error) {
		return commands.Wait(j, domain.FanoutPlan{Kind: domain.FanoutChildren, Total: total}, "w", time.Now().UTC())
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return waiting
}

// piece publishes what became of piece n of parent, as a child's writer
// does (msgID "" publishes a repeat the stream does not deduplicate).
func (h *harness) piece(parent string, n int, typ, msgID string) {
	h.t.Helper()
	data, err := streams.EncodeEvent(&domain.Event{Type: typ, JobID: parent, Piece: n, Time: time.Now().UTC()})
	if err != nil {
		h.t.Fatal(err)
	}
	var opts []jetstream.PublishOpt
	if msgID != "" {
		opts = append(opts, jetstream.WithMsgID(msgID))
	}
	if _, err := h.st.JS.PublishMsg(h.ctx, &nats.Msg{Subject: streams.PieceSubject(parent), Data: data}, opts...); err != nil {
		h.t.Fatal(err)
	}
}

// A parent the counter cannot read (a record without events) has piece
// events in the same fetch as a good parent's: the good parent is counted
// in full and completes; the bad one's deliveries are retried on their own.
func TestFanInCountsPastAParentItCannotRead(t *testing.T) {
	h := newHarness(t)
	h.eng.Leader.Stop(h.ctx) // no counter until every piece event is in
	good := h.waitingParent(3)
	bad := &domain.Job{ID: domain.NewID(), Spec: domain.Spec{Namespace: "default", Queue: "default", Type: "x"},
		State: domain.StateQueued}
	if _, err := (streams.Writer{JS: h.st.JS}).PutJobAsync(bad, 0).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.piece(good.Job.ID, 1, domain.PcSucceeded, "")
	h.piece(bad.ID, 1, domain.PcSucceeded, "")
	h.piece(good.Job.ID, 2, domain.PcSucceeded, "")
	h.piece(bad.ID, 2, domain.PcSucceeded, "")
	h.piece(good.Job.ID, 2, domain.PcFailed, "") // a repeat of piece 2: its first outcome stands
	h.piece(good.Job.ID, 3, domain.PcSucceeded, "")
	counter := maintenance.NewFanIn(engine.Internal(testkit.Store(t, testkit.Conn(t, h.srv), "counter")), maintenance.FanInConfig{Log: testkit.Logger(t)})
	if err := counter.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	defer counter.Stop(context.Background())
	j := h.waitState(good.Job.ID, domain.StateSucceeded, 15*time.Second)
	if c := j.Fanout.Counts; c.Succeeded != 3 || c.Failed != 0 {
		t.Fatalf("counts %+v", c)
	}
	h.wantEvents(good.Job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvWaiting, domain.EvSucceeded)
}

// Two counters at once (a leader's term overlapping the next one's) share
// the consumer's deliveries between them; each counts from the log, so the
// counts it writes never go backwards and the parent completes once, even
// with children finishing one at a time.
func TestFanInTwoCountersChildrenOneAtATime(t *testing.T) {
	h := newHarness(t)
	other := maintenance.NewFanIn(engine.Internal(testkit.Store(t, testkit.Conn(t, h.srv), "second-counter")), maintenance.FanInConfig{Log: testkit.Logger(t)})
	if err := other.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	defer other.Stop(context.Background())
	const n = 8
	gates := make([]chan struct{}, n)
	for i := range gates {
		gates[i] = make(chan struct{})
	}
	h.runtime(engine.RuntimeConfig{WorkerID: "kids", Concurrency: n, Handlers: map[string]engine.Handler{
		"kid": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			<-gates[task.Job.Spec.Piece-1]
			return nil, nil
		}}})
	h.runtime(engine.RuntimeConfig{WorkerID: "c", Handlers: map[string]engine.Handler{
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(n, "kid", func(int) string { return "null" })}
		}}})
	sub := h.submit(commands.SubmitRequest{Type: "coord"})
	h.waitState(sub.Job.ID, domain.StateWaiting, 10*time.Second)
	for i := range gates {
		close(gates[i])
		h.waitState(engine.ChildID("default", sub.Job.ID, i+1), domain.StateSucceeded, 10*time.Second)
		if i < n-1 {
			// Wait until a counter has written this child's count, so the
			// next one arrives in a later fetch.
			testkit.WaitFor(t, 10*time.Second, func() error {
				if j := h.get(sub.Job.ID); j.Fanout.Counts.Succeeded < i+1 {
					return fmt.Errorf("parent counts %d of %d", j.Fanout.Counts.Succeeded, i+1)
				}
				return nil
			})
		}
	}
	j := h.waitState(sub.Job.ID, domain.StateSucceeded, 15*time.Second)
	if j.Fanout.Counts.Succeeded != n {
		t.Fatalf("counts %+v", j.Fanout.Counts)
	}
	var last domain.FanoutCounts
	ends := 0
	for _, e := range h.events(sub.Job.ID) {
		if e.Counts != nil {
			if e.Counts.UpTo <= last.UpTo || e.Counts.Succeeded < last.Succeeded {
				t.Fatalf("counts went backwards: %+v after %+v", *e.Counts, last)
			}
			last = *e.Counts
		}
		if e.To.Terminal() {
			ends++
		}
	}
	if ends != 1 {
		t.Fatalf("parent ended %d times", ends)
	}
	h.verify()
}

// Every piece finished before the coordinator recorded that it waits, and
// the coordinator died right after appending job.waiting (no record, no
// piece.planned): the projector repairs both, and the counter, which had
// counted the pieces already, completes the parent.
func TestFanInPlanAfterAllPieces(t *testing.T) {
	h := newHarness(t)
	sub := h.submit(commands.SubmitRequest{Type: "coord.by.hand"})
	run, _, err := h.st.Apply(h.ctx, "claim", sub, func(j *domain.Job) (*domain.Event, error) {
		return commands.Start(j, "w", 1, time.Now())
	})
	if err != nil {
		t.Fatal(err)
	}
	h.piece(sub.Job.ID, 1, domain.PcSucceeded, "")
	h.piece(sub.Job.ID, 2, domain.PcSucceeded, "")
	// The counter has seen them (and could not complete a running parent).
	testkit.WaitFor(t, 10*time.Second, func() error {
		info, err := h.consumerInfo(streams.EventsStream, maintenance.FanInConsumer)
		if err != nil {
			return err
		}
		if info.NumPending != 0 || info.NumAckPending != 0 {
			return fmt.Errorf("fan-in consumer: %d pending, %d unacked", info.NumPending, info.NumAckPending)
		}
		return nil
	})
	ev, err := commands.Wait(run.Job, domain.FanoutPlan{Kind: domain.FanoutChildren, Total: 2}, "w", time.Now().UTC())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.JobSubject(run.Job), ev, run.Job.Seq).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	j := h.waitState(sub.Job.ID, domain.StateSucceeded, 15*time.Second)
	if j.Fanout.Counts.Succeeded != 2 {
		t.Fatalf("counts %+v", j.Fanout.Counts)
	}
	h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvWaiting, domain.EvSucceeded)
	h.verify()
}

func (h *harness) consumerInfo(stream, name string) (*jetstream.ConsumerInfo, error) {
	c, err := h.st.JS.Consumer(h.ctx, stream, name)
	if err != nil {
		return nil, err
	}
	return c.Info(h.ctx)
}
