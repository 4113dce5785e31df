package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/registry"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
)

// Defaults of the TypeSweeper.
const (
	defaultTypeGrace         = 10 * time.Minute
	DefaultTypeSweepInterval = time.Minute
)

// TypeSweeper soft-deletes registered types nobody uses (type.deleted): no
// worker registered for it (a worker's record lives until it has been
// silent for the registry's expiry) and no job of it that is not terminal,
// continuously for the grace period. The next registration reactivates
// the type; its history stays. @internal types are never swept. The jobs
// bucket is read only when a type has been without workers for the grace.
//
// One runs at a time, under the Leader; a new leader starts the grace
// again.
type TypeSweeper struct {
	periodic
	store *store.Store
	cfg   TypeSweeperConfig
	log   *slog.Logger

	mu      sync.Mutex
	unused  map[string]time.Time // full name -> since when it has had no worker
	deleted atomic.Int64
}

// TypeSweeperConfig configures the TypeSweeper.
type TypeSweeperConfig struct {
	// Grace is how long a type may go without workers and jobs before it is
	// soft-deleted (default defaultTypeGrace), Interval how often the leader
	// looks (default DefaultTypeSweepInterval).
	Grace, Interval time.Duration
	// Types is the type registry.
	Types *registry.Registry
	Log   *slog.Logger
}

func (c TypeSweeperConfig) withDefaults() TypeSweeperConfig {
	orDefault(&c.Grace, defaultTypeGrace)
	orDefault(&c.Interval, DefaultTypeSweepInterval)
	return c
}

func (c TypeSweeperConfig) validate() error {
	if c.Types == nil {
		return errors.New("type sweeper: no registry")
	}
	return nil
}

// NewTypeSweeper returns a TypeSweeper.
func NewTypeSweeper(s *store.Store, cfg TypeSweeperConfig) *TypeSweeper {
	cfg = cfg.withDefaults()
	t := &TypeSweeper{store: s, cfg: cfg, log: logger(cfg.Log, "types"), unused: map[string]time.Time{}}
	t.periodic = periodic{every: cfg.Interval, log: t.log, check: cfg.validate, pass: func(ctx context.Context) error {
		_, err := t.Sweep(ctx)
		return err
	}, begin: func() {
		t.mu.Lock()
		t.unused = map[string]time.Time{} // a new term starts the grace again
		t.mu.Unlock()
	}}
	return t
}

// Deleted is how many types this sweeper soft-deleted.
func (s *TypeSweeper) Deleted() int64 { return s.deleted.Load() }

// Sweep looks at every active type once and deletes those unused for the
// grace; it returns how many it deleted.
func (s *TypeSweeper) Sweep(ctx context.Context) (int, error) {
	types, err := s.cfg.Types.Types(ctx, "", false)
	if err != nil {
		return 0, err
	}
	workers, err := s.store.Workers().List(ctx)
	if err != nil {
		return 0, err
	}
	served := map[string]bool{}
	for _, w := range workers {
		for _, t := range w.Types {
			served[t] = true
		}
	}
	now := time.Now()
	var due []*domain.TypeRecord
	s.mu.Lock()
	for _, t := range types {
		name := t.FullName()
		if t.Scope == commands.ScopeInternal || served[name] {
			delete(s.unused, name)
			continue
		}
		since, ok := s.unused[name]
		if !ok {
			s.unused[name] = now
			continue
		}
		if now.Sub(since) >= s.cfg.Grace {
			due = append(due, t)
		}
	}
	s.mu.Unlock()
	if len(due) == 0 {
		return 0, nil
	}
	live, err := s.liveJobs(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range due {
		if live[t.FullName()] > 0 {
			continue
		}
		name := commands.TypeName{Scope: t.Scope, Category: t.Category, Name: t.Name}
		seq := t.Seq
		_, err := s.cfg.Types.Delete(ctx, name, "no worker and no job for "+s.cfg.Grace.String(), s.store.Actor(),
			func(cur *domain.TypeRecord) bool { return cur.Seq == seq })
		if err != nil {
			s.log.Info("type not deleted", "type", name, "err", err)
			continue
		}
		s.mu.Lock()
		delete(s.unused, t.FullName())
		s.mu.Unlock()
		s.deleted.Add(1)
		s.log.Info("type deleted", "type", name)
		n++
	}
	return n, nil
}

// liveJobs counts the jobs that are not terminal, by type.
func (s *TypeSweeper) liveJobs(ctx context.Context) (map[string]int, error) {
	live := map[string]int{}
	err := s.store.Scan(ctx, func(j *domain.Job) {
		if !j.State.Terminal() {
			live[j.Spec.Type]++
		}
	})
	return live, err
}
