package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jetflow/jetflow/commands"
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
	store    *Store
	grace    time.Duration
	interval time.Duration
	log      *slog.Logger
	life     lifecycle.Loop
	deleted  atomic.Int64
}

// NewFileSweeper returns a sweeper with the grace (0: DefaultFileGrace),
// looking every interval (0: DefaultFileSweepInterval).
func NewFileSweeper(store *Store, grace, interval time.Duration, log *slog.Logger) *FileSweeper {
	if grace <= 0 {
		grace = DefaultFileGrace
	}
	if interval <= 0 {
		interval = DefaultFileSweepInterval
	}
	if log == nil {
		log = slog.Default()
	}
	return &FileSweeper{store: store, grace: grace, interval: interval, log: log.With("component", "files")}
}

// Deleted is how many objects this sweeper deleted.
func (s *FileSweeper) Deleted() int64 { return s.deleted.Load() }

// Start starts sweeping. Idempotent.
func (s *FileSweeper) Start(context.Context) error {
	s.life.EveryLogged(s.interval, s.log, func(ctx context.Context) error {
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
	n, err := fs.Sweep(ctx, s.grace, func(ctx context.Context, id string) (bool, error) {
		_, err := s.store.Lookup(ctx, id)
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
