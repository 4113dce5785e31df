package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Defaults of PurgerConfig.
const (
	defaultPurgeInterval = 10 * time.Minute
	DefaultPurgeMax      = 1000
	// defaultPurgeFullScan is how often the Purger reads the whole jobs
	// bucket again; between two such scans it reads the log.
	defaultPurgeFullScan = 24 * time.Hour
	// purgeScanFactor: a scan of the jobs bucket keeps up to Max times
	// this many expired ids, which the passes after it work off without
	// scanning again (a backlog of a million costs ten scans, not a
	// thousand).
	purgeScanFactor = 100
	// purgeSlack is how much longer than its retention a job ended before
	// a read of the log takes it (half the retention when that is
	// shorter): the log's time of an event and the time its job ended
	// (the engine's clock) may differ a little.
	purgeSlack = time.Minute
)

// PurgerConfig configures the Purger. Zero values are the defaults.
type PurgerConfig struct {
	// Retention is how long a terminal job is kept in a namespace that sets
	// none (default commands.DefaultRetention).
	Retention time.Duration
	Interval  time.Duration // how often a pass runs
	// FullScan is how often a pass reads the whole jobs bucket (default
	// a day; also at the start of each term, and when a namespace's
	// retention changes). The passes between read only the log's events
	// that came of age since the last one.
	FullScan time.Duration
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
	orDefault(&c.FullScan, defaultPurgeFullScan)
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
// Each pass purges at most Max jobs, one at a time; while passes find a
// full Max, the next follows after a pause as long as the pass, so a
// backlog is drained without taking over.
//
// What to purge is found in two ways. A full scan reads the whole jobs
// bucket: at the start of each term, once per FullScan, and when a
// namespace's retention changed. Between two, a pass reads only the log's
// events that came of age since the last pass: for each retention in use,
// from where it stopped, the jobs that ended (a terminal move) longer ago
// than that retention. A bucket of millions of records is then read once
// a day, not every pass. Each job found is read again and purged only if
// it is still terminal and expired (Store.Purge decides on the log), so a
// read that finds too much costs a read; one that finds too little (a
// parent whose children had not all ended, a namespace whose retention
// was raised and lowered again) leaves the job to the next full scan.
//
// One Purger runs at a time, under a Leader.
type Purger struct {
	periodic
	store  *store.Store
	cfg    PurgerConfig
	log    *slog.Logger
	purged atomic.Int64
	scans  atomic.Int64

	mu    sync.Mutex
	queue []string // expired ids found and not purged yet, oldest first
	// cursors: for each retention in use, the log's sequence its next
	// read starts at; nil when a full scan is due.
	cursors map[time.Duration]uint64
	scanned time.Time                // when the last full scan began
	known   map[string]time.Duration // namespace -> its retention, as the last full scan or pass saw it
	tokens  map[string]string        // a namespace's subject token -> the namespace
}

// NewPurger returns a Purger.
func NewPurger(s *store.Store, cfg PurgerConfig) *Purger {
	cfg = cfg.withDefaults()
	p := &Purger{store: s, cfg: cfg, log: logger(cfg.Log, "purger")}
	p.periodic = periodic{every: cfg.Interval, log: p.log, check: cfg.validate, pass: p.drain, begin: p.rescan}
	return p
}

// Purged is how many jobs this purger purged.
func (p *Purger) Purged() int64 { return p.purged.Load() }

// Scans is how many full scans of the jobs bucket this purger made.
func (p *Purger) Scans() int64 { return p.scans.Load() }

// rescan makes the next pass that finds its queue empty a full scan (a
// new term: what the last one knew may be stale).
func (p *Purger) rescan() {
	p.mu.Lock()
	p.cursors = nil
	p.mu.Unlock()
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

// queued is how many expired ids found are left to purge.
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

// slack is purgeSlack for retention r.
func slack(r time.Duration) time.Duration { return min(purgeSlack, r/2) }

// Pass purges up to Max expired jobs once and returns how many it purged.
func (p *Purger) Pass(ctx context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 {
		var err error
		if p.cursors == nil || time.Since(p.scanned) >= p.cfg.FullScan || p.retentionChanged(ctx) {
			err = p.scan(ctx)
		} else {
			err = p.readLog(ctx)
		}
		if err != nil {
			return 0, err
		}
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
		// Found a while ago, or in the log: still there, not a child, and
		// still expired (its namespace's retention may have been raised
		// since)?
		snap, err := p.store.Record(ctx, id)
		if err != nil {
			if !errors.Is(err, commands.ErrNotFound) && ctx.Err() == nil {
				p.log.Warn("purge: read the record", "job", id, "err", err)
			}
			continue
		}
		ns := snap.Job.Spec.Namespace
		r := p.retention(ctx, ns)
		p.learn(ns, r)
		if snap.Job.Spec.Parent != "" || !commands.Expired(snap.Job, r, time.Now()) {
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

// scan reads the whole jobs bucket for the oldest expired jobs. When it
// found them all (fewer than it keeps), the log is read from here on: for
// each retention in use, from the first event stored after what the scan
// took as expired.
func (p *Purger) scan(ctx context.Context) error {
	began := time.Now()
	seen := map[string]time.Duration{}
	ids, err := p.store.Expired(ctx, func(ns string) time.Duration {
		r := p.retention(ctx, ns)
		seen[ns] = r
		return r
	}, "", p.cfg.Max*purgeScanFactor)
	if err != nil {
		return err
	}
	p.scans.Add(1)
	p.queue, p.cursors = ids, nil
	if len(ids) == p.cfg.Max*purgeScanFactor {
		return nil // a backlog: scanned again once it is worked off
	}
	cursors := map[time.Duration]uint64{}
	for _, r := range append(mapValues(seen), p.cfg.Retention) {
		if _, ok := cursors[r]; ok {
			continue
		}
		seq, err := p.store.LogSeqAt(ctx, began.Add(-r-slack(r)))
		if err != nil {
			return nil // the queue stands; the next pass scans again
		}
		cursors[r] = seq
	}
	p.cursors, p.scanned, p.known, p.tokens = cursors, began, seen, map[string]string{}
	for ns := range seen {
		p.tokens[streams.Token(ns)] = ns
	}
	return nil
}

// readLog reads, for each retention in use, the log's jobs that ended
// longer ago than it since the last read, up to what the queue keeps.
func (p *Purger) readLog(ctx context.Context) error {
	now := time.Now()
	limit := p.cfg.Max * purgeScanFactor
	for r, from := range p.cursors {
		if len(p.queue) >= limit {
			break
		}
		next, err := p.store.EndedAfter(ctx, from, now.Add(-r-slack(r)), limit-len(p.queue), func(id, subject string) {
			if ns, ok := p.tokens[nsToken(subject)]; ok && p.known[ns] != r {
				return // another retention's read takes it
			}
			p.queue = append(p.queue, id) // a namespace not known yet: the record tells
		})
		if err != nil {
			return err
		}
		p.cursors[r] = next
	}
	return nil
}

// learn notes namespace ns's retention r, seen on a job's record: a
// namespace whose retention no read of the log follows yet (a new one
// with its own retention) makes the next pass a full scan.
func (p *Purger) learn(ns string, r time.Duration) {
	if p.cursors == nil {
		return
	}
	if _, ok := p.cursors[r]; !ok {
		p.cursors = nil
		return
	}
	p.known[ns], p.tokens[streams.Token(ns)] = r, ns
}

// retentionChanged reports whether a namespace's retention is no longer
// the one the reads of the log follow it under: its jobs may sit behind
// where the read of its new retention is.
func (p *Purger) retentionChanged(ctx context.Context) bool {
	for ns, r := range p.known {
		if p.retention(ctx, ns) != r {
			return true
		}
	}
	return false
}

// nsToken is the namespace token of a job event's subject
// (jetflow.ev.<ns>.<queue>.<type>.<id>).
func nsToken(subject string) string {
	rest := strings.TrimPrefix(subject, streams.EventsPrefix+".")
	ns, _, _ := strings.Cut(rest, ".")
	return ns
}

func mapValues[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
