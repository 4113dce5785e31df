package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/streams"
)

// FanInConsumer is the durable consumer of piece events.
const FanInConsumer = "fanin"

// DefaultFanInFlush is how often a waiting parent's counts are written
// while its pieces finish.
const DefaultFanInFlush = 250 * time.Millisecond

// FanIn completes fan-out parents. It is a consumer of the piece events in
// the log, which say what became of each piece (a child job that ended, a
// batch that was run): it counts each piece number once, whatever the
// redeliveries, writes a parent's counts as job.fanin events a few times a
// second, and completes the parent (job.succeeded or job.failed, under its
// failure policy) once they decide it. Counts live in memory only as a
// cache: a parent seen for the first time (after a restart or a failover)
// is counted again from its piece events in the log, and the parent's
// completion is a revision-checked transition, so it happens once even if
// two counters overlapped.
//
// One FanIn runs at a time, under a Leader.
type FanIn struct {
	store *Store
	log   *slog.Logger
	flush time.Duration

	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	tallies map[string]*tally

	completed atomic.Int64
}

// tally is one parent's counts.
type tally struct {
	snap    Snapshot // the parent as last read or written
	plan    *streams.FanoutPlan
	seen    map[int]struct{}
	counts  streams.FanoutCounts
	errs    map[string]int
	upTo    uint64 // piece events up to here are counted
	dirty   bool
	flushed time.Time
	done    bool // the parent is terminal: nothing more to count
}

// NewFanIn returns a fan-in counter.
func NewFanIn(store *Store, log *slog.Logger) *FanIn {
	if log == nil {
		log = slog.Default()
	}
	return &FanIn{store: store, log: log.With("component", "fanin"), flush: DefaultFanInFlush, tallies: map[string]*tally{}}
}

// Completed is how many parents this counter completed.
func (f *FanIn) Completed() int64 { return f.completed.Load() }

// Start starts counting. Idempotent.
func (f *FanIn) Start(ctx context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancel != nil {
		return nil
	}
	cons, err := f.store.JS.CreateOrUpdateConsumer(ctx, streams.EventsStream, jetstream.ConsumerConfig{
		Durable:       FanInConsumer,
		Description:   "jetflow fan-in: counts pieces and completes their parents",
		FilterSubject: streams.PiecesPrefix + ".>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxAckPending: 20000,
		MaxDeliver:    -1,
	})
	if err != nil {
		return fmt.Errorf("fan-in consumer: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	f.tallies = map[string]*tally{} // a new term counts from the log again
	go f.loop(runCtx, cons)
	return nil
}

// Stop stops counting. Idempotent.
func (f *FanIn) Stop(ctx context.Context) {
	f.mu.Lock()
	cancel, done := f.cancel, f.done
	f.cancel = nil
	f.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (f *FanIn) loop(ctx context.Context, cons jetstream.Consumer) {
	defer close(f.done)
	for ctx.Err() == nil {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(f.flush))
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("fetch", "err", err)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		ok := true
		for _, m := range msgs {
			if err := f.count(ctx, m); err != nil {
				if ctx.Err() == nil {
					f.log.Warn("count piece; it will be redelivered", "subject", m.Subject(), "err", err)
				}
				ok = false
				break
			}
		}
		if !ok {
			for _, m := range msgs {
				_ = m.NakWithDelay(time.Second)
			}
			continue
		}
		f.settle(ctx)
		for _, m := range msgs {
			_ = m.Ack()
		}
	}
}

// count folds one piece event into its parent's tally.
func (f *FanIn) count(ctx context.Context, m jetstream.Msg) error {
	meta, err := m.Metadata()
	if err != nil {
		return nil
	}
	parent := strings.TrimPrefix(m.Subject(), streams.PiecesPrefix+".")
	t, err := f.tally(ctx, parent)
	if err != nil || t == nil {
		return err
	}
	if t.done || meta.Sequence.Stream <= t.upTo {
		return nil // counted already when the tally was built from the log
	}
	ev, err := streams.DecodeEvent(m.Data())
	if err != nil {
		f.log.Error("undecodable piece event", "subject", m.Subject(), "err", err)
		return nil
	}
	ev.Seq = meta.Sequence.Stream
	f.fold(t, ev)
	if ev.Type == streams.PcPlanned && t.plan == nil {
		// The parent began waiting after the tally was built: read its plan.
		snap, err := f.store.Load(ctx, parent)
		if err != nil {
			return err
		}
		t.snap = snap
		if snap.Job.Fanout != nil {
			p := snap.Job.Fanout.Plan
			t.plan = &p
		}
		t.done = snap.Job.State.Terminal()
	}
	return nil
}

func (f *FanIn) fold(t *tally, ev *streams.Event) {
	t.upTo = max(t.upTo, ev.Seq)
	if ev.Piece < 1 {
		return
	}
	if _, ok := t.seen[ev.Piece]; ok {
		return // a repeat: redelivered, or run again after a crash
	}
	switch ev.Type {
	case streams.PcSucceeded:
		t.counts.Succeeded++
	case streams.PcFailed:
		t.counts.Failed++
		msg := "failed"
		if ev.Error != nil {
			msg = ev.Error.Message
		}
		t.errs[msg]++
	case streams.PcCancelled:
		t.counts.Cancelled++
	default:
		return
	}
	t.seen[ev.Piece] = struct{}{}
	t.dirty = true
}

// tally returns the parent's tally, building it from the log on first
// sight. It returns nil for a parent that does not exist.
func (f *FanIn) tally(ctx context.Context, parent string) (*tally, error) {
	if t := f.tallies[parent]; t != nil {
		return t, nil
	}
	t := &tally{seen: map[int]struct{}{}, errs: map[string]int{}}
	snap, err := f.store.Load(ctx, parent)
	if errors.Is(err, commands.ErrNotFound) || errors.Is(err, commands.ErrInvalidInput) {
		t.done = true
		f.tallies[parent] = t
		return t, nil
	}
	if err != nil {
		return nil, err
	}
	t.snap = snap
	if snap.Job.Fanout != nil {
		p := snap.Job.Fanout.Plan
		t.plan = &p
	}
	if snap.Job.State.Terminal() {
		t.done = true
		f.tallies[parent] = t
		return t, nil
	}
	if err := f.replay(ctx, parent, t); err != nil {
		return nil, err
	}
	f.tallies[parent] = t
	return t, nil
}

// replay counts the parent's piece events already in the log.
func (f *FanIn) replay(ctx context.Context, parent string, t *tally) error {
	cons, err := f.store.JS.OrderedConsumer(ctx, streams.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{streams.PieceSubject(parent)},
	})
	if err != nil {
		return err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	if info.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2000))
	if err != nil {
		return err
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	for {
		m, err := it.Next()
		if err != nil {
			return fmt.Errorf("replay pieces of %s: %w", parent, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		if ev, err := streams.DecodeEvent(m.Data()); err == nil {
			ev.Seq = meta.Sequence.Stream
			f.fold(t, ev)
		}
		if meta.NumPending == 0 {
			return nil
		}
	}
}

// settle completes the parents whose counts decide them, and writes the
// counts of the others at most every flush interval.
func (f *FanIn) settle(ctx context.Context) {
	for id, t := range f.tallies {
		if t.done {
			if len(f.tallies) > 10000 {
				delete(f.tallies, id)
			}
			continue
		}
		if !t.dirty {
			continue
		}
		t.counts.Errors = commands.TopErrors(t.errs, 5)
		t.counts.UpTo = t.upTo
		if t.plan != nil {
			if done, _ := commands.Verdict(t.plan, t.counts); done {
				f.finish(ctx, id, t)
				continue
			}
		}
		if time.Since(t.flushed) < f.flush {
			continue
		}
		counts := t.counts
		next, _, err := f.store.Apply(ctx, "fanin", t.snap, func(j *streams.Job) (*streams.Event, error) {
			return commands.FanIn(j, counts, f.store.Actor, time.Now().UTC())
		})
		switch {
		case err == nil:
			t.snap, t.dirty, t.flushed = next, false, time.Now()
		case errors.Is(err, commands.ErrInvalidTransition):
			// Not waiting (yet, or any more): counts are written with the
			// outcome; a parent that ended needs none.
			t.snap = next
			t.done = next.Job.State.Terminal()
		default:
			f.log.Warn("write fan-in counts", "parent", id, "err", err)
		}
	}
}

func (f *FanIn) finish(ctx context.Context, id string, t *tally) {
	counts := t.counts
	next, ev, err := f.store.Apply(ctx, "fanin", t.snap, func(j *streams.Job) (*streams.Event, error) {
		if j.State != streams.StateWaiting {
			return nil, &commands.TransitionError{JobID: j.ID, Event: streams.EvSucceeded, From: j.State, To: streams.StateSucceeded}
		}
		return commands.FinishFanout(j, counts, f.store.Actor, time.Now().UTC())
	})
	switch {
	case err == nil:
		t.snap, t.done = next, true
		f.completed.Add(1)
		f.log.Info("fan-out completed", "parent", id, "outcome", ev.To, "succeeded", counts.Succeeded,
			"failed", counts.Failed, "cancelled", counts.Cancelled)
	case errors.Is(err, commands.ErrInvalidTransition):
		t.snap = next
		t.done = next.Job.State.Terminal()
	default:
		f.log.Warn("complete fan-out", "parent", id, "err", err)
	}
}
