package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
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
	// purgeTries is how many passes in a row may fail on one job (its
	// record not read, its purge refused by an error) before it is left
	// to the next full scan.
	purgeTries = 3
	// purgeAhead bounds how far ahead a job found in the log may be due
	// and still be kept until then (the engine's clock ahead of the
	// server's by more than the slack); one due later is left to the
	// next full scan.
	purgeAhead = time.Hour
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

// Namespaces reads the namespaces' settings (the registry).
type Namespaces interface {
	// Namespaces lists the namespaces whose settings were set.
	Namespaces(ctx context.Context) ([]*domain.NamespaceRecord, error)
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
// bucket: at the start of each term, once per FullScan, and when the
// namespaces' own retentions are not those of the last full scan (one
// changed, or a namespace set one). Between two, a pass reads only the
// log's events that came of age since the last pass: for the default
// retention and each namespace's own, from where its read stopped, the
// jobs of the namespaces of that retention that an event moved into a
// terminal state longer ago than it. A bucket of millions of records is
// then read once a day, not every pass. Each job found is read again and
// purged only if it is not a child and is still expired (Store.Purge
// decides on the log), so a read that finds too much costs a read. A
// child found is the cue to look at its parent again (refused while the
// child ran). A job whose read or purge fails is tried again in the next
// passes, up to purgeTries; one found in the log but not due yet by the
// engine's clock (clocks apart by more than the slack) is kept until it
// is, up to purgeAhead. What a read misses (a job whose events the log's
// own retention dropped) and what those bounds leave wait for the next
// full scan.
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
	set     map[string]time.Duration // the namespaces' own retentions, as the last full scan read them
	tokens  map[string]string        // the subject token of each of those namespaces -> the namespace
	fails   map[string]int           // jobs whose read or purge failed, and how many passes in a row
	later   map[string]time.Time     // jobs found in the log not due yet, and when they are
}

// NewPurger returns a Purger.
func NewPurger(s *store.Store, cfg PurgerConfig) *Purger {
	cfg = cfg.withDefaults()
	p := &Purger{store: s, cfg: cfg, log: logger(cfg.Log, "purger"), fails: map[string]int{}, later: map[string]time.Time{}}
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

// Queued is how many expired ids found are left to purge.
func (p *Purger) Queued() int { return p.queued() }

// queued is how many expired ids found are left to purge.
func (p *Purger) queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// retentions reads the retention of every namespace that sets one (the
// others have the default).
func (p *Purger) retentions(ctx context.Context) (map[string]time.Duration, error) {
	recs, err := p.cfg.Namespaces.Namespaces(ctx)
	if err != nil {
		return nil, fmt.Errorf("purger: read the namespaces: %w", err)
	}
	out := map[string]time.Duration{}
	for _, rec := range recs {
		if rec.Settings.Retention > 0 {
			out[rec.Name] = time.Duration(rec.Settings.Retention)
		}
	}
	return out, nil
}

// retentionIn is namespace ns's retention in set (retentions).
func (p *Purger) retentionIn(set map[string]time.Duration, ns string) time.Duration {
	if r, ok := set[ns]; ok {
		return r
	}
	return p.cfg.Retention
}

// slack is purgeSlack for retention r.
func slack(r time.Duration) time.Duration { return min(purgeSlack, r/2) }

// Pass purges up to Max expired jobs once and returns how many it purged.
// It reads the namespaces' retentions once: a registry that does not
// answer purges nothing (the default might be shorter than a namespace's
// own), and the pass's jobs stay queued.
func (p *Purger) Pass(ctx context.Context) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	set, err := p.retentions(ctx)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	p.dueNow(now)
	if len(p.queue) == 0 {
		if p.cursors == nil || now.Sub(p.scanned) >= p.cfg.FullScan || !maps.Equal(set, p.set) {
			// A retention changed (or a namespace has one of its own now):
			// its jobs may lie behind where the read of the new one is.
			err = p.scan(ctx, set)
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
	parents := map[string]bool{}
	for i, id := range ids {
		if n >= p.cfg.Max || ctx.Err() != nil {
			// Not looked at: first in the next pass (the log's read is
			// past them).
			p.queue = append(slices.Clone(ids[i:]), p.queue...)
			break
		}
		m, err := p.purge(ctx, id, set, parents)
		n += m
		if err != nil {
			// Tried again in the next pass, first, with what this one
			// did not reach; after purgeTries, left to the full scan.
			rest := ids[i:]
			if ctx.Err() != nil {
				err = ctx.Err()
			} else if p.fails[id]++; p.fails[id] >= purgeTries {
				delete(p.fails, id)
				rest = rest[1:]
				p.log.Warn("purge: left to the next full scan", "job", id, "tries", purgeTries, "err", err)
			}
			p.queue = append(slices.Clone(rest), p.queue...)
			p.purged.Add(int64(n))
			return n, err
		}
		delete(p.fails, id)
	}
	p.purged.Add(int64(n))
	if n > 0 {
		p.log.Info("purged expired jobs", "jobs", n)
	}
	return n, ctx.Err()
}

// purge purges job id if it is still there, not a child, and expired under
// its namespace's retention in set (found a while ago, or in the log: the
// retention may have been raised since). A child's parent, refused while
// the child ran, is queued again (once in a pass: parents). An error is
// one to try again on.
func (p *Purger) purge(ctx context.Context, id string, set map[string]time.Duration, parents map[string]bool) (int, error) {
	snap, err := p.store.Record(ctx, id)
	switch {
	case errors.Is(err, commands.ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("purge: read job %s: %w", id, err)
	}
	if parent := snap.Job.Spec.Parent; parent != "" {
		if snap.Job.State.Terminal() && !parents[parent] {
			parents[parent] = true
			p.queue = append(p.queue, parent)
		}
		return 0, nil
	}
	r, now := p.retentionIn(set, snap.Job.Spec.Namespace), time.Now()
	if !commands.Expired(snap.Job, r, now) {
		p.notYet(snap.Job, r, now)
		return 0, nil
	}
	n, err := p.store.Purge(ctx, id, "retention")
	switch {
	case err == nil, errors.Is(err, commands.ErrNotFound), errors.Is(err, commands.ErrInvalidTransition):
		return n, nil
	default:
		return n, fmt.Errorf("purge: job %s: %w", id, err)
	}
}

// notYet keeps a terminal job found that is not expired yet until it is,
// when that is within purgeAhead. A job found in the log was stored by the
// server longer ago than its retention and the slack; one that ended
// later by the engine's clock shows the two clocks apart, and no later
// event of it would bring it back. One found by a scan that is not due
// (a retention raised since) is found again by the reads of the log from
// the scan that the change makes.
func (p *Purger) notYet(j *domain.Job, r time.Duration, now time.Time) {
	end := j.FinishedAt
	if end.IsZero() {
		end = j.UpdatedAt
	}
	due := end.Add(r)
	if !j.State.Terminal() || due.Sub(now) > purgeAhead || len(p.later) >= p.cfg.Max*purgeScanFactor {
		return
	}
	if _, ok := p.later[j.ID]; !ok {
		p.log.Info("purge: not due yet, kept until it is (a retention raised, or the engine's clock ahead of the server's)", "job", j.ID, "due", due)
	}
	p.later[j.ID] = due
}

// dueNow queues the jobs kept by notYet that are due at now.
func (p *Purger) dueNow(now time.Time) {
	for id, due := range p.later {
		if !now.Before(due) {
			delete(p.later, id)
			p.queue = append(p.queue, id)
		}
	}
}

// scan reads the whole jobs bucket for the oldest expired jobs, under the
// namespaces' retentions set. When it found them all (fewer than it
// keeps), the log is read from here on: for the default retention and
// each namespace's own, from the first event stored after what the scan
// took as expired.
func (p *Purger) scan(ctx context.Context, set map[string]time.Duration) error {
	began := time.Now()
	ids, err := p.store.Expired(ctx, func(ns string) time.Duration { return p.retentionIn(set, ns) }, "", p.cfg.Max*purgeScanFactor)
	if err != nil {
		return err
	}
	p.scans.Add(1)
	p.queue, p.cursors = ids, nil
	if len(ids) == p.cfg.Max*purgeScanFactor {
		return nil // a backlog: scanned again once it is worked off
	}
	cursors := map[time.Duration]uint64{}
	for _, r := range append(slices.Collect(maps.Values(set)), p.cfg.Retention) {
		if _, ok := cursors[r]; ok {
			continue
		}
		seq, err := p.store.LogSeqAt(ctx, began.Add(-r-slack(r)))
		if err != nil {
			return nil // the queue stands; the next pass scans again
		}
		cursors[r] = seq
	}
	p.cursors, p.scanned, p.set, p.tokens = cursors, began, set, map[string]string{}
	for ns := range set {
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
		next, err := p.store.EndedAfter(ctx, from, now.Add(-r-slack(r)), limit-len(p.queue), func(id, subject string) bool {
			ns := p.tokens[nsToken(subject)] // "": a namespace of the default retention
			if ns == "" && r != p.cfg.Retention || ns != "" && p.set[ns] != r {
				return false // another retention's read takes it
			}
			p.queue = append(p.queue, id)
			return true
		})
		if err != nil {
			return err
		}
		p.cursors[r] = next
	}
	return nil
}

// nsToken is the namespace token of a job event's subject
// (jetflow.ev.<ns>.<queue>.<type>.<id>).
func nsToken(subject string) string {
	rest := strings.TrimPrefix(subject, streams.EventsPrefix+".")
	ns, _, _ := strings.Cut(rest, ".")
	return ns
}
