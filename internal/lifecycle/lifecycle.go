// Package lifecycle gives jetflow's background components one life:
// started and stopped any number of times, safe to stop twice or without a
// start, with one goroutine running between the two (River's startstop).
package lifecycle

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Loop runs one goroutine of a component from Start to Stop. The zero
// value is ready to use.
type Loop struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// Start prepares a run (creating what it needs: consumers, watches) and
// runs it in a goroutine until Stop; its error is Start's, and nothing
// runs then. A Loop that runs already is left as it is.
func (l *Loop) Start(prepare func() (run func(ctx context.Context), err error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cancel != nil {
		return nil
	}
	run, err := prepare()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	go func(done chan<- struct{}) {
		defer close(done)
		run(ctx)
	}(l.done)
	return nil
}

// Every starts pass, run at once and then every interval until Stop.
func (l *Loop) Every(interval time.Duration, pass func(ctx context.Context)) {
	_ = l.Start(func() (func(context.Context), error) {
		return func(ctx context.Context) {
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				pass(ctx)
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		}, nil
	})
}

// EveryLogged is Every for a pass that can fail: its error is logged as a
// warning (one from a Stop is not), and the next pass comes as usual.
func (l *Loop) EveryLogged(interval time.Duration, log *slog.Logger, pass func(ctx context.Context) error) {
	l.Every(interval, func(ctx context.Context) {
		if err := pass(ctx); err != nil && ctx.Err() == nil {
			log.Warn("pass failed", "err", err)
		}
	})
}

// Stop cancels the run and waits for it to return, or for ctx. It reports
// whether anything was running.
func (l *Loop) Stop(ctx context.Context) bool {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.cancel, l.done = nil, nil
	l.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return true
}

// Ended reports whether the run started last returned by itself, before
// any Stop (false if none runs).
func (l *Loop) Ended() bool {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Running reports whether a run was started and not stopped.
func (l *Loop) Running() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cancel != nil
}
