package maintenance

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
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/lifecycle"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Defaults of StatsConfig.
const (
	DefaultStatsFlush    = time.Second
	defaultStatsBatch    = 1000
	statsHeartbeatCursor = 10 * time.Minute // the checkpoint is written at least this often (it must not expire)
	statsInactive        = time.Minute      // a session's consumer left by a process that died goes after this
)

// StatsConfig configures the StatsKeeper.
type StatsConfig struct {
	// Flush is how often the slots that changed are written (default
	// DefaultStatsFlush): the charts are at most this much behind the log,
	// plus the time to read it.
	Flush time.Duration
	// MaxDims and MaxWaiting bound the fold (projections.StatsFold;
	// defaults projections.DefaultStatsMaxDims and DefaultStatsMaxWaiting).
	MaxDims, MaxWaiting int
	Log                 *slog.Logger
}

func (c StatsConfig) withDefaults() StatsConfig {
	orDefault(&c.Flush, DefaultStatsFlush)
	orDefault(&c.MaxDims, projections.DefaultStatsMaxDims)
	orDefault(&c.MaxWaiting, projections.DefaultStatsMaxWaiting)
	return c
}

func (c StatsConfig) validate() error {
	if c.Flush < time.Millisecond {
		return errors.New("stats: flush interval too short")
	}
	return nil
}

// StatsKeeper folds the event log into statistics (throughput, start
// latency, queue depth and the oldest wait, per namespace and queue) in
// time slots of three resolutions, kept in the buckets jetflow_stats_1m,
// _10m and _1h (streams.StatsBucket), for the dashboard's charts and GET
// /api/v1/stats/series.
//
// It is derived state, rebuilt from the log: it reads the log with a
// consumer of its own from its checkpoint (the key "cursor" of the hour bucket:
// the last event it folded, and every series' depth then), or from the
// log's first event when there is none. Every slot keeps the last event it
// counted (StatsSlot.UpTo), so an event folded again after a crash between
// a slot's write and the checkpoint's is not counted twice. Resuming from a
// checkpoint, it learns since when the queued jobs wait from their records
// (the log before the checkpoint is not read again).
//
// One runs at a time, under the Leader. It reads the log in bursts, once
// per Flush (what is there, at once, not a pull waiting for each event),
// and writes a slot per series and resolution at most once per Flush.
// What it costs the hot path: `jetflow bench --jobs 30000 --workers 50
// --rate 0`, alternated with a build without it, 1.08x CPU (1.20x when it
// pulled event by event).
type StatsKeeper struct {
	store *store.Store
	cfg   StatsConfig
	log   *slog.Logger
	life  lifecycle.Loop

	folded atomic.Uint64 // the last event folded and written (tests)
	live   *liveJobs     // the Reaper's, fed with every move read (Reaper.Follow), or nil
}

// NewStatsKeeper returns a StatsKeeper.
func NewStatsKeeper(s *store.Store, cfg StatsConfig) *StatsKeeper {
	cfg = cfg.withDefaults()
	return &StatsKeeper{store: s, cfg: cfg, log: logger(cfg.Log, "stats")}
}

// Start starts folding. Idempotent.
func (k *StatsKeeper) Start(context.Context) error {
	return k.life.Start(func() (func(context.Context), error) {
		if err := k.cfg.validate(); err != nil {
			return nil, err
		}
		k.folded.Store(0)
		return k.run, nil
	})
}

// Stop stops folding. Idempotent.
func (k *StatsKeeper) Stop(ctx context.Context) { k.life.Stop(ctx) }

// Folded is the last event whose statistics are written.
func (k *StatsKeeper) Folded() uint64 { return k.folded.Load() }

func (k *StatsKeeper) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := k.session(ctx); err != nil && ctx.Err() == nil {
			k.log.Warn("statistics restart", "err", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

// StatsCursor is the StatsKeeper's checkpoint: the last event folded, its
// time, and the depth of every series then.
type StatsCursor struct {
	Seq    uint64         `msgpack:"seq"`
	Time   time.Time      `msgpack:"time"`
	Depths map[string]int `msgpack:"depths,omitempty"` // by "<ns>.<queue>" as in the keys
	Wrote  time.Time      `msgpack:"wrote"`
}

// StatsKeeps is how long each resolution's slots are kept.
func StatsKeeps() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, r := range projections.StatsResolutions {
		out[r.Name] = r.Keep
	}
	return out
}

func dimKey(d projections.StatsDim) string {
	k := streams.StatsKey(d.Namespace, d.Queue, time.Unix(0, 0))
	return k[:len(k)-2] // without ".0"
}

func dimOf(key string) (projections.StatsDim, bool) {
	ns, q, ok := strings.Cut(key, ".")
	if !ok {
		return projections.StatsDim{}, false
	}
	if ns == streams.StatsAll {
		ns = ""
	}
	if q == streams.StatsAll {
		q = ""
	}
	return projections.StatsDim{Namespace: ns, Queue: q}, true
}

// slotRef names a slot: its resolution, series and start.
type slotRef struct {
	res   int // index in projections.StatsResolutions
	dim   projections.StatsDim
	start int64 // unix seconds
}

type slotState struct {
	slot  projections.StatsSlot
	dirty bool
}

// statsSession is one run of the fold: its buckets, the fold and the slots
// in memory.
type statsSession struct {
	k       *StatsKeeper
	buckets []jetstream.KeyValue
	fold    *projections.StatsFold
	slots   map[slotRef]*slotState
	cur     map[*projections.StatsFoldSeries]*[len(projections.StatsResolutions)]curSlot // each series' last slots (in slots)
	ev      domain.Event                                                                 // the event being folded (reused)
	last    uint64                                                                       // the last event folded
	lastAt  time.Time                                                                    // its time
	wrote   time.Time                                                                    // of the checkpoint
}

func (k *StatsKeeper) session(ctx context.Context) error {
	js := k.store.JS()
	topo := k.store.Topology()
	if err := topo.EnsureStats(ctx, js, StatsKeeps()); err != nil {
		return err
	}
	s := &statsSession{k: k, fold: projections.NewStatsFold(), slots: map[slotRef]*slotState{}, cur: map[*projections.StatsFoldSeries]*[len(projections.StatsResolutions)]curSlot{}}
	s.fold.MaxDims, s.fold.MaxWaiting = k.cfg.MaxDims, k.cfg.MaxWaiting
	for _, r := range projections.StatsResolutions {
		kv, err := js.KeyValue(ctx, streams.StatsBucket(r.Name))
		if err != nil {
			return err
		}
		s.buckets = append(s.buckets, kv)
	}
	cur, err := s.readCursor(ctx)
	if err != nil {
		return err
	}
	if cur != nil {
		s.last, s.lastAt = cur.Seq, cur.Time
		for key, n := range cur.Depths {
			if d, ok := dimOf(key); ok {
				s.fold.SetDepth(d, n)
			}
		}
		if err := s.seedWaiting(ctx); err != nil {
			return err
		}
		k.log.Info("statistics resume", "after", cur.Seq)
	} else {
		k.log.Info("statistics rebuild from the log")
	}
	// One consumer, read with FetchNoWait, from the event after the last
	// one folded. (An ordered consumer makes a new server consumer for
	// every fetch: about 24 a second at 8k jobs/s, each counting its
	// pending messages over the whole log; on a cluster each is a
	// meta-group proposal.) Its deliveries are checked for gaps, as an
	// ordered consumer's are: a gap, or the consumer lost (a server
	// restart), and it is made again from the event after the last folded.
	var cons jetstream.Consumer
	var name string
	var delivered uint64 // the consumer's sequence of the last message read
	drop := func() {
		if name == "" {
			return
		}
		dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = k.store.Events().DeleteConsumer(dctx, name) // else gone after its InactiveThreshold
		name = ""
	}
	defer drop()
	open := func() error {
		drop()
		cfg := jetstream.ConsumerConfig{
			Name:              streams.StatsConsumerPrefix + "_" + domain.NewID(),
			FilterSubjects:    []string{streams.EventsPrefix + ".>"},
			DeliverPolicy:     jetstream.DeliverAllPolicy,
			AckPolicy:         jetstream.AckNonePolicy,
			MaxDeliver:        1,
			Replicas:          1,
			MemoryStorage:     true,
			InactiveThreshold: max(statsInactive, 3*k.cfg.Flush), // it fetches once a flush at least
		}
		if s.last > 0 {
			cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, s.last+1
		}
		c, err := k.store.Events().CreateConsumer(ctx, cfg)
		if err != nil {
			return err
		}
		cons, name, delivered = c, cfg.Name, 0
		return nil
	}
	if err := open(); err != nil {
		return err
	}
	reopened := false // made again since the last fetch that read something
	flush := time.NewTicker(k.cfg.Flush)
	defer flush.Stop()
	caughtUp := false
	for ctx.Err() == nil {
		// Read in bursts, once a flush: what is there, at once (a pull
		// waiting for more would be served an event at a time, beside
		// the hot path's own deliveries).
		batch, berr := cons.FetchNoWait(defaultStatsBatch)
		n, gap := 0, false
		for m := range messagesOf(batch) {
			if gap {
				continue // read again from the consumer made anew
			}
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			n++
			if meta.Sequence.Consumer != delivered+1 {
				// A message lost between the server and this client (a
				// slow consumer's, a reconnection's), or a consumer the
				// server lost and made again.
				gap, n = true, n-1
				continue
			}
			delivered = meta.Sequence.Consumer
			caughtUp = meta.NumPending == 0
			if err := s.foldMsg(ctx, m.Subject(), m.Data(), meta.Sequence.Stream); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		if berr == nil {
			berr = batch.Error()
		}
		if gap || berr != nil && !errors.Is(berr, jetstream.ErrNoMessages) {
			if reopened && n == 0 {
				return fmt.Errorf("fetch: %v (gap %v)", berr, gap) // made again and still nothing: the session starts over
			}
			k.log.Info("statistics consumer made again", "after", s.last, "gap", gap, "err", berr)
			if err := open(); err != nil {
				return err
			}
			reopened = true
			continue
		}
		reopened = false
		if n == 0 {
			caughtUp = true
		}
		if caughtUp && k.live != nil {
			k.live.caughtUp(time.Now())
		}
		if n < defaultStatsBatch { // caught up: the next burst after the flush
			select {
			case <-ctx.Done():
				return nil
			case <-flush.C:
			}
			if err := s.flush(ctx, caughtUp); err != nil {
				return err
			}
			continue
		}
		select {
		case <-flush.C:
			if err := s.flush(ctx, caughtUp); err != nil {
				return err
			}
		default:
		}
	}
	return nil
}

// messagesOf is batch's messages, none if there is no batch (its fetch
// failed): a closed channel.
func messagesOf(batch jetstream.MessageBatch) <-chan jetstream.Msg {
	if batch == nil {
		none := make(chan jetstream.Msg)
		close(none)
		return none
	}
	return batch.Messages()
}

func (s *statsSession) readCursor(ctx context.Context) (*StatsCursor, error) {
	e, err := s.buckets[len(s.buckets)-1].Get(ctx, streams.StatsCursorKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c StatsCursor
	if err := streams.Unmarshal(e.Value(), &c); err != nil {
		s.k.log.Warn("statistics checkpoint does not decode: rebuilding from the log", "err", err)
		return nil, nil
	}
	return &c, nil
}

// seedWaiting learns since when the queued jobs wait, from their records.
func (s *statsSession) seedWaiting(ctx context.Context) error {
	return s.k.store.Scan(ctx, func(j *domain.Job) {
		if commands.InQueue(j.State) && !j.QueuedAt.IsZero() {
			s.fold.SeedWaiting(j.ID, j.Spec.Namespace, j.Spec.Queue, j.QueuedAt)
		}
	})
}

// foldMsg folds one event of the log (at stream sequence seq).
func (s *statsSession) foldMsg(ctx context.Context, subject string, data []byte, seq uint64) error {
	if seq <= s.last {
		return nil
	}
	// jetflow.ev.<ns>.<queue>.<type>.<id>
	rest, ok := strings.CutPrefix(subject, streams.EventsPrefix+".")
	nsTok, rest, ok1 := strings.Cut(rest, ".")
	q, _, ok2 := strings.Cut(rest, ".")
	ev := &s.ev
	if !ok || !ok1 || !ok2 || streams.DecodeEventHead(data, ev) != nil { // the move only: no spec, payload or result
		s.last = seq
		return nil
	}
	if l := s.k.live; l != nil {
		l.moved(ev.JobID, ev.To, seq)
	}
	ns, _ := streams.ParseToken(nsTok)
	effect, series := s.fold.Fold(ev, ns, q)
	now := time.Now()
	var starts [len(projections.StatsResolutions)]int64
	for ri, r := range projections.StatsResolutions {
		start := ev.Time.Truncate(r.Step)
		starts[ri] = start.Unix()
		if now.Sub(start) > r.Keep {
			starts[ri] = -1 // older than the resolution keeps: never read
		}
	}
	for _, sr := range series {
		if sr == nil {
			continue
		}
		depth, oldest := sr.Gauges()
		cur := s.cur[sr]
		if cur == nil {
			cur = &[len(projections.StatsResolutions)]curSlot{}
			s.cur[sr] = cur
		}
		for ri, start := range starts {
			if start < 0 {
				continue
			}
			c := &cur[ri]
			if c.st == nil || c.start != start {
				st, err := s.slot(ctx, slotRef{res: ri, dim: sr.Dim, start: start})
				if err != nil {
					return err
				}
				c.start, c.st = start, st
			}
			st := c.st
			if seq > st.slot.UpTo {
				st.slot.Add(effect)
				st.slot.UpTo = seq
			}
			st.slot.Depth, st.slot.OldestSince = depth, oldest
			st.dirty = true
		}
	}
	s.last, s.lastAt = seq, ev.Time
	return nil
}

// curSlot is the slot a series' last event fell in, at one resolution.
type curSlot struct {
	start int64
	st    *slotState
}

// slot is a slot as its bucket has it (read once, then kept in memory).
func (s *statsSession) slot(ctx context.Context, ref slotRef) (*slotState, error) {
	if st := s.slots[ref]; st != nil {
		return st, nil
	}
	st := &slotState{}
	e, err := s.buckets[ref.res].Get(ctx, streams.StatsKey(ref.dim.Namespace, ref.dim.Queue, time.Unix(ref.start, 0)))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, err
	default:
		if err := streams.Unmarshal(e.Value(), &st.slot); err != nil {
			st.slot = projections.StatsSlot{} // counted again from what is read next
		}
	}
	s.slots[ref] = st
	return st, nil
}

// flush writes the slots that changed, then the checkpoint. Once caught up
// with the log, a series with jobs queued gets a slot for now even without
// an event in it, so that its depth is charted while nothing moves.
func (s *statsSession) flush(ctx context.Context, caughtUp bool) error {
	now := time.Now()
	if caughtUp {
		for d := range s.fold.Depths() {
			for ri, r := range projections.StatsResolutions {
				ref := slotRef{res: ri, dim: d, start: now.Truncate(r.Step).Unix()}
				if s.slots[ref] != nil {
					continue
				}
				st, err := s.slot(ctx, ref)
				if err != nil {
					return err
				}
				st.slot.Depth, st.slot.OldestSince = s.fold.Gauges(d)
				st.dirty = true
			}
		}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	sem := make(chan struct{}, 16)
	for ref, st := range s.slots {
		if !st.dirty {
			continue
		}
		b, err := streams.Marshal(&st.slot)
		if err != nil {
			return err
		}
		st.dirty = false
		wg.Add(1)
		sem <- struct{}{}
		go func(ref slotRef, b []byte) {
			defer wg.Done()
			defer func() { <-sem }()
			if _, err := s.buckets[ref.res].Put(ctx, streams.StatsKey(ref.dim.Namespace, ref.dim.Queue, time.Unix(ref.start, 0)), b); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}(ref, b)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("write statistics: %w", err)
	}
	// Forget slots that no event will fall in any more (a late one is read
	// again from its bucket).
	for ref := range s.slots {
		r := projections.StatsResolutions[ref.res]
		if now.Sub(time.Unix(ref.start, 0)) > 2*r.Step+time.Minute {
			delete(s.slots, ref)
			clear(s.cur) // it may point at a slot forgotten: looked up again
		}
	}
	if s.last == s.k.folded.Load() && !s.wrote.IsZero() && now.Sub(s.wrote) < statsHeartbeatCursor {
		return nil
	}
	c := StatsCursor{Seq: s.last, Time: s.lastAt, Depths: map[string]int{}, Wrote: now.UTC()}
	for d, n := range s.fold.Depths() {
		c.Depths[dimKey(d)] = n
	}
	b, err := streams.Marshal(&c)
	if err != nil {
		return err
	}
	if _, err := s.buckets[len(s.buckets)-1].Put(ctx, streams.StatsCursorKey, b); err != nil {
		return fmt.Errorf("write statistics checkpoint: %w", err)
	}
	s.wrote = now
	s.k.folded.Store(s.last)
	return nil
}
