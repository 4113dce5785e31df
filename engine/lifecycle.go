package engine

import (
	"context"
	"sync"
	"time"
)

// periodic is the life of a background component that does one pass every
// interval: started and stopped any number of times, safe to stop twice or
// without a start. The first pass runs at once.
type periodic struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// start begins calling pass every interval until stop; false if it runs
// already.
func (p *periodic) start(interval time.Duration, pass func(ctx context.Context)) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cancel != nil {
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func(done chan<- struct{}) {
		defer close(done)
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
	}(p.done)
	return true
}

// stop ends the passes and waits for the one running, or for ctx.
func (p *periodic) stop(ctx context.Context) {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.cancel = nil
	p.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
