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
	"github.com/jetflow/jetflow/internal/tracing"
)

// Defaults of ReaperConfig.
const (
	defaultReaperInterval  = 10 * time.Second
	defaultReaperGrace     = time.Minute
	defaultStallTimeout    = time.Hour
	defaultReaperReconcile = 5 * time.Minute
	defaultReaperLooks     = 1000
	defaultReaperLive      = 1 << 20
)

// ReaperConfig configures the Reaper.
type ReaperConfig struct {
	Interval time.Duration // how often it looks for jobs that are due
	// Grace is added to a job's execution timeout before the reaper fails
	// it: a worker that still holds the job has its handler cancelled at the
	// timeout and records the failure itself well within it.
	Grace time.Duration
	// StallTimeout fails a waiting parent none of whose pieces finished for
	// this long, unless its fan-out set its own.
	StallTimeout time.Duration
	// Reconcile is how often a Reaper that follows the log (Follow) reads
	// every record all the same (default 5 min): what its list of live
	// jobs missed is found then.
	Reconcile time.Duration
	// Looks is the most jobs a pass reads one by one (default 1000); with
	// more to look at, or more than an eighth of the records the last full
	// read found (lookCost), it reads the whole bucket instead.
	Looks int
	// Live is the most live jobs the list keeps (default 1,048,576); with
	// more, every pass reads the whole bucket until they are half as many.
	Live int
	Log  *slog.Logger
}

func (c ReaperConfig) withDefaults() ReaperConfig {
	orDefault(&c.Interval, defaultReaperInterval)
	orDefault(&c.Grace, defaultReaperGrace)
	orDefault(&c.StallTimeout, defaultStallTimeout)
	orDefault(&c.Reconcile, defaultReaperReconcile)
	orDefault(&c.Looks, defaultReaperLooks)
	orDefault(&c.Live, defaultReaperLive)
	return c
}

func (c ReaperConfig) validate() error { return nil }

// Reaper ends jobs that nobody else will: a claimed or running job past its
// execution timeout (plus the grace) that no worker reported on, a queued
// job past its queue timeout, a waiting parent whose pieces stalled
// (job.stalled); commands.Overdue and commands.Reap decide. Every write is
// a revision-checked transition decided on the job as it is then, so a job
// that finished while the reaper looked is never overwritten.
//
// Every Interval it looks for the jobs that are due. On its own it reads
// every record in the jobs bucket to find them. Following the log (Follow:
// the StatsKeeper's reading of it, which the engine runs beside it) it
// keeps the list of live jobs and when each is due (commands.DueAt), and
// reads only the jobs that may be due; it reads the whole bucket at the
// first pass of a leader term, settleRead after it, then every Reconcile,
// when there are more than Looks jobs to look at, and while the feed is
// behind the log.
//
// One Reaper runs at a time, under a Leader.
type Reaper struct {
	periodic
	store *store.Store
	cfg   ReaperConfig
	log   *slog.Logger

	live  *liveJobs // nil: not following the log
	stale time.Duration

	mu       sync.Mutex // a pass of an earlier term may outlive its Stop
	nextFull time.Time  // when a pass reads the whole bucket (zero: the next)
	lastLive int        // live jobs the last read of the bucket found
	lastRead int        // records it read

	fullReads, looks atomic.Int64 // what passes read (tests)
}

// lookCost is what reading one job (Store.Current: its record and its
// last event, two requests) costs in records of a read of the whole bucket
// (one delivery each): a pass with more looks than the last read's records
// over lookCost reads the bucket instead. BenchmarkReaperReads on the
// 2-core machine (2026-11-30): a look 45-48 µs, a record of a read 5.6-7.2.
const lookCost = 8

// settleRead is when, after a leader term's first read of the whole
// bucket, the Reaper reads it once more: a record behind its event then
// (its writer crashed between the two) is repaired by the Projector within
// its lag and ack wait, with no event the list would see.
const settleRead = 30 * time.Second

// NewReaper returns a Reaper.
func NewReaper(s *store.Store, cfg ReaperConfig) *Reaper {
	cfg = cfg.withDefaults()
	r := &Reaper{store: s, cfg: cfg, log: logger(cfg.Log, "reaper")}
	r.periodic = periodic{every: cfg.Interval, log: r.log, check: cfg.validate, pass: r.Scan, begin: r.begin}
	return r
}

// begin starts a leader term: the first pass reads the whole bucket, and
// the list starts empty (what an earlier term left in it may be long gone).
func (r *Reaper) begin() {
	r.mu.Lock()
	r.nextFull = time.Time{}
	r.mu.Unlock()
	if r.live != nil {
		r.live.clear()
	}
}

// Follow makes r keep its list of live jobs from the events k reads. Call
// it before either starts; both run under the same Leader.
func (r *Reaper) Follow(k *StatsKeeper) {
	r.live = newLiveJobs(r.cfg.Live)
	// Behind: the feed reads in bursts, once a Flush; one that did not
	// reach the log's end for a few of them is catching up (or failing),
	// and its list is not to be trusted alone.
	r.stale = 5*k.cfg.Flush + r.cfg.Interval
	k.live = r.live
}

func (r *Reaper) policy() commands.ReapPolicy {
	return commands.ReapPolicy{Grace: r.cfg.Grace, StallTimeout: r.cfg.StallTimeout}
}

// Reads reports how many passes read the whole bucket, and how many jobs
// passes read one by one.
func (r *Reaper) Reads() (full, looks int64) { return r.fullReads.Load(), r.looks.Load() }

// Scan looks for the jobs that are due, and ends them.
func (r *Reaper) Scan(ctx context.Context) error {
	now := time.Now()
	r.mu.Lock()
	full := r.live == nil || !now.Before(r.nextFull)
	limit := min(r.cfg.Looks, r.lastRead/lookCost) // more looks cost more than a full read
	r.mu.Unlock()
	if full || !r.live.fresh(now, r.stale) {
		return r.scanAll(ctx, now)
	}
	ids := r.live.toLook(now, limit)
	if len(ids) > limit {
		return r.scanAll(ctx, now)
	}
	p := r.policy()
	for _, id := range ids {
		cur, err := r.store.Current(ctx, id)
		var bad *commands.InputError
		if errors.Is(err, commands.ErrNotFound) || errors.As(err, &bad) {
			r.live.forget(id) // purged, or not a job id
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			r.log.Warn("read", "job", id, "err", err)
			continue // still to look at: the next pass reads it again
		}
		r.looks.Add(1)
		due, ok := commands.DueAt(cur.Job, p)
		r.live.learn(cur.Job, due, ok)
		if commands.Overdue(cur.Job, p, now) != "" {
			r.reap(ctx, cur)
		}
	}
	return ctx.Err()
}

// scanAll reads every record once, ends those that are due, and (following
// the log) puts the live ones in the list.
func (r *Reaper) scanAll(ctx context.Context, now time.Time) error {
	var due []string
	p := r.policy()
	var seed func(j *domain.Job, due time.Time, ok bool)
	var upTo uint64
	r.mu.Lock()
	first, lastLive := r.nextFull.IsZero(), r.lastLive
	r.mu.Unlock()
	if r.live != nil {
		info, err := r.store.Events().Info(ctx)
		if err != nil {
			return err
		}
		upTo = info.State.LastSeq
		seed = r.live.readAll(lastLive)
	}
	live, read := 0, 0
	err := r.store.Scan(ctx, func(j *domain.Job) {
		read++
		if j.State.Terminal() {
			if seed != nil {
				seed(j, time.Time{}, false)
			}
			return
		}
		live++
		if seed != nil {
			at, ok := commands.DueAt(j, p)
			seed(j, at, ok)
		}
		if commands.Overdue(j, p, now) != "" {
			due = append(due, j.ID)
		}
	})
	if err != nil {
		return err
	}
	if r.live != nil {
		r.live.sweep(upTo)
	}
	r.fullReads.Add(1)
	next := now.Add(r.cfg.Reconcile)
	if first {
		next = now.Add(min(settleRead, r.cfg.Reconcile))
	}
	r.mu.Lock()
	r.nextFull, r.lastLive, r.lastRead = next, live, read
	r.mu.Unlock()
	for _, id := range due {
		// The record read may be behind the log: decided on the job as
		// the log has it.
		if cur, err := r.store.Current(ctx, id); err == nil {
			r.reap(ctx, cur)
		}
	}
	return ctx.Err()
}

// reap ends job cur if it is still overdue, decided again as it is when
// written.
func (r *Reaper) reap(ctx context.Context, cur store.Snapshot) {
	id := cur.Job.ID
	var did string
	var on *domain.Job
	began := time.Now()
	_, ev, err := r.store.Apply(ctx, "reap", cur, func(j *domain.Job) (*domain.Event, error) {
		// Decided again on the job as it is now: one that moved on since
		// the scan is left alone.
		ev, why, err := commands.Reap(j, r.policy(), "reaper", time.Now().UTC())
		did, on = why, j
		return ev, err
	})
	if errors.Is(err, commands.ErrInvalidTransition) {
		return
	}
	if err != nil {
		r.log.Warn("reap", "job", id, "err", err)
		return
	}
	r.log.Info("reaped", "job", id, "why", did, "event", ev.Type)
	decided(ctx, tracing.SpanReap, on, ev, began, tracing.AttrReason.String(did))
}
