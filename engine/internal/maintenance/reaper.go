package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
)

// Defaults of ReaperConfig.
const (
	defaultReaperInterval = 10 * time.Second
	defaultReaperGrace    = time.Minute
	defaultStallTimeout   = time.Hour
)

// ReaperConfig configures the Reaper.
type ReaperConfig struct {
	Interval time.Duration // how often the jobs bucket is scanned
	// Grace is added to a job's execution timeout before the reaper fails
	// it: a worker that still holds the job has its handler cancelled at the
	// timeout and records the failure itself well within it.
	Grace time.Duration
	// StallTimeout fails a waiting parent none of whose pieces finished for
	// this long, unless its fan-out set its own.
	StallTimeout time.Duration
	Log          *slog.Logger
}

func (c ReaperConfig) withDefaults() ReaperConfig {
	orDefault(&c.Interval, defaultReaperInterval)
	orDefault(&c.Grace, defaultReaperGrace)
	orDefault(&c.StallTimeout, defaultStallTimeout)
	return c
}

func (c ReaperConfig) validate() error { return nil }

// Reaper ends jobs that nobody else will: a claimed or running job past its
// execution timeout (plus the grace) that no worker reported on, a queued
// job past its queue timeout, a waiting parent whose pieces stalled
// (job.stalled); commands.Overdue and commands.Reap decide. It scans the
// jobs bucket every interval; every write is a revision-checked transition
// decided on the job as it is then, so a job that finished while the
// reaper looked is never overwritten.
//
// One Reaper runs at a time, under a Leader.
type Reaper struct {
	periodic
	store *store.Store
	cfg   ReaperConfig
	log   *slog.Logger
}

// NewReaper returns a Reaper.
func NewReaper(s *store.Store, cfg ReaperConfig) *Reaper {
	cfg = cfg.withDefaults()
	r := &Reaper{store: s, cfg: cfg, log: logger(cfg.Log, "reaper")}
	r.periodic = periodic{every: cfg.Interval, log: r.log, check: cfg.validate, pass: r.Scan}
	return r
}

func (r *Reaper) policy() commands.ReapPolicy {
	return commands.ReapPolicy{Grace: r.cfg.Grace, StallTimeout: r.cfg.StallTimeout}
}

// Scan looks at every job once and ends those that are due.
func (r *Reaper) Scan(ctx context.Context) error {
	var due []string
	now := time.Now()
	err := r.store.Scan(ctx, func(j *domain.Job) {
		if !j.State.Terminal() && commands.Overdue(j, r.policy(), now) != "" {
			due = append(due, j.ID)
		}
	})
	if err != nil {
		return err
	}
	for _, id := range due {
		r.reap(ctx, id)
	}
	return ctx.Err()
}

func (r *Reaper) reap(ctx context.Context, id string) {
	cur, err := r.store.Current(ctx, id)
	if err != nil {
		return
	}
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
