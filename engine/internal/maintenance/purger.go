package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
)

// Defaults of PurgerConfig.
const (
	defaultPurgeInterval = 10 * time.Minute
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
	// Namespaces are the namespaces' settings (their retention).
	Namespaces Namespaces
	Log        *slog.Logger
}

// Namespaces reads a namespace's settings (the registry).
type Namespaces interface {
	Namespace(ctx context.Context, ns string) (*domain.NamespaceRecord, error)
}

func (c PurgerConfig) withDefaults() PurgerConfig {
	orDefault(&c.Retention, commands.DefaultRetention)
	orDefault(&c.Interval, defaultPurgeInterval)
	orDefault(&c.Max, DefaultPurgeMax)
	return c
}

func (c PurgerConfig) validate() error {
	if c.Namespaces == nil {
		return errors.New("purger: no namespaces")
	}
	return nil
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
	periodic
	store  *store.Store
	cfg    PurgerConfig
	log    *slog.Logger
	purged atomic.Int64

	mu    sync.Mutex
	queue []string // expired ids of the last scan not purged yet, oldest first
}

// NewPurger returns a Purger.
func NewPurger(s *store.Store, cfg PurgerConfig) *Purger {
	cfg = cfg.withDefaults()
	p := &Purger{store: s, cfg: cfg, log: logger(cfg.Log, "purger")}
	p.periodic = periodic{every: cfg.Interval, log: p.log, check: cfg.validate, pass: p.drain}
	return p
}

// Purged is how many jobs this purger purged.
func (p *Purger) Purged() int64 { return p.purged.Load() }

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

// retention is the retention of namespace ns.
func (p *Purger) retention(ctx context.Context, ns string) time.Duration {
	if rec, err := p.cfg.Namespaces.Namespace(ctx, ns); err == nil && rec != nil && rec.Settings.Retention > 0 {
		return time.Duration(rec.Settings.Retention)
	}
	return p.cfg.Retention
}

// Pass purges up to Max expired jobs once and returns how many it purged.
func (p *Purger) Pass(ctx context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		ids, err := p.store.Expired(ctx, func(ns string) time.Duration { return p.retention(ctx, ns) }, "", p.cfg.Max*purgeScanFactor)
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
	n := 0
	for _, id := range ids {
		if n >= p.cfg.Max || ctx.Err() != nil {
			break
		}
		// Scanned a while ago: still there and still expired (its
		// namespace's retention may have been raised since)?
		snap, err := p.store.Record(ctx, id)
		if err != nil {
			if !errors.Is(err, commands.ErrNotFound) && ctx.Err() == nil {
				p.log.Warn("purge: read the record", "job", id, "err", err)
			}
			continue
		}
		if !commands.Expired(snap.Job, p.retention(ctx, snap.Job.Spec.Namespace), time.Now()) {
			continue
		}
		m, err := p.store.Purge(ctx, id, "retention")
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
