package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jetflow/jetflow/internal/lifecycle"
)

// Component is the life every background component shares.
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context)
}

// periodic is the life of a component that makes a pass every interval
// (the reaper, the sweepers, the purger): Start begins the passes, after
// begin (a new term) if it was not running, and Stop ends them.
type periodic struct {
	life  lifecycle.Loop
	every time.Duration
	log   *slog.Logger
	check func() error // the config's validate
	begin func()       // optional
	pass  func(ctx context.Context) error
}

// Start starts the passes. Idempotent.
func (p *periodic) Start(context.Context) error {
	if err := p.check(); err != nil {
		return err
	}
	if p.begin != nil && !p.life.Running() {
		p.begin()
	}
	p.life.EveryLogged(p.every, p.log, p.pass)
	return nil
}

// Stop stops the passes. Idempotent.
func (p *periodic) Stop(ctx context.Context) { p.life.Stop(ctx) }

// orDefault sets *v to d when it is not set (0, or less).
func orDefault[T int | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}

// logger is log, or the default logger, as a component's.
func logger(log *slog.Logger, component string) *slog.Logger {
	if log == nil {
		log = slog.Default()
	}
	return log.With("component", component)
}

// sleepCtx sleeps for d or until ctx is done; it reports whether it slept.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
