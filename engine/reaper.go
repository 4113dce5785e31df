package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/lifecycle"
	"github.com/jetflow/jetflow/streams"
)

// Defaults of ReaperConfig.
const (
	DefaultReaperInterval = 10 * time.Second
	DefaultReaperGrace    = time.Minute
	DefaultStallTimeout   = time.Hour
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

// Reaper ends jobs that nobody else will: a claimed or running job past its
// execution timeout (plus the grace) that no worker reported on, a queued
// job past its queue timeout, a waiting parent whose pieces stalled
// (job.stalled). It scans the jobs bucket every interval; every write is a
// revision-checked transition decided on the job as it is then, so a job
// that finished while the reaper looked is never overwritten.
//
// One Reaper runs at a time, under a Leader.
type Reaper struct {
	store *Store
	cfg   ReaperConfig
	log   *slog.Logger

	life   lifecycle.Loop
	reaped atomic.Int64
}

// NewReaper returns a Reaper.
func NewReaper(store *Store, cfg ReaperConfig) *Reaper {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultReaperInterval
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultReaperGrace
	}
	if cfg.StallTimeout <= 0 {
		cfg.StallTimeout = DefaultStallTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	return &Reaper{store: store, cfg: cfg, log: cfg.Log.With("component", "reaper")}
}

// Reaped is how many jobs this reaper ended.
func (r *Reaper) Reaped() int64 { return r.reaped.Load() }

// Start starts scanning. Idempotent.
func (r *Reaper) Start(context.Context) error {
	r.life.EveryLogged(r.cfg.Interval, r.log, r.Scan)
	return nil
}

// Stop stops scanning. Idempotent.
func (r *Reaper) Stop(ctx context.Context) { r.life.Stop(ctx) }

// reaping is one reason to end a job, decided on its current state.
type reaping struct {
	op     string
	decide func(j *domain.Job, now time.Time) (*domain.Event, error)
}

// due returns what the reaper would do to j now, if anything.
func (r *Reaper) due(j *domain.Job, now time.Time) *reaping {
	switch j.State {
	case domain.StateRunning, domain.StateClaimed:
		if !commands.TimedOut(j, r.cfg.Grace, now) {
			return nil
		}
		return &reaping{op: "reap-timeout", decide: func(j *domain.Job, now time.Time) (*domain.Event, error) {
			return commands.Fail(j, domain.JobError{Code: CodeTimeout, Message: fmt.Sprintf(
				"execution timeout of %s (and %s grace) passed and no worker reported", j.Spec.Timeout, r.cfg.Grace)},
				false, "reaper", now, 0)
		}}
	case domain.StateQueued:
		if j.Spec.QueueTimeout <= 0 || now.Sub(j.QueuedAt) <= j.Spec.QueueTimeout {
			return nil
		}
		return &reaping{op: "reap-queue-timeout", decide: func(j *domain.Job, now time.Time) (*domain.Event, error) {
			return commands.Fail(j, domain.JobError{Code: "QUEUE_TIMEOUT", Message: fmt.Sprintf(
				"not started within its queue timeout of %s", j.Spec.QueueTimeout)}, false, "reaper", now, 0)
		}}
	case domain.StateWaiting:
		stall := r.cfg.StallTimeout
		if j.Fanout != nil && j.Fanout.Plan.StallTimeout > 0 {
			stall = j.Fanout.Plan.StallTimeout
		}
		if now.Sub(j.UpdatedAt) <= stall {
			return nil
		}
		return &reaping{op: "reap-stalled", decide: func(j *domain.Job, now time.Time) (*domain.Event, error) {
			return commands.Stall(j, stall, "reaper", now)
		}}
	}
	return nil
}

// Scan looks at every job once and ends those that are due.
func (r *Reaper) Scan(ctx context.Context) error {
	w, err := r.store.KV.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return err
	}
	defer w.Stop()
	var due []string
	now := time.Now()
	for e := range w.Updates() {
		if e == nil {
			break
		}
		j, err := streams.DecodeJob(e.Value())
		if err != nil || j.State.Terminal() {
			continue
		}
		if r.due(j, now) != nil {
			due = append(due, j.ID)
		}
	}
	for _, id := range due {
		r.reap(ctx, id)
	}
	return ctx.Err()
}

func (r *Reaper) reap(ctx context.Context, id string) {
	cur, err := r.store.Load(ctx, id)
	if err != nil {
		return
	}
	var did string
	_, ev, err := r.store.Apply(ctx, "reap", cur, func(j *domain.Job) (*domain.Event, error) {
		// Decided again on the job as it is now: one that moved on since
		// the scan is left alone.
		rp := r.due(j, time.Now())
		if rp == nil {
			return nil, &commands.TransitionError{JobID: j.ID, Event: "reap", From: j.State, To: j.State}
		}
		did = rp.op
		return rp.decide(j, time.Now().UTC())
	})
	if errors.Is(err, commands.ErrInvalidTransition) {
		return
	}
	if err != nil {
		r.log.Warn("reap", "job", id, "err", err)
		return
	}
	r.reaped.Add(1)
	r.log.Info("reaped", "job", id, "why", did, "event", ev.Type)
}
