package engine

import (
	"container/heap"
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/lifecycle"
	"github.com/jetflow/jetflow/streams"
)

// Defaults of PurgerConfig.
const (
	DefaultPurgeInterval = 10 * time.Minute
	DefaultPurgeMax      = 1000
	// purgeScanFactor: a scan of the jobs bucket keeps up to Max times
	// this many expired ids, which the passes after it work off without
	// scanning again (a backlog of a million costs ten scans, not a
	// thousand).
	purgeScanFactor = 100
)

// PurgerConfig configures the Purger. Zero values are the defaults.
type PurgerConfig struct {
	// Retention is how long a terminal job is kept in a namespace that sets
	// none (default commands.DefaultRetention).
	Retention time.Duration
	Interval  time.Duration // how often the jobs bucket is scanned
	// Max bounds the jobs purged in one pass (children count), so that a
	// backlog is worked off over several passes. A parent is purged with
	// all its children, even past Max.
	Max int
	Log *slog.Logger
}

func (c PurgerConfig) withDefaults() PurgerConfig {
	if c.Retention <= 0 {
		c.Retention = commands.DefaultRetention
	}
	if c.Interval <= 0 {
		c.Interval = DefaultPurgeInterval
	}
	if c.Max <= 0 {
		c.Max = DefaultPurgeMax
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

// Purger purges terminal jobs older than their namespace's retention
// (Store.Purge): their record, files and queue leftovers go, job.purged
// stays in the log. Children are purged with their parent, never alone.
// Each pass scans the jobs bucket and purges at most Max jobs, one at a
// time; while passes find a full Max, the next follows after a pause as
// long as the pass, so a backlog is drained without taking over.
//
// One Purger runs at a time, under a Leader.
type Purger struct {
	store  *Store
	cfg    PurgerConfig
	log    *slog.Logger
	life   lifecycle.Loop
	purged atomic.Int64

	mu    sync.Mutex
	queue []string // expired ids of the last scan not purged yet, oldest first
}

// NewPurger returns a Purger.
func NewPurger(store *Store, cfg PurgerConfig) *Purger {
	cfg = cfg.withDefaults()
	return &Purger{store: store, cfg: cfg, log: cfg.Log.With("component", "purger")}
}

// Purged is how many jobs this purger purged.
func (p *Purger) Purged() int64 { return p.purged.Load() }

// Start starts purging. Idempotent.
func (p *Purger) Start(context.Context) error {
	p.life.EveryLogged(p.cfg.Interval, p.log, p.drain)
	return nil
}

// drain runs passes until one finds fewer than Max jobs to purge. Between
// two it pauses as long as the last one took, so that a backlog is worked
// off at once but takes at most half of the purger's time, and of what its
// reads and deletes cost the server.
func (p *Purger) drain(ctx context.Context) error {
	for {
		start := time.Now()
		n, err := p.Pass(ctx)
		if err != nil || n < p.cfg.Max && p.queued() == 0 {
			return err
		}
		if !sleepCtx(ctx, time.Since(start)) {
			return ctx.Err()
		}
	}
}

// queued is how many expired ids of the last scan are left to purge.
func (p *Purger) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// Stop stops purging. Idempotent.
func (p *Purger) Stop(ctx context.Context) { p.life.Stop(ctx) }

// retention is the retention of namespace ns.
func (p *Purger) retention(ctx context.Context, ns string) time.Duration {
	if rec, err := p.store.Types.Namespace(ctx, ns); err == nil && rec != nil && rec.Settings.Retention > 0 {
		return time.Duration(rec.Settings.Retention)
	}
	return p.cfg.Retention
}

// Pass purges up to Max expired jobs once and returns how many it purged.
func (p *Purger) Pass(ctx context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		ids, err := Expired(ctx, p.store, func(ns string) time.Duration { return p.retention(ctx, ns) }, "", p.cfg.Max*purgeScanFactor)
		if err != nil {
			return 0, err
		}
		p.queue = ids
	}
	if len(p.queue) == 0 {
		return 0, nil
	}
	ids := p.queue[:min(len(p.queue), p.cfg.Max)]
	p.queue = p.queue[len(ids):]
	fs, err := p.store.Files(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if n >= p.cfg.Max || ctx.Err() != nil {
			break
		}
		// Scanned a while ago: still there and still expired (its
		// namespace's retention may have been raised since)?
		snap, err := p.store.Get(ctx, id)
		if err != nil {
			if !errors.Is(err, commands.ErrNotFound) && ctx.Err() == nil {
				p.log.Warn("purge: read the record", "job", id, "err", err)
			}
			continue
		}
		if !commands.Expired(snap.Job, p.retention(ctx, snap.Job.Spec.Namespace), time.Now()) {
			continue
		}
		m, err := p.store.purge(ctx, fs, id, "retention")
		n += m
		switch {
		case err == nil, errors.Is(err, commands.ErrNotFound), errors.Is(err, commands.ErrInvalidTransition):
		default:
			p.log.Warn("purge", "job", id, "err", err)
		}
	}
	p.purged.Add(int64(n))
	if n > 0 {
		p.log.Info("purged expired jobs", "jobs", n)
	}
	return n, ctx.Err()
}

// Expired lists the ids of terminal jobs older than the retention of their
// namespace (ns: only that one, if not empty), oldest first, at most max.
// Children are left out: they are purged with their parent. It reads the
// whole bucket once and keeps only the max oldest, so a backlog of any size
// costs one scan and max entries of memory.
func Expired(ctx context.Context, s *Store, retention func(ns string) time.Duration, ns string, max int) ([]string, error) {
	w, err := s.KV.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var oldest newestFirst
	now := time.Now()
	per := map[string]time.Duration{}
	for e := range w.Updates() {
		if e == nil {
			break
		}
		j, err := streams.DecodeJob(e.Value())
		if err != nil || !j.State.Terminal() || j.Spec.Parent != "" || (ns != "" && j.Spec.Namespace != ns) {
			continue
		}
		r, ok := per[j.Spec.Namespace]
		if !ok {
			r = retention(j.Spec.Namespace)
			per[j.Spec.Namespace] = r
		}
		if !commands.Expired(j, r, now) {
			continue
		}
		c := expired{j.ID, j.FinishedAt}
		switch {
		case len(oldest) < max:
			heap.Push(&oldest, c)
		case c.end.Before(oldest[0].end):
			oldest[0] = c
			heap.Fix(&oldest, 0)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	ids := make([]string, len(oldest))
	for i := len(ids) - 1; i >= 0; i-- {
		ids[i] = heap.Pop(&oldest).(expired).id
	}
	return ids, nil
}

type expired struct {
	id  string
	end time.Time
}

// newestFirst is a heap of expired jobs whose top is the most recent one:
// the first to give way to an older one.
type newestFirst []expired

func (h newestFirst) Len() int           { return len(h) }
func (h newestFirst) Less(i, k int) bool { return h[i].end.After(h[k].end) }
func (h newestFirst) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *newestFirst) Push(x any)        { *h = append(*h, x.(expired)) }
func (h *newestFirst) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
