package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/lifecycle"
	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// FanInConsumer is the durable consumer of piece events.
const FanInConsumer = "fanin"

// defaultFanInFlush is how often a waiting parent's counts are written
// while its pieces finish.
const defaultFanInFlush = 250 * time.Millisecond

// FanIn completes fan-out parents. It is a consumer of the piece events in
// the log, which say what became of each piece (a child job that ended, a
// batch that was run), but it does not count what the consumer delivers:
// a delivery only says that a parent has news. The counter then reads that
// parent's piece subject from the log, in order, from where its tally
// stopped, and folds what it finds (projections.Pieces: each piece number
// once). A tally is therefore always the fold of a prefix of the log,
// whatever was redelivered, delivered out of order, or delivered to another
// counter that overlapped this one, and rebuilding it from the log gives the
// same counts.
//
// It writes a parent's counts as job.fanin events a few times a second, and
// completes the parent (job.succeeded or job.failed, under its failure
// policy) once they decide it. A parent's deliveries are acknowledged only
// after that is done, so a counter that dies leaves them to the next one,
// which builds its tallies from the log again. The completion is an
// expected-sequence transition: it happens once even if two counters run.
//
// One FanIn runs at a time, under a Leader.
type FanIn struct {
	store *store.Store
	cfg   FanInConfig
	log   *slog.Logger

	life    lifecycle.Loop
	tallies map[string]*tally // the parents of this term (touched by its loop only)
	looks   *looks            // workflows to look at, from their own events (workflow.go)
}

// FanInConfig configures the fan-in counter.
type FanInConfig struct {
	// Flush is how often a waiting parent's counts are written while its
	// pieces finish (default defaultFanInFlush).
	Flush time.Duration
	// WorkflowGrace is how long a workflow may stay pending (its steps
	// being made by its submitter) before the counter makes them
	// (default DefaultWorkflowGrace).
	WorkflowGrace time.Duration
	Log           *slog.Logger
}

func (c FanInConfig) withDefaults() FanInConfig {
	orDefault(&c.Flush, defaultFanInFlush)
	orDefault(&c.WorkflowGrace, DefaultWorkflowGrace)
	return c
}

func (c FanInConfig) validate() error { return nil }

// tally is one parent as this counter knows it.
type tally struct {
	snap    store.Snapshot // the parent as last read or written (set unless done)
	pieces  *projections.Pieces
	dirty   bool // counts not yet written
	flushed time.Time
	done    bool // the parent is terminal: nothing more to count
	failed  bool // its last write failed: deliveries are redelivered

	wf *wfTally // a workflow's steps (workflow.go); nil for a fan-out
}

// plan is the parent's plan, from its record or its piece.planned event.
func (t *tally) plan() *domain.FanoutPlan {
	if t.snap.Job != nil && t.snap.Job.Fanout != nil {
		return &t.snap.Job.Fanout.Plan
	}
	return t.pieces.Plan
}

// NewFanIn returns a fan-in counter.
func NewFanIn(s *store.Store, cfg FanInConfig) *FanIn {
	cfg = cfg.withDefaults()
	return &FanIn{store: s, cfg: cfg, log: logger(cfg.Log, "fanin"), tallies: map[string]*tally{}, looks: newLooks()}
}

// Start starts counting. Idempotent.
func (f *FanIn) Start(ctx context.Context) error {
	return f.life.Start(func() (func(context.Context), error) {
		if err := f.cfg.validate(); err != nil {
			return nil, err
		}
		cons, err := f.store.JS().CreateOrUpdateConsumer(ctx, streams.EventsStream, jetstream.ConsumerConfig{
			Durable:       FanInConsumer,
			Description:   "jetflow fan-in: which parents have new piece events",
			FilterSubject: streams.PiecesPrefix + ".>",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       time.Minute,
			MaxAckPending: 20000,
			MaxDeliver:    -1,
			HeadersOnly:   true, // the counter reads the events themselves from the log, in order
		})
		if err != nil {
			return nil, fmt.Errorf("fan-in consumer: %w", err)
		}
		f.tallies = map[string]*tally{} // a new term counts from the log again
		f.looks = newLooks()
		return func(ctx context.Context) { f.loop(ctx, cons) }, nil
	})
}

// Stop stops counting. Idempotent.
func (f *FanIn) Stop(ctx context.Context) { f.life.Stop(ctx) }

// news is what one fetch said about one parent.
type news struct {
	msgs []jetstream.Msg
	last uint64 // the latest of its piece events delivered
}

func (f *FanIn) loop(ctx context.Context, cons jetstream.Consumer) {
	watched := make(chan struct{})
	defer func() { <-watched }()
	go func() { defer close(watched); f.watchWorkflows(ctx) }()
	for ctx.Err() == nil {
		msgs, err := fetchNews(cons, f.cfg.Flush)
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("fetch", "err", err)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		byParent := map[string]*news{}
		var order []string
		for _, m := range msgs {
			meta, err := m.Metadata()
			if err != nil {
				_ = m.Term()
				continue
			}
			parent := strings.TrimPrefix(m.Subject(), streams.PiecesPrefix+".")
			n := byParent[parent]
			if n == nil {
				n = &news{}
				byParent[parent] = n
				order = append(order, parent)
			}
			n.msgs = append(n.msgs, m)
			n.last = max(n.last, meta.Sequence.Stream)
		}
		for _, parent := range order {
			if err := f.catchUp(ctx, parent, byParent[parent].last); err != nil {
				if ctx.Err() != nil {
					return // unacked: redelivered to the next counter
				}
				f.log.Warn("count pieces; they will be redelivered", "parent", parent, "err", err)
				delete(f.tallies, parent) // built again from the log next time
				for _, m := range byParent[parent].msgs {
					_ = m.NakWithDelay(time.Second)
				}
				delete(byParent, parent)
			}
		}
		f.lookAtWorkflows(ctx)
		f.settle(ctx)
		for parent, n := range byParent {
			if t := f.tallies[parent]; t != nil && t.failed {
				for _, m := range n.msgs {
					_ = m.NakWithDelay(time.Second)
				}
				continue
			}
			for _, m := range n.msgs {
				_ = m.Ack()
			}
		}
	}
}

// fetchNews waits up to wait for a first notification, then takes the
// others already there without waiting: a parent's last pieces are counted
// as soon as they come, not when a batch fills or its wait ends.
func fetchNews(cons jetstream.Consumer, wait time.Duration) ([]jetstream.Msg, error) {
	first, err := cons.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		return nil, err
	}
	var msgs []jetstream.Msg
	for m := range first.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		return nil, first.Error()
	}
	rest, err := cons.FetchNoWait(999)
	if err != nil {
		return msgs, nil // the first one is counted now, the rest next time
	}
	for m := range rest.Messages() {
		msgs = append(msgs, m)
	}
	return msgs, nil
}

// catchUp brings the parent's tally up to its piece event at seq at least,
// reading its piece events from the log, in order, from where the tally
// stopped. A parent seen for the first time is counted from its first
// piece event.
func (f *FanIn) catchUp(ctx context.Context, parent string, seq uint64) error {
	t := f.tallies[parent]
	if t == nil {
		t = &tally{pieces: projections.NewPieces()}
		snap, err := f.store.Current(ctx, parent)
		switch {
		case errors.Is(err, commands.ErrNotFound) || errors.Is(err, commands.ErrInvalidInput):
			t.done = true // no such parent: nothing to complete
		case err != nil:
			return err
		default:
			t.snap = snap
			t.done = snap.Job.State.Terminal()
			if g := snap.Job.Spec.Workflow; g != nil && !t.done {
				t.wf = newWfTally(snap.Job)
				t.pieces = t.wf.steps.Pieces
			}
		}
		f.tallies[parent] = t
	}
	if t.done || t.pieces.UpTo >= seq {
		return nil
	}
	before := t.pieces.Counts.Finished()
	hadPlan := t.pieces.Planned
	var err error
	if t.wf != nil {
		err = f.store.ReadSteps(ctx, parent, t.wf.steps)
	} else {
		err = f.store.ReadPieces(ctx, parent, t.pieces, 0)
	}
	if err != nil {
		return err
	}
	if t.pieces.Planned && !hadPlan && (t.snap.Job == nil || !commands.AwaitsPieces(t.snap.Job.State)) {
		// The parent began waiting since it was read: decide on it as it is.
		snap, err := f.store.Current(ctx, parent)
		if err != nil {
			return err
		}
		if !snap.Job.State.Terminal() && !commands.AwaitsPieces(snap.Job.State) {
			// A parent with a plan waits or has ended: read before its
			// job.waiting (a replica that lags answered). Read again on
			// redelivery, not decided on as it is.
			return fmt.Errorf("parent %s read %s at event %d, after its plan", parent, snap.Job.State, snap.Job.Seq)
		}
		t.snap = snap
		t.done = snap.Job.State.Terminal()
	}
	if t.pieces.UpTo < seq {
		// A replica that lags answered: the tally is a true prefix, but
		// short of what was delivered. Read again on redelivery.
		return fmt.Errorf("pieces of %s read up to %d, delivered up to %d", parent, t.pieces.UpTo, seq)
	}
	// New counts are written; a plan that came after some pieces finished
	// may decide the parent at once. (No piece finished: nothing to say.)
	if n := t.pieces.Counts.Finished(); n != before || (t.pieces.Planned != hadPlan && n > 0) {
		t.dirty = true
	}
	return nil
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
		if t.wf != nil {
			f.settleWorkflow(ctx, id, t)
			continue
		}
		if !t.dirty {
			continue
		}
		if p := t.plan(); p != nil {
			if done, _ := commands.Verdict(p, t.pieces.Counts); done {
				f.finish(ctx, id, t, t.pieces.Tally(5))
				continue
			}
		}
		if time.Since(t.flushed) < f.cfg.Flush {
			continue
		}
		counts := t.pieces.Tally(5) // sorts the failure messages: only for a write
		next, _, err := f.store.Apply(ctx, "fanin", t.snap, func(j *domain.Job) (*domain.Event, error) {
			return commands.FanIn(j, counts, f.store.Actor(), time.Now().UTC())
		})
		t.failed = false
		switch {
		case err == nil:
			t.snap, t.dirty, t.flushed = next, false, time.Now()
		case errors.Is(err, commands.ErrStale):
			// Another counter wrote these counts, or later ones.
			t.snap, t.dirty = next, false
		case errors.Is(err, commands.ErrInvalidTransition):
			// Not waiting (yet, or any more): counts are written with the
			// outcome; a parent that ended needs none.
			t.snap, t.dirty = next, false
			t.done = next.Job.State.Terminal()
		default:
			t.failed = true
			f.log.Warn("write fan-in counts", "parent", id, "err", err)
		}
	}
}

func (f *FanIn) finish(ctx context.Context, id string, t *tally, counts domain.FanoutCounts) {
	var on *domain.Job
	began := time.Now()
	next, ev, err := f.store.Apply(ctx, "fanin", t.snap, func(j *domain.Job) (*domain.Event, error) {
		on = j
		return commands.FinishFanout(j, counts, f.store.Actor(), time.Now().UTC())
	})
	t.failed = false
	switch {
	case err == nil:
		decided(ctx, tracing.SpanFanIn, on, ev, began, tracing.AttrSucceeded.Int(counts.Succeeded),
			tracing.AttrFailed.Int(counts.Failed), tracing.AttrCancelled.Int(counts.Cancelled))
		t.snap, t.done = next, true
		f.log.Info("fan-out completed", "parent", id, "outcome", ev.To, "succeeded", counts.Succeeded,
			"failed", counts.Failed, "cancelled", counts.Cancelled)
	case errors.Is(err, commands.ErrInvalidTransition):
		// Not waiting yet (its pieces finished before it recorded its
		// plan: job.waiting brings a piece.planned, and the counter back),
		// or ended already.
		t.snap, t.dirty = next, false
		t.done = next.Job.State.Terminal()
	default:
		t.failed = true
		f.log.Warn("complete fan-out", "parent", id, "err", err)
	}
}
