package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// Component is the life every background component shares.
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context)
}

// EngineConfig configures the background components.
type EngineConfig struct {
	ID           string // this engine's name in elections and events (default: the store's actor)
	ProjectorLag time.Duration
	LeaderTTL    time.Duration // how long a failover of the led components can take (default 10s)
	Reaper       ReaperConfig
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
	// Auth makes the command server check tokens (CommandServer.Auth).
	Auth bool
	Log  *slog.Logger
}

// Engine runs the components that keep jetflow whole, next to any number of
// workers and clients: the Projector, the Promoter and the command server on
// every engine, and, on the one engine that leads, the fan-in counter, the
// LeaseSweeper and the Reaper. Any number of engines may run against one NATS system.
type Engine struct {
	Store      *Store
	Projector  *Projector
	Promoter   *Promoter
	Commands   *CommandServer
	FanIn      *FanIn
	Reaper     *Reaper
	Leases     *LeaseSweeper
	Types      *TypeSweeper
	Files      *FileSweeper
	Purger     *Purger
	Admitter   *Admitter
	Leader     *Leader // runs FanIn, Leases, Types, Files, Reaper, Purger and Admitter on one engine at a time
	components []Component
}

// NewEngine assembles an engine on a store.
func NewEngine(store *Store, cfg EngineConfig) *Engine {
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	if cfg.ID == "" {
		cfg.ID = store.Actor
	}
	if cfg.Reaper.Log == nil {
		cfg.Reaper.Log = log
	}
	e := &Engine{Store: store,
		Projector: NewProjector(store, ProjectorConfig{Lag: cfg.ProjectorLag, Log: log}),
		Promoter:  NewPromoter(store, log),
		Commands:  newCommandServer(store, log, cfg.Auth),
		FanIn:     NewFanIn(store, log),
		Reaper:    NewReaper(store, cfg.Reaper),
		Leases:    NewLeaseSweeper(store, cfg.LeaseSweepInterval, log),
		Types:     NewTypeSweeper(store, cfg.TypeGrace, cfg.TypeSweepInterval, log),
		Files:     NewFileSweeper(store, cfg.FileGrace, cfg.FileSweepInterval, log),
	}
	if cfg.Purger.Log == nil {
		cfg.Purger.Log = log
	}
	e.Purger = NewPurger(store, cfg.Purger)
	e.Admitter = NewAdmitter(store, log)
	e.Leader = NewLeader(store, "engine", cfg.ID+"-"+domain.NewID()[20:], cfg.LeaderTTL, log, e.FanIn, e.Leases, e.Types, e.Files, e.Reaper, e.Purger, e.Admitter)
	e.components = []Component{e.Projector, e.Promoter, e.Commands, e.Leader}
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
