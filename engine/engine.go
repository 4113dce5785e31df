package engine

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/engine/internal/cmdservice"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Component is the life every background component shares.
type Component = maintenance.Component

// EngineConfig configures the background components.
type EngineConfig struct {
	ID           string // this engine's name in elections and events (default: the store's actor)
	ProjectorLag time.Duration
	LeaderTTL    time.Duration // how long a failover of the led components can take (default 10s)
	Reaper       maintenance.ReaperConfig
	// LeaseSweepInterval is how often the leader looks for held jobs whose
	// worker stopped renewing the lease (default DefaultLeaseSweepInterval).
	LeaseSweepInterval time.Duration
	// TypeGrace is how long a registered type may go without workers and
	// jobs before it is soft-deleted (default DefaultTypeGrace), and
	// TypeSweepInterval how often the leader looks (default
	// DefaultTypeSweepInterval).
	TypeGrace, TypeSweepInterval time.Duration
	// FileGrace is how long the files of a job that does not exist are
	// kept (a submit with files that crashed before the submit; default
	// DefaultFileGrace), FileSweepInterval how often the leader looks
	// (default DefaultFileSweepInterval).
	FileGrace, FileSweepInterval time.Duration
	// Purger configures retention: how long terminal jobs are kept.
	Purger PurgerConfig
	// WorkflowGrace is how long a workflow may stay pending (its submitter
	// making its steps) before the leader makes them (default
	// defaultWorkflowGrace).
	WorkflowGrace time.Duration
	// MisfireGrace is how late a schedule's tick may fire and still count
	// as on time (default DefaultMisfireGrace); later, the schedule's
	// misfire policy decides.
	MisfireGrace time.Duration
	// Auth makes the command server check tokens.
	Auth bool
	// StatsFlush is how often the statistics of the charts are written
	// (default maintenance.DefaultStatsFlush).
	StatsFlush time.Duration
	// Checkpoints configures the checkpoints of the event log (written by
	// the leader when Checkpoints.Key is set; docs/audit.md).
	Checkpoints maintenance.CheckpointerConfig
	Log         *slog.Logger
}

// Engine runs the components that keep jetflow whole, next to any number of
// workers and clients: the Projector, the Promoter and the command server on
// every engine, and, on the one engine that leads, the fan-in counter, the
// lease sweeper, the type and file sweepers, the reaper, the purger and the
// admitter. Any number of engines may run against one NATS system.
type Engine struct {
	Store      *Store
	Projector  *maintenance.Projector
	Files      *maintenance.FileSweeper
	Leader     *maintenance.Leader // runs the led components on one engine at a time
	Stats      *maintenance.StatsKeeper
	components []Component

	// Scheduler fires the schedules' ticks (a led component).
	Scheduler *maintenance.Scheduler
	// Checkpointer writes the checkpoints of the event log (a led
	// component; nil without a key).
	Checkpointer *maintenance.Checkpointer
}

// NewEngine assembles an engine on a store.
func NewEngine(s *Store, cfg EngineConfig) *Engine {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.ID == "" {
		cfg.ID = s.Actor
	}
	if cfg.Reaper.Log == nil {
		cfg.Reaper.Log = log
	}
	if cfg.Purger.Log == nil {
		cfg.Purger.Log = log
	}
	cfg.Purger.Namespaces = s.Types
	st := s.st
	e := &Engine{Store: s,
		Projector: maintenance.NewProjector(st, maintenance.ProjectorConfig{Lag: cfg.ProjectorLag, Log: log}),
		Files:     maintenance.NewFileSweeper(st, maintenance.FileSweeperConfig{Grace: cfg.FileGrace, Interval: cfg.FileSweepInterval, Log: log}),
		Stats:     maintenance.NewStatsKeeper(st, maintenance.StatsConfig{Flush: cfg.StatsFlush, Log: log}),
	}
	reaper := maintenance.NewReaper(st, cfg.Reaper)
	reaper.Follow(e.Stats)
	e.Scheduler = maintenance.NewScheduler(st, maintenance.SchedulerConfig{Schedules: s.Schedules, MisfireGrace: cfg.MisfireGrace, Log: log})
	led := []Component{
		maintenance.NewFanIn(st, maintenance.FanInConfig{Log: log, WorkflowGrace: cfg.WorkflowGrace}),
		maintenance.NewLeaseSweeper(st, maintenance.LeaseSweeperConfig{Interval: cfg.LeaseSweepInterval, Log: log}),
		maintenance.NewTypeSweeper(st, maintenance.TypeSweeperConfig{Grace: cfg.TypeGrace, Interval: cfg.TypeSweepInterval, Types: s.Types, Log: log}),
		e.Files,
		reaper,
		maintenance.NewPurger(st, cfg.Purger),
		maintenance.NewAdmitter(st, maintenance.AdmitterConfig{Log: log}),
		e.Stats,
		e.Scheduler,
	}
	auditKey := ""
	if cfg.Checkpoints.Key != nil {
		auditKey = AuditPublicKey(cfg.Checkpoints.Key)
		if cfg.Checkpoints.Log == nil {
			cfg.Checkpoints.Log = log
		}
		e.Checkpointer = maintenance.NewCheckpointer(st, cfg.Checkpoints)
		led = append(led, e.Checkpointer)
	}
	e.Leader = maintenance.NewLeader(st, maintenance.LeaderConfig{Name: "engine", ID: cfg.ID + "-" + domain.NewID()[20:],
		TTL: cfg.LeaderTTL, Log: log, Components: led})
	e.components = []Component{
		e.Projector,
		maintenance.NewPromoter(st, maintenance.PromoterConfig{Log: log}),
		cmdservice.New(st, cmdservice.Config{Auth: cfg.Auth, Tokens: s.Tokens, Types: s.Types, Log: log, Schedules: s.Schedules,
			AuditKey: auditKey}),
		e.Leader,
	}
	return e
}

// Add adds a component that starts after, and stops before, the others.
func (e *Engine) Add(c Component) { e.components = append(e.components, c) }

// Start starts every component; if one fails, those started are stopped.
func (e *Engine) Start(ctx context.Context) error {
	for i, c := range e.components {
		if err := c.Start(ctx); err != nil {
			for k := i - 1; k >= 0; k-- {
				e.components[k].Stop(ctx)
			}
			return err
		}
	}
	return nil
}

// Stop stops every component, last started first.
func (e *Engine) Stop(ctx context.Context) {
	for i := len(e.components) - 1; i >= 0; i-- {
		e.components[i].Stop(ctx)
	}
}

// CaughtUp waits until the Projectors (this engine's and any other's: the
// ack floor of their consumer), and the statistics when this engine leads,
// have read the event log up to its end as it is at the call: what
// the consumers that follow the log still owe a burst of writes (a
// benchmark settles on it between its phases).
func (e *Engine) CaughtUp(ctx context.Context) error {
	info, err := e.Store.Events.Info(ctx)
	if err != nil {
		return err
	}
	last := info.State.LastSeq
	var lastEvent uint64 // the statistics read only the jobs' events
	if m, err := e.Store.Events.GetLastMsgForSubject(ctx, streams.EventsPrefix+".>"); err == nil {
		lastEvent = m.Sequence
	} else if !errors.Is(err, jetstream.ErrMsgNotFound) {
		return err
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		projected, err := e.Projector.Floor(ctx)
		if err != nil {
			return errors.Join(ctx.Err(), err)
		}
		if projected >= last && (!e.Leader.Leading() || e.Stats.Folded() >= lastEvent) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
