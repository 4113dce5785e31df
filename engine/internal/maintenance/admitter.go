package maintenance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/lifecycle"
	"github.com/jetflow/jetflow/streams"
)

// admitWriters is how many batches of admissions are written at once.
const admitWriters = 4

// Admitter admits the pending jobs of queues with limits (quotas) as their
// slots free, fairly across users (commands.Admission decides). It keeps no
// counter: it follows the log of every queue that has limits (an ordered
// consumer of their jobs' subjects that starts with the last event of each
// job, then follows new ones), so its counts are rebuilt from the log each
// time it starts, on whichever engine leads. A slot is given back by
// whatever event takes its job out of queued, claimed or running: success,
// failure, cancel, timeout, lease expiry, or the requeue or failure the
// lease sweeper writes for a crashed worker.
//
// One Admitter runs at a time, under a Leader: two engines never admit
// together.
type Admitter struct {
	store *store.Store
	cfg   AdmitterConfig
	log   *slog.Logger
	life  lifecycle.Loop

	asks chan func(map[string]*commands.Admission)
	subs []*nats.Subscription
}

// AdmitterConfig configures the Admitter.
type AdmitterConfig struct {
	Log *slog.Logger // default: the store's
}

func (c AdmitterConfig) withDefaults(s *store.Store) AdmitterConfig {
	if c.Log == nil {
		c.Log = s.Log
	}
	return c
}

func (c AdmitterConfig) validate() error { return nil }

// NewAdmitter returns an Admitter.
func NewAdmitter(s *store.Store, cfg AdmitterConfig) *Admitter {
	cfg = cfg.withDefaults(s)
	return &Admitter{store: s, cfg: cfg, log: logger(cfg.Log, "admitter"), asks: make(chan func(map[string]*commands.Admission))}
}

// Start starts admitting. Idempotent.
func (a *Admitter) Start(ctx context.Context) error {
	return a.life.Start(func() (func(context.Context), error) {
		if err := a.cfg.validate(); err != nil {
			return nil, err
		}
		answer := func(subject string, fn func(m *nats.Msg, qs map[string]*commands.Admission) any) (*nats.Subscription, error) {
			return a.store.NC().Subscribe(subject, func(m *nats.Msg) {
				done := make(chan any, 1)
				ask := func(qs map[string]*commands.Admission) { done <- fn(m, qs) }
				select {
				case a.asks <- ask:
				case <-time.After(time.Second):
					return // busy rebuilding: the caller goes without
				}
				if b, err := json.Marshal(<-done); err == nil {
					_ = m.Respond(b)
				}
			})
		}
		pos, err := answer(streams.AdmissionPosition, func(m *nats.Msg, qs map[string]*commands.Admission) any {
			for _, q := range qs {
				if p, ok := q.Position(string(m.Data)); ok {
					place := store.AdmissionPlace{Pending: true, Position: p}
					if h, ok := q.Reason(string(m.Data), time.Now().UTC()); ok {
						place.Hold = &h
					}
					return place
				}
			}
			return store.AdmissionPlace{}
		})
		if err != nil {
			return nil, err
		}
		counts, err := answer(streams.AdmissionCounts, func(m *nats.Msg, qs map[string]*commands.Admission) any {
			out := map[string]commands.Counts{}
			for name, q := range qs {
				if len(m.Data) == 0 || string(m.Data) == name {
					out[name] = q.Counts()
				}
			}
			return out
		})
		if err != nil {
			_ = pos.Unsubscribe()
			return nil, err
		}
		a.subs = []*nats.Subscription{pos, counts}
		return a.run, nil
	})
}

// Stop stops admitting. Idempotent.
func (a *Admitter) Stop(ctx context.Context) {
	for _, s := range a.subs {
		_ = s.Unsubscribe()
	}
	a.life.Stop(ctx)
}

func (a *Admitter) run(ctx context.Context) {
	for ctx.Err() == nil {
		err := a.session(ctx)
		switch {
		case err == nil || ctx.Err() != nil:
		case errors.Is(err, errLimitsChanged):
			// A queue gained or lost its limits: a new session follows
			// the new set at once; nothing went wrong.
			a.log.Info("admission follows the queues with limits as they are now")
		default:
			a.log.Warn("admission restarts", "err", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

// errLimitsChanged ends a session whose set of queues with limits changed.
var errLimitsChanged = errors.New("queues with limits changed")

// errRebuildRestarted ends a session whose consumer restarted before it
// caught up with the log.
var errRebuildRestarted = errors.New("the log's consumer restarted during the rebuild")

// admitting is one admission's outcome, back from its writer.
type admitting struct {
	queue, id string
	limits    domain.QueueLimits // the queue's when it was decided
	written   bool
}

// rateShape is what of a queue's limits decides the rate windows its
// admitter rebuilds from the log: a change of it starts a new session.
func rateShape(l domain.QueueLimits) domain.QueueLimits {
	if l.RateLimit == 0 {
		return domain.QueueLimits{}
	}
	return domain.QueueLimits{RateLimit: 1, RatePeriod: l.RatePeriod, RateKey: l.RateKey}
}

// session follows the queues with limits as they are now, until that set
// changes (errLimitsChanged) or the consumer fails.
func (a *Admitter) session(ctx context.Context) error {
	recs, changed, err := a.store.Limits().Tracked(ctx)
	if err != nil {
		return err
	}
	qs := map[string]*commands.Admission{}
	var filters, rated []string
	var period time.Duration // the longest rate period
	for name, rec := range recs {
		qs[name] = commands.NewAdmission(name, rec.Limits)
		filter := streams.EventsPrefix + ".*." + name + ".>"
		filters = append(filters, filter)
		if rec.Limits.RateLimit > 0 {
			rated = append(rated, filter)
			period = max(period, rec.Limits.RatePeriod)
		}
	}
	sort.Strings(filters)
	if len(qs) == 0 {
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-changed:
				// Any queue record changed (a queue made by its first
				// job, a pause): a new session only if a queue has
				// limits now.
				recs, ch, err := a.store.Limits().Tracked(ctx)
				if err != nil {
					return err
				}
				if len(recs) > 0 {
					return errLimitsChanged
				}
				changed = ch
			case ask := <-a.asks:
				ask(qs)
			}
		}
	}
	sctx, cancel := context.WithCancel(ctx)
	holdTokens, holdRefill := float64(holdBurst), time.Now() // the holds this session may write now (holdRate)
	defer cancel()
	// An ordered consumer: it notices a gap in what it was sent (a
	// message the server dropped for a slow connection; seen once in a
	// rebuild of 100k jobs) and starts again after the last message it
	// delivered, from then on with every event rather than each job's
	// last: slower, never wrong (Observe takes a job's events in order).
	cons, err := a.store.Events().OrderedConsumer(sctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return err
	}
	// What the consumer's creation answered (an Info request could wait
	// for ever on a server busy working out the last events of 100k jobs).
	info := cons.CachedInfo()
	if info == nil {
		return errors.New("admission consumer: no info")
	}
	// Caught up when a message says nothing more is pending (after a reset,
	// the count is that of the consumer that replaced the first).
	caughtUp := info.NumPending == 0
	toRead := info.NumPending
	// The admissions of the last rate period, read from the log up to
	// where this consumer sends every event (each job's last only before):
	// it counts only those after (countFrom).
	var countFrom uint64
	if len(rated) > 0 {
		if countFrom, err = a.countAdmissions(sctx, qs, rated, period); err != nil {
			return err
		}
	}
	var consumerSeq uint64 // the last message's: a reset starts it again
	it, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return err
	}
	defer it.Stop()
	msgs := make(chan jetstream.Msg, 1000)
	fail := make(chan error, 1)
	go func() {
		for {
			m, err := it.Next()
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					fail <- err
				}
				return
			}
			select {
			case msgs <- m:
			case <-sctx.Done():
				return
			}
		}
	}()

	// Writers report here (never blocking on the loop, which may itself
	// wait for a free writer).
	var resMu sync.Mutex
	var results []admitting
	resReady := make(chan struct{}, 1)
	report := func(r admitting) {
		resMu.Lock()
		results = append(results, r)
		resMu.Unlock()
		select {
		case resReady <- struct{}{}:
		default:
		}
	}
	// Admissions and holds are written in the background, never holding
	// up the loop: admissions by up to admitWriters at once, holds (why a
	// job waits: only for people) by a few, after the admissions.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	admits := newBatcher(sctx, &wg, admitWriters, func(b []admitting) { a.admitAll(sctx, b, report) })
	// A queue with priorities has its admissions written by one writer of
	// its own, a batch after the other: its work items land in the order
	// admitted, which is the order its workers take them. Written by
	// several at once, a batch could overtake the one before (seen under
	// load: the last high job's item behind a dozen low ones admitted
	// after it), and a window of max_queued no longer bounds the starts
	// ahead of a job. Queues without priorities share admitWriters.
	ordered := map[string]*batcher[admitting]{}
	writerOf := func(q *commands.Admission) *batcher[admitting] {
		if !q.Limits.Priorities {
			return admits
		}
		b := ordered[q.Queue]
		if b == nil {
			b = newBatcher(sctx, &wg, 1, func(b []admitting) { a.admitAll(sctx, b, report) })
			ordered[q.Queue] = b
		}
		return b
	}
	holds := newBatcher(sctx, &wg, holdWriters, func(hs []commands.Hold) { a.holdAll(sctx, hs) })
	var lookups []lookup
	redispatched := false
	began, read := time.Now(), 0 // the rebuild: how long, how many events
	looking := map[string]bool{} // jobs of lookups: their later events of the batch are looked up too
	// A pass also runs on a tick: holds come due (commands' holdAfter, a second)
	// with no event to wake the loop.
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		var batch []jetstream.Msg
		select {
		case <-ctx.Done():
			return nil
		case err := <-fail:
			return err
		case <-changed:
			recs2, ch2, err := a.store.Limits().Tracked(ctx)
			if err != nil {
				return err
			}
			if len(recs2) != len(qs) {
				return errLimitsChanged
			}
			for name, rec := range recs2 {
				q := qs[name]
				if q == nil || rateShape(q.Limits) != rateShape(rec.Limits) {
					return errLimitsChanged
				}
				q.SetLimits(rec.Limits)
			}
			changed = ch2
		case <-resReady:
			resMu.Lock()
			rs := results
			results = nil
			resMu.Unlock()
			for _, r := range rs {
				qs[r.queue].Settled(r.id, r.written)
			}
		case ask := <-a.asks:
			ask(qs)
			continue
		case <-tick.C:
		case m := <-msgs:
			batch = append(batch, m)
		drain:
			for len(batch) < 1000 {
				select {
				case m := <-msgs:
					batch = append(batch, m)
				default:
					break drain
				}
			}
		}
		read += len(batch)
		for _, m := range batch {
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			if !caughtUp && meta.Sequence.Consumer <= consumerSeq {
				// The ordered consumer started again (a gap): it would go on
				// with every event of every job; a new rebuild reads each
				// job's last event only.
				return errRebuildRestarted
			}
			consumerSeq = meta.Sequence.Consumer
			if meta.NumPending == 0 {
				caughtUp = true
			}
			ev, err := streams.DecodeEvent(m.Data())
			if err != nil {
				continue
			}
			ev.Seq = meta.Sequence.Stream
			_, queue, _ := eventQueue(m.Subject())
			q := qs[queue]
			if q == nil {
				continue
			}
			lookups = observeOrLookUp(q, ev, countFrom, looking, lookups)
		}
		if len(lookups) > 0 {
			if err := a.lookUp(ctx, qs, lookups); err != nil {
				return err
			}
			lookups = lookups[:0]
			clear(looking)
		}
		if !caughtUp {
			continue // admit only on the whole picture
		}
		if !redispatched {
			held, waiting := 0, 0
			for _, q := range qs {
				c := q.Counts()
				held, waiting = held+c.Holding, waiting+c.Pending
			}
			a.log.Info("admission rebuilt from the log", "queues", len(qs), "running", held, "pending", waiting,
				"events", read, "last_events", toRead, "took", time.Since(began).Round(time.Millisecond))
			// Once per rebuild: the admitted jobs still queued get their work
			// item again (deduplicated by message id when they have one). An
			// engine killed between an admission and its work item left the
			// job holding a slot with nothing to run it, and the events its
			// own Projector had fetched come back to another only after the
			// consumer's ack wait (a minute): the queue would stall that long.
			redispatched = true
			var ids []string
			for _, q := range qs {
				ids = append(ids, q.Queued()...)
			}
			if len(ids) > 0 {
				wg.Add(1)
				go func() { defer wg.Done(); a.redispatch(sctx, ids) }()
			}
		}
		now := time.Now().UTC()
		// Holds are for people, and every one costs a read and two writes:
		// at most holdRate a second (holdBurst at once), so that a backlog
		// drained at full speed is not slowed by writing why each of its
		// jobs waits; those admitted before their turn need none.
		holdTokens = min(holdBurst, holdTokens+now.Sub(holdRefill).Seconds()*holdRate)
		holdRefill = now
		for name, q := range qs {
			if ids := q.Next(now); len(ids) > 0 {
				adds := make([]admitting, len(ids))
				for i, id := range ids {
					adds[i] = admitting{queue: name, id: id, limits: q.Limits}
				}
				writerOf(q).add(adds...)
			}
			if hs := q.Holds(now, int(holdTokens)); len(hs) > 0 {
				holdTokens -= float64(len(hs))
				holds.add(hs...)
			}
		}
	}
}

// holdWriters is how many holds (job.pending) are written at once.
const holdWriters = 1

// holdRate and holdBurst bound the holds an admitter writes: holdRate a
// second on average, holdBurst at once.
const (
	holdRate  = 500
	holdBurst = 1000
)

// batcher writes what is added to it in batches of up to maxBatch, by n
// writers that each take everything waiting (up to maxBatch) when they
// are free: the writes of a busy moment are pipelined together, and the
// one who adds never waits.
type batcher[T any] struct {
	mu    sync.Mutex
	items []T
	ready chan struct{}
}

const maxBatch = 1000

func newBatcher[T any](ctx context.Context, wg *sync.WaitGroup, n int, write func([]T)) *batcher[T] {
	b := &batcher[T]{ready: make(chan struct{}, n)}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case <-b.ready:
				}
				for {
					b.mu.Lock()
					k := min(len(b.items), maxBatch)
					batch := b.items[:k:k]
					b.items = b.items[k:]
					more := len(b.items) > 0
					b.mu.Unlock()
					if k == 0 {
						break
					}
					if more {
						b.signal() // another writer may take the rest
					}
					write(batch)
				}
			}
		}()
	}
	return b
}

func (b *batcher[T]) add(items ...T) {
	b.mu.Lock()
	b.items = append(b.items, items...)
	b.mu.Unlock()
	b.signal()
}

func (b *batcher[T]) signal() {
	select {
	case b.ready <- struct{}{}:
	default:
	}
}

// admitWriteTimeout bounds the writes of a batch of admissions.
const admitWriteTimeout = 10 * time.Second

// admitAll writes the admissions of a batch, pipelined (Store.ApplyMany),
// and reports each.
func (a *Admitter) admitAll(ctx context.Context, batch []admitting, report func(admitting)) {
	ids := make([]string, len(batch))
	for i, b := range batch {
		ids[i] = b.id
	}
	limits := make(map[string]domain.QueueLimits, len(batch))
	for _, b := range batch {
		limits[b.id] = b.limits
	}
	curs := a.snapshots(ctx, ids)
	// The writes of a batch begun are finished even when Stop comes
	// meanwhile: Stop waits for them, and only then does the leader give
	// the lead up, so that the next leader's rebuild counts them (a write
	// still in flight when it read the log would free its slot twice).
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), admitWriteTimeout)
	defer cancel()
	began, evs := time.Now(), admissions()
	errs := a.store.ApplyMany(wctx, "admit", curs, func(j *domain.Job) (*domain.Event, error) {
		ev, err := commands.Admit(j, limits[j.ID], a.store.Actor(), time.Now().UTC())
		evs.decided(j, ev)
		return ev, err
	})
	evs.record(ctx, curs, errs, began)
	for i, b := range batch {
		err := errs[i]
		b.written = err == nil
		if err != nil && !errors.Is(err, commands.ErrInvalidTransition) && curs[i].Job != nil && ctx.Err() == nil {
			a.log.Warn("admit", "job", b.id, "err", err)
			// The append may have landed although the write failed (its
			// record or its ack did not): the slot is given back only if
			// the log says the job still waits; otherwise the log tells
			// admission where the job went (Observe clears admitting).
			if cur, lerr := a.store.Current(ctx, b.id); lerr == nil && !commands.InAdmission(cur.Job.State) {
				b.written = true
			}
		}
		report(b)
	}
}

// holdAll writes why each of hs waits (job.pending), pipelined.
func (a *Admitter) holdAll(ctx context.Context, hs []commands.Hold) {
	ids := make([]string, len(hs))
	byID := make(map[string]domain.Hold, len(hs))
	for i, h := range hs {
		ids[i] = h.ID
		byID[h.ID] = h.Hold
	}
	curs := a.snapshots(ctx, ids)
	errs := a.store.ApplyMany(ctx, "hold", curs, func(j *domain.Job) (*domain.Event, error) {
		ev, err := commands.HoldPending(j, byID[j.ID], a.store.Actor(), time.Now().UTC())
		if err == nil && ev == nil {
			return nil, errNothingToDo
		}
		return ev, err
	})
	for i, err := range errs {
		if err != nil && !errors.Is(err, errNothingToDo) && !errors.Is(err, commands.ErrInvalidTransition) && ctx.Err() == nil {
			a.log.Warn("hold", "job", ids[i], "err", err)
		}
	}
}

// redispatch publishes the work item of each of ids that the log says is
// queued (Store.Current brings a record behind the log up to it first).
func (a *Admitter) redispatch(ctx context.Context, ids []string) {
	for _, id := range ids {
		snap, err := a.store.Current(ctx, id)
		if err == nil && commands.InQueue(snap.Job.State) {
			err = a.store.Dispatch(ctx, snap)
		}
		if err != nil && !errors.Is(err, commands.ErrNotFound) && ctx.Err() == nil {
			a.log.Warn("re-dispatch after a rebuild", "job", id, "err", err)
		}
	}
}

// snapshots reads the records of ids (records); one that is missing is
// loaded from the log.
func (a *Admitter) snapshots(ctx context.Context, ids []string) []store.Snapshot {
	snaps, err := a.store.Records(ctx, ids)
	if err != nil && ctx.Err() == nil {
		a.log.Warn("read records; loading each", "err", err)
	}
	out := make([]store.Snapshot, len(ids))
	for i, id := range ids {
		cur, ok := snaps[id]
		if !ok {
			cur, _ = a.store.Current(ctx, id) // not found: Job nil, refused by ApplyMany
		}
		out[i] = cur
	}
	return out
}

// lookup is a job whose user or state the event did not tell.
type lookup struct {
	queue, id string
	seq       uint64
}

// observe tells q what ev says of its job; false if the job is not known
// and ev does not say enough (who it runs for): look its record up.
func observe(q *commands.Admission, ev *domain.Event) bool {
	switch {
	case ev.Type == domain.EvSubmitted && ev.Spec != nil:
		s := commands.SlotOf(ev.JobID, ev.Spec, q.Limits)
		s.State, s.Created, s.Seq, s.Hold = ev.To, ev.Time, ev.Seq, ev.Hold
		q.Observe(s)
	case commands.Annotates(ev):
		if !q.Known(ev.JobID) {
			// A rebuild that found this last (a pending job's hold, a
			// running job's progress): its record says the rest.
			return ev.Type == domain.EvPurged
		}
		switch {
		case ev.Type == domain.EvPending && ev.Hold != nil:
			q.SetHold(ev.JobID, ev.Hold)
		case ev.Type == domain.EvReprioritized && ev.Priority != nil:
			q.SetPriority(ev.JobID, *ev.Priority)
		}
		return true
	case q.Known(ev.JobID) || ev.To.Terminal():
		q.Observe(commands.Slot{ID: ev.JobID, State: ev.To, Seq: ev.Seq})
	default:
		return false
	}
	return true
}

// observeOrLookUp tells q what ev says of its job, or adds a lookup of
// the job if ev does not say enough. Once a job is to be looked up, its
// later events of the batch are too (terminal ones included): a record
// read after the batch may be behind them, and lookUp brings a record
// behind its lookup's event up to the log.
//
// An admission after countFrom (the stream sequence up to which
// countAdmissions counted them) is counted in its rate window.
func observeOrLookUp(q *commands.Admission, ev *domain.Event, countFrom uint64, looking map[string]bool, ls []lookup) []lookup {
	if ev.Type == domain.EvAdmitted && ev.Seq > countFrom {
		q.CountAdmission(ev.RateKey, ev.Time, time.Now().UTC())
	}
	if looking[ev.JobID] || !observe(q, ev) {
		looking[ev.JobID] = true
		ls = append(ls, lookup{queue: q.Queue, id: ev.JobID, seq: ev.Seq})
	}
	return ls
}

// lookUp reads the records of jobs the log did not tell enough about and
// tells admission their state, user and age. A record behind the event
// that named the job is brought up to the log (Load).
func (a *Admitter) lookUp(ctx context.Context, qs map[string]*commands.Admission, ls []lookup) error {
	ids := make([]string, len(ls))
	for i, l := range ls {
		ids[i] = l.id
	}
	snaps, err := a.store.Records(ctx, ids)
	if err != nil {
		return err
	}
	for _, l := range ls {
		j := snaps[l.id].Job
		if j == nil || j.Seq < l.seq {
			snap, err := a.store.Current(ctx, l.id)
			if errors.Is(err, commands.ErrNotFound) {
				continue // purged, or never recorded: nothing to hold
			}
			if err != nil {
				return err
			}
			j = snap.Job
		}
		q := qs[l.queue]
		s := commands.SlotOf(j.ID, &j.Spec, q.Limits)
		s.State, s.Created, s.Hold, s.Seq = j.State, j.CreatedAt, j.Hold, j.Seq
		q.Observe(s)
	}
	return nil
}

var errNothingToDo = errors.New("nothing to write")

// countWait bounds countAdmissions' wait for each event.
const countWait = 10 * time.Second

// countAdmissions counts in their rate windows the admissions (job.admitted)
// of the queues with a rate limit (filters) of the last period, from the
// log: from period ago up to the last event the log has now, which it
// returns. It is read after the session's consumer started, which sends
// every event after its start: those up to the returned sequence it skips.
func (a *Admitter) countAdmissions(ctx context.Context, qs map[string]*commands.Admission, filters []string, period time.Duration) (uint64, error) {
	info, err := a.store.Events().Info(ctx)
	if err != nil {
		return 0, err
	}
	last := info.State.LastSeq
	from := time.Now().Add(-period)
	cons, err := a.store.Events().OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters, DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &from,
	})
	if err != nil {
		return 0, err
	}
	ci := cons.CachedInfo()
	if ci == nil {
		return 0, errors.New("admission rate consumer: no info")
	}
	if ci.NumPending == 0 {
		return last, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(1000))
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)() // a term that ends stops the read
	n := 0
	for {
		// Bounded: events the consumer reported and never sends (a server
		// restart) fail the count, which the session's start retries.
		m, err := it.Next(jetstream.NextMaxWait(countWait))
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err() // the term ended
			}
			return 0, fmt.Errorf("count admissions: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return 0, err
		}
		if meta.Sequence.Stream > last {
			break
		}
		n++
		if ev, err := streams.DecodeEvent(m.Data()); err == nil && ev.Type == domain.EvAdmitted {
			_, queue, _ := eventQueue(m.Subject())
			if q := qs[queue]; q != nil {
				q.CountAdmission(ev.RateKey, ev.Time, time.Now().UTC())
			}
		}
		if meta.Sequence.Stream == last || meta.NumPending == 0 {
			break
		}
	}
	a.log.Debug("admissions of the rate period counted from the log", "events", n, "up_to", last)
	return last, nil
}

// eventQueue returns the namespace and queue of a job's event subject
// (jetflow.ev.<ns>.<queue>.<type>.<id>).
func eventQueue(subject string) (ns, queue string, ok bool) {
	rest, found := strings.CutPrefix(subject, streams.EventsPrefix+".")
	if !found {
		return "", "", false
	}
	parts := strings.SplitN(rest, ".", 3)
	if len(parts) < 3 {
		return "", "", false
	}
	return parts[0], parts[1], true
}
