package maintenance

import (
	"context"
	"log/slog"
	"time"
)

// Component is the life every background component shares.
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context)
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
