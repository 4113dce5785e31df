package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/lifecycle"
	"github.com/jetflow/jetflow/streams"
)

// Defaults of ProjectorConfig.
const (
	DefaultProjectorLag   = 2 * time.Second
	defaultProjectorBatch = 1000
	projectorConsumer     = "projector"
)

// ProjectorConfig configures the Projector.
type ProjectorConfig struct {
	// Lag is how long the Projector lets writers project their own events
	// before it checks them: the repair of a crashed writer takes at least
	// this long, and a shorter lag costs duplicate work while writers are
	// slow.
	Lag   time.Duration
	Batch int
	// Retry is how long a batch whose verification failed (or a job's
	// events whose cascade failed) waits before it comes again.
	Retry time.Duration
	Log   *slog.Logger
}

// Projector is the job projection's consumer of the event log. Writers fold
// their own events into the KV bucket; the Projector reads every event a
// little later and makes sure that happened: a job whose record is missing
// or behind the log (its writer crashed between the append and the KV write)
// is rebuilt from the log, and a job that is runnable in its last event gets
// its work item again (its writer may have crashed before the dispatch; the
// queue stream drops the duplicate of one that arrived).
//
// Several engines can run a Projector: they share one durable consumer, and
// every repair is revision-checked.
type Projector struct {
	cfg   ProjectorConfig
	store *store.Store
	log   *slog.Logger

	life lifecycle.Loop

	// Cascades run beside the loop, a few jobs' at once (slots): the loop
	// goes on verifying the log while one cancels a million children, and
	// waits for its own when it ends.
	slots         chan struct{}
	beforeCascade func(*domain.Job) // tests: called in a cascade's goroutine first

	checked atomic.Int64 // events verified
	skipped atomic.Int64 // follow-ups not repeated: a writer in this process saw them done
	settled atomic.Int64 // jobs not looked at: a writer in this process saw their record and follow-ups done
	lastSeq atomic.Uint64
}

func (c ProjectorConfig) withDefaults() ProjectorConfig {
	orDefault(&c.Lag, DefaultProjectorLag)
	orDefault(&c.Batch, defaultProjectorBatch)
	orDefault(&c.Retry, time.Second)
	return c
}

func (c ProjectorConfig) validate() error { return nil }

// NewProjector returns a Projector.
func NewProjector(s *store.Store, cfg ProjectorConfig) *Projector {
	cfg = cfg.withDefaults()
	return &Projector{cfg: cfg, store: s, log: logger(cfg.Log, "projector"), slots: make(chan struct{}, maxCascades)}
}

// Start creates the consumer and starts projecting. Idempotent.
func (p *Projector) Start(ctx context.Context) error {
	return p.life.Start(func() (func(context.Context), error) {
		if err := p.cfg.validate(); err != nil {
			return nil, err
		}
		cons, err := p.store.JS().CreateOrUpdateConsumer(ctx, streams.EventsStream, jetstream.ConsumerConfig{
			Durable:       projectorConsumer,
			Description:   "jetflow job projection: verifies and repairs the jobs bucket",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       p.ackWait(),
			MaxAckPending: 4 * p.cfg.Batch,
			DeliverPolicy: jetstream.DeliverAllPolicy,
			MaxDeliver:    -1,
		})
		if err != nil {
			return nil, fmt.Errorf("projector consumer: %w", err)
		}
		return func(ctx context.Context) { p.loop(ctx, cons) }, nil
	})
}

// Stop stops projecting. Idempotent.
func (p *Projector) Stop(ctx context.Context) { p.life.Stop(ctx) }

// Skipped is how many events' follow-ups (work item, piece event, plan)
// the Projector did not repeat because a writer in this process saw them
// acknowledged (Store.Seen: FollowedUp), and Settled how many jobs' last
// events it did not look at because a writer in this process saw their
// record written and all they imply done (Settled).
func (p *Projector) Skipped() int64 { return p.skipped.Load() }

// Settled: see Skipped.
func (p *Projector) Settled() int64 { return p.settled.Load() }

// finished raises lastSeq to seq (a batch verified again after later ones
// does not lower it).
func (p *Projector) finished(seq uint64) {
	for {
		cur := p.lastSeq.Load()
		if seq <= cur || p.lastSeq.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// Floor is the log's sequence up to which every event was verified, by
// this engine's Projector or another's (they share a durable consumer: its
// ack floor).
func (p *Projector) Floor(ctx context.Context) (uint64, error) {
	c, err := p.store.JS().Consumer(ctx, streams.EventsStream, projectorConsumer)
	if err != nil {
		return 0, err
	}
	return c.CachedInfo().AckFloor.Stream, nil // the lookup's answer: one round trip
}

// Stats reports how many events the Projector checked and the highest
// event sequence of a batch it finished. Repairs are counted by
// Store.Repairs.
func (p *Projector) Stats() (checked int64, lastSeq uint64) {
	return p.checked.Load(), p.lastSeq.Load()
}

func (p *Projector) loop(ctx context.Context, cons jetstream.Consumer) {
	var cascades sync.WaitGroup // this run's: a run after a Stop that gave up waiting has its own
	defer cascades.Wait()
	for ctx.Err() == nil {
		batch, err := cons.Fetch(p.cfg.Batch, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("fetch", "err", err)
				sleepCtx(ctx, time.Second)
			}
			continue
		}
		var msgs []jetstream.Msg
		for m := range batch.Messages() {
			msgs = append(msgs, m)
		}
		if len(msgs) == 0 {
			continue
		}
		stopBeat := inProgress(msgs, p.ackWait()/3)
		// Give writers the lag to project their own events first.
		if meta, err := msgs[len(msgs)-1].Metadata(); err == nil {
			if wait := time.Until(meta.Timestamp.Add(p.cfg.Lag)); wait > 0 && !sleepCtx(ctx, wait) {
				stopBeat()
				return // unacked: redelivered to the next projector
			}
		}
		ended, durable, err := p.verify(ctx, msgs)
		if wait := time.Until(durable); err == nil && wait > 0 && !sleepCtx(ctx, wait) {
			stopBeat()
			return // unacked: redelivered to the next projector
		}
		stopBeat()
		if err != nil && ctx.Err() != nil {
			continue // unacked: redelivered to the next projector
		}
		// The events of jobs whose cascades are still to run are held:
		// each job's are acknowledged once its own cascade is done
		// (cascadeBeside), whatever becomes of the rest of the batch.
		held := map[jetstream.Msg]bool{}
		for _, e := range ended {
			for _, m := range e.msgs {
				held[m] = true
			}
		}
		retry := false // the batch but its held events comes again
		if err != nil {
			meta, merr := msgs[0].Metadata()
			if retry = merr != nil || meta.NumDelivered < maxVerifyDeliveries; retry {
				p.log.Warn("verify batch; it will be redelivered", "err", err)
			} else {
				// A failure that outlasted every redelivery (not a lost node
				// or leader, which heal in seconds): the batch is let go, so
				// that the log's later events are verified at all.
				p.log.Error("verify batch failed on every delivery; going on without it", "deliveries", meta.NumDelivered, "err", err)
			}
		}
		for _, m := range msgs {
			switch {
			case held[m]:
			case retry:
				_ = m.NakWithDelay(p.cfg.Retry)
			default:
				_ = m.Ack()
			}
		}
		if !p.cascadeBeside(ctx, &cascades, ended) {
			return // unacked: the cascades come again to the next projector
		}
		if retry {
			continue
		}
		if meta, err := msgs[len(msgs)-1].Metadata(); err == nil {
			p.finished(meta.Sequence.Stream)
		}
		p.checked.Add(int64(len(msgs)))
	}
}

// ackWaitSet is JETFLOW_PROJECTOR_ACK_WAIT (a Go duration), read once, as
// JETFLOW_CRASH_AT is: for the crash tests, which wait for a killed
// Projector's batch to come again.
var ackWaitSet, _ = time.ParseDuration(os.Getenv("JETFLOW_PROJECTOR_ACK_WAIT"))

// ackWait is how long the server waits for a batch's acknowledgement
// before it delivers the batch again (or ackWaitSet). A Projector tells the
// server every third of it that its batch is in progress, from the moment
// it has it (through the lag it sleeps first, the verification and the
// cascades), so this bounds only how long the events a killed Projector
// held wait for the next: after a crash, the records and work items it
// would have repaired (under sync always, work items a crash took from the
// queue stream) come within it.
func (p *Projector) ackWait() time.Duration {
	if ackWaitSet > 0 {
		return ackWaitSet
	}
	return projectorAckWait
}

// projectorAckWait: see ackWait.
const projectorAckWait = 10 * time.Second

// inProgress tells the server, every interval until the returned stop is
// called, that msgs are still being worked on: a batch whose verification
// takes long (a cascade over many children) is not delivered again
// meanwhile, to this Projector or another.
func inProgress(msgs []jetstream.Msg, interval time.Duration) (stop func()) {
	done, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				for _, m := range msgs {
					_ = m.InProgress()
				}
			}
		}
	}()
	return func() { close(done); <-ended }
}

// maxCascades is how many jobs' cascades the Projector runs at once beside
// its loop (each cancels up to 32 children at once); the loop waits for a
// slot.
const maxCascades = 8

// endedJob is a job of a batch that ended without succeeding and has
// children to cancel, and its events in the batch: held until its
// cascade is done.
type endedJob struct {
	job  *domain.Job
	msgs []jetstream.Msg
}

// cascadeBeside runs the cascade of each of ended in the background, once
// a slot is free, and acknowledges the job's events when it is done; the
// server is told they are in progress from the start (the wait for a slot
// too). A cascade that fails has its job's events delivered again (to
// this Projector or another), which repeats it, unless they were
// delivered maxVerifyDeliveries times: then they are let go, as a batch
// whose verification always fails is. False: ctx ended first; the events
// of the jobs whose cascades did not start are left unacknowledged.
func (p *Projector) cascadeBeside(ctx context.Context, cascades *sync.WaitGroup, ended []endedJob) bool {
	// Every job's events are beaten from now on, those that wait for a
	// slot too: else they would come again (to another Projector) while
	// this one still has them.
	beats := make([]func(), len(ended))
	for i, e := range ended {
		beats[i] = inProgress(e.msgs, p.ackWait()/3)
	}
	for i, e := range ended {
		stopBeat := beats[i]
		select {
		case p.slots <- struct{}{}:
		case <-ctx.Done():
			for _, stop := range beats[i:] {
				stop()
			}
			return false
		}
		cascades.Add(1)
		go func() {
			defer func() { <-p.slots; cascades.Done() }()
			if p.beforeCascade != nil {
				p.beforeCascade(e.job)
			}
			err := p.store.CascadeEnded(ctx, e.job)
			stopBeat()
			if err != nil {
				if ctx.Err() != nil {
					return // unacked: the next projector repeats it
				}
				if meta, merr := e.msgs[0].Metadata(); merr != nil || meta.NumDelivered < maxVerifyDeliveries {
					p.log.Warn("cascade; its job's events will be redelivered", "job", e.job.ID, "err", err)
					for _, m := range e.msgs {
						_ = m.NakWithDelay(p.cfg.Retry)
					}
					return
				}
				p.log.Error("cascade failed on every delivery; going on without it", "job", e.job.ID, "err", err)
			}
			for _, m := range e.msgs {
				_ = m.Ack()
			}
		}()
	}
	return true
}

// event is a job's event in a batch, with its stream sequence.
type event struct {
	msg jetstream.Msg
	seq uint64
}

// verify checks one batch of events against the jobs bucket, and returns
// the jobs whose last event is in it and who ended without succeeding and
// have children: their cascades are still to run (cascadeBeside), even
// when the rest of the batch failed and comes again. durable is when what
// the batch's acknowledgement vouches for (the follow-ups a writer in this
// process saw done, the repairs made here) cannot be lost any more
// (Store.DurableAfter): not before it.
func (p *Projector) verify(ctx context.Context, msgs []jetstream.Msg) ([]endedJob, time.Time, error) {
	hold := p.store.DurableAfter()
	var durable time.Time
	type seen struct {
		last     uint64 // highest event sequence of the job in this batch
		lastType string // its type
		followed bool   // a writer in this process published its follow-ups
		events   []event
	}
	jobs := map[string]*seen{}
	var order []string
	registry := map[string]*domain.Event{} // by subject, its last event here
	var head domain.Event
	for _, m := range msgs {
		meta, err := m.Metadata()
		if err == nil && streams.IsRegistrySubject(m.Subject()) {
			if ev, err := streams.DecodeEvent(m.Data()); err == nil {
				registry[m.Subject()] = ev
			}
			continue
		}
		if err != nil || !streams.IsJobSubject(m.Subject()) {
			continue // piece events are the fan-in counter's
		}
		// The head first (the job and the type): a job a writer in this
		// process saw settled needs no more.
		if err := streams.DecodeEventHead(m.Data(), &head); err != nil {
			// Nothing jetflow wrote: appends are checked, so this is another
			// program publishing on jetflow's subjects. It cannot be folded.
			p.log.Error("undecodable event in the log", "seq", meta.Sequence.Stream, "subject", m.Subject(), "err", err)
			continue
		}
		seq := meta.Sequence.Stream
		s := jobs[head.JobID]
		if s == nil {
			s = &seen{}
			jobs[head.JobID] = s
			order = append(order, head.JobID)
		}
		s.events = append(s.events, event{m, seq})
		if seq > s.last {
			s.last, s.lastType = seq, head.Type
		}
	}
	for _, ev := range registry {
		// Rare: a type registered or deleted, a namespace's settings set.
		if err := p.store.Repair(ctx, ev); err != nil {
			if errors.Is(err, ctx.Err()) {
				return nil, time.Time{}, err
			}
			p.log.Error("repair registry record", "event", ev.Type, "of", ev.JobID, "err", err)
		}
	}
	// What a writer in this process saw done whole needs no look; what it
	// saw followed up needs its record checked, not its follow-ups.
	mark, settled := p.store.FollowMark(), int64(0)
	read := make([]string, 0, len(order))
	for _, id := range order {
		s := jobs[id]
		seen, at := p.store.Seen(id, s.last)
		if seen != store.NotSeen && at.Add(hold).After(durable) {
			durable = at.Add(hold)
		}
		switch seen {
		case store.Settled:
			settled++
			continue
		case store.FollowedUp:
			s.followed = true
		}
		// Decoded whole: an event that does not decode is left out here
		// rather than folded (and refused) by every repair of its job.
		s.last, s.lastType = 0, ""
		for _, e := range s.events {
			ev, err := streams.DecodeEvent(e.msg.Data())
			if err != nil {
				p.log.Error("undecodable event in the log", "seq", e.seq, "subject", e.msg.Subject(), "err", err)
				continue
			}
			if e.seq > s.last {
				s.last, s.lastType = e.seq, ev.Type
			}
		}
		if s.last > 0 {
			read = append(read, id)
		}
	}
	order = read
	recs, err := p.store.Records(ctx, order)
	if err != nil {
		return nil, time.Time{}, err
	}
	var futs []streams.Future
	var ended []endedJob // ended without succeeding: their cascades, if they have children
	var repairErr error  // a record not repaired: the batch is verified again
	for _, id := range order {
		s := jobs[id]
		snap := recs[id]
		if snap.Job == nil || snap.Job.Seq < s.last {
			// Missing or behind (or left out of the multi-get): Load folds
			// the log tail in and writes it back.
			fresh, err := p.store.Current(ctx, id)
			if errors.Is(err, commands.ErrGone) {
				continue // purged: Load deleted any record left behind
			}
			if err != nil {
				if errors.Is(err, ctx.Err()) {
					return nil, time.Time{}, err
				}
				p.log.Error("repair job", "job", id, "err", err)
				repairErr = fmt.Errorf("repair job %s: %w", id, err)
				continue
			}
			snap = fresh
		}
		if snap.Job.Seq < s.last {
			// Read behind the event this batch has (a replica that lags
			// answered, on a cluster): verified again when redelivered.
			repairErr = fmt.Errorf("job %s read at event %d, before %d", id, snap.Job.Seq, s.last)
			continue
		}
		if snap.Job.Seq != s.last {
			continue // it moved on since; its later events are in a later batch
		}
		// Its last event is here: repeat what its writer does after the
		// append, in case the writer died first. Each is a no-op when it
		// was done (message ids, schedules by subject, pieces by number).
		// (A writer in this process that saw them done: nothing to repeat.)
		if !s.followed {
			futs = append(futs, p.store.RepeatAsync(snap, s.lastType)...)
		} else {
			p.skipped.Add(1)
		}
		if commands.ChildBlocked(snap.Job) {
			msgs := make([]jetstream.Msg, len(s.events))
			for i, e := range s.events {
				msgs[i] = e.msg
			}
			ended = append(ended, endedJob{snap.Job, msgs})
		}
	}
	repaired := false // a follow-up sent again was missing: stored now
	for _, f := range futs {
		stored, err := f.Stored(ctx)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("re-dispatch: %w", err)
		}
		repaired = repaired || stored
	}
	if repaired && time.Now().Add(hold).After(durable) {
		// What was sent again is as fresh as that. (A follow-up dropped
		// here as a duplicate was sent by its writer, as a rule right after
		// the event: more than the sync interval before the lag ran out.)
		durable = time.Now().Add(hold)
	}
	// A job that ended without succeeding: its children (pieces or
	// linked) are cancelled before its events are acknowledged
	// (cascadeBeside), whatever becomes of the rest of the batch. Its
	// writer's cascade may have been cut short by a crash, and so may this
	// one: its events then come again, and so does the cascade (cancelling
	// a cancelled child writes nothing). One with no children needs none.
	if len(ended) > 0 {
		jobs := make([]*domain.Job, len(ended))
		for i, e := range ended {
			jobs[i] = e.job
		}
		need, err := p.store.ToCascade(ctx, jobs)
		if err != nil {
			return nil, time.Time{}, err
		}
		keep := make(map[*domain.Job]bool, len(need))
		for _, j := range need {
			keep[j] = true
		}
		ended = slices.DeleteFunc(ended, func(e endedJob) bool { return !keep[e.job] })
	}
	// Jobs skipped as settled are vouched for by writes acknowledged before
	// this connection was lost or came back, which a server that restarted
	// may have lost: the batch is verified again, whole (the notes are
	// gone).
	if settled > 0 && !p.store.Steady(mark) {
		return ended, durable, errors.New("the connection was lost or came back while the batch was verified")
	}
	p.settled.Add(settled)
	// Not acked: a record that could not be read or written (a node or a
	// stream leader lost a moment) is repaired, and what its writer does
	// after the append repeated, when the batch comes again.
	return ended, durable, repairErr
}

// maxVerifyDeliveries is how many times a batch whose verification fails
// is delivered again before the Projector goes on without it.
const maxVerifyDeliveries = 20
