package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
)

// Defaults of the FileSweeper.
const (
	defaultFileGrace         = time.Hour
	defaultFileSweepInterval = 10 * time.Minute
)

// FileSweeper deletes files of jobs that do not exist: a submit with files
// stores them under the job's id first and submits after, so a process
// that dies in between (or a refused submit whose clean-up failed) leaves
// files without a job. Files are swept once the newest of a job's is
// older than the grace, which bounds how long an upload may take.
//
// One runs at a time, under the Leader.
type FileSweeper struct {
	periodic
	store *store.Store
	cfg   FileSweeperConfig
	log   *slog.Logger
}

// FileSweeperConfig configures the FileSweeper.
type FileSweeperConfig struct {
	// Grace is how long the files of a job that does not exist are kept
	// (default defaultFileGrace), Interval how often the leader looks
	// (default defaultFileSweepInterval).
	Grace, Interval time.Duration
	Log             *slog.Logger
}

func (c FileSweeperConfig) withDefaults() FileSweeperConfig {
	orDefault(&c.Grace, defaultFileGrace)
	orDefault(&c.Interval, defaultFileSweepInterval)
	return c
}

func (c FileSweeperConfig) validate() error { return nil }

// NewFileSweeper returns a FileSweeper.
func NewFileSweeper(s *store.Store, cfg FileSweeperConfig) *FileSweeper {
	cfg = cfg.withDefaults()
	f := &FileSweeper{store: s, cfg: cfg, log: logger(cfg.Log, "files")}
	f.periodic = periodic{every: cfg.Interval, log: f.log, check: cfg.validate, pass: func(ctx context.Context) error {
		_, err := f.Sweep(ctx)
		return err
	}}
	return f
}

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
		s.log.Info("swept files of jobs that do not exist", "objects", n)
	}
	return n, err
}
