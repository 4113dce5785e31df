package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/lifecycle"
)

// Defaults of the FileSweeper.
const (
	DefaultFileGrace         = time.Hour
	DefaultFileSweepInterval = 10 * time.Minute
)

// FileSweeper deletes files of jobs that do not exist: a submit with files
// stores them under the job's id first and submits after, so a process
// that dies in between (or a refused submit whose clean-up failed) leaves
// files without a job. Files are swept once the newest of a job's is
// older than the grace, which bounds how long an upload may take.
//
// One runs at a time, under the Leader.
type FileSweeper struct {
	store   *store.Store
	cfg     FileSweeperConfig
	log     *slog.Logger
	life    lifecycle.Loop
	deleted atomic.Int64
}

// FileSweeperConfig configures the FileSweeper.
type FileSweeperConfig struct {
	// Grace is how long the files of a job that does not exist are kept
	// (default DefaultFileGrace), Interval how often the leader looks
	// (default DefaultFileSweepInterval).
	Grace, Interval time.Duration
	Log             *slog.Logger
}

func (c FileSweeperConfig) withDefaults() FileSweeperConfig {
	if c.Grace <= 0 {
		c.Grace = DefaultFileGrace
	}
	if c.Interval <= 0 {
		c.Interval = DefaultFileSweepInterval
	}
	return c
}

func (c FileSweeperConfig) validate() error { return nil }

// NewFileSweeper returns a FileSweeper.
func NewFileSweeper(s *store.Store, cfg FileSweeperConfig) *FileSweeper {
	cfg = cfg.withDefaults()
	return &FileSweeper{store: s, cfg: cfg, log: logger(cfg.Log, "files")}
}

// Deleted is how many objects this sweeper deleted.
func (s *FileSweeper) Deleted() int64 { return s.deleted.Load() }

// Start starts sweeping. Idempotent.
func (s *FileSweeper) Start(context.Context) error {
	if err := s.cfg.validate(); err != nil {
		return err
	}
	s.life.EveryLogged(s.cfg.Interval, s.log, func(ctx context.Context) error {
		_, err := s.Sweep(ctx)
		return err
	})
	return nil
}

// Stop stops sweeping. Idempotent.
func (s *FileSweeper) Stop(ctx context.Context) { s.life.Stop(ctx) }

// Sweep deletes the files of jobs that do not exist and are older than the
// grace, once; it returns how many objects it deleted.
func (s *FileSweeper) Sweep(ctx context.Context) (int, error) {
	fs, err := s.store.Files(ctx)
	if err != nil {
		return 0, err
	}
	n, err := fs.Sweep(ctx, s.cfg.Grace, func(ctx context.Context, id string) (bool, error) {
		_, err := s.store.Current(ctx, id)
		if errors.Is(err, commands.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	})
	if n > 0 {
		s.deleted.Add(int64(n))
		s.log.Info("swept files of jobs that do not exist", "objects", n)
	}
	return n, err
}
