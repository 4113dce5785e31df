package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
)

// progressCoalescer keeps a flood of progress reports from a remote worker
// from swamping the event log, as the worker runtime does for handlers in
// process: at most one job.progress per job per interval is written, with
// the last value reported, and a pending value is written before the
// job's next state report.
type progressCoalescer struct {
	g        *Gateway
	interval time.Duration

	mu   sync.Mutex
	jobs map[string]*pendingProgress
}

type pendingProgress struct {
	last    time.Time
	value   *domain.Progress
	worker  string
	timer   *time.Timer
	touched time.Time
}

func newProgressCoalescer(g *Gateway, interval time.Duration) *progressCoalescer {
	return &progressCoalescer{g: g, interval: interval, jobs: map[string]*pendingProgress{}}
}

// report writes p now, or keeps it to write at the end of the job's
// interval (deferred true). A report that the index says cannot be the
// holder's is written at once, so that it is refused at once.
func (c *progressCoalescer) report(ctx context.Context, id, worker string, p domain.Progress) (snap engine.Snapshot, deferred bool, err error) {
	now := time.Now()
	c.mu.Lock()
	e := c.jobs[id]
	if e == nil {
		e = &pendingProgress{}
		c.jobs[id] = e
		c.sweepLocked(now)
	}
	e.touched = now
	s := c.g.index.Get(id)
	holder := s != nil && s.Worker == worker && (s.State == domain.StateRunning || s.State == domain.StateClaimed)
	if holder && (e.timer != nil || now.Sub(e.last) < c.interval) {
		e.value, e.worker = &p, worker
		if e.timer == nil {
			e.timer = time.AfterFunc(e.last.Add(c.interval).Sub(now), func() { c.flush(id) })
		}
		c.mu.Unlock()
		return engine.Snapshot{}, true, nil
	}
	e.last = now
	c.mu.Unlock()
	snap, err = c.g.remote.Progress(ctx, id, worker, p)
	return snap, false, err
}

// flush writes a job's pending progress, if any (its interval ended).
func (c *progressCoalescer) flush(id string) {
	c.mu.Lock()
	e := c.jobs[id]
	if e == nil {
		c.mu.Unlock()
		return
	}
	e.timer = nil
	value, worker := e.value, e.worker
	e.value = nil
	e.last = time.Now()
	c.mu.Unlock()
	if value == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.g.base()), 10*time.Second)
	defer cancel()
	if snap, err := c.g.remote.Progress(ctx, id, worker, *value); err == nil {
		c.g.index.Put(snap.Job, snap.Rev)
	}
}

// take removes and returns the progress pending for a job from worker (nil
// if none): a state report carries it. With end, the job's entry is
// dropped (its worker reports an outcome).
func (c *progressCoalescer) take(id, worker string, end bool) *domain.Progress {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.jobs[id]
	if e == nil {
		return nil
	}
	var value *domain.Progress
	if e.worker == worker {
		value, e.value = e.value, nil
		if e.timer != nil {
			e.timer.Stop()
			e.timer = nil
		}
		e.last = time.Now()
	}
	if end {
		delete(c.jobs, id)
	}
	return value
}

// putBack returns a value taken for a report that was refused: it is
// written at the end of its interval, as if never taken.
func (c *progressCoalescer) putBack(id, worker string, p *domain.Progress) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.jobs[id]
	if e == nil {
		e = &pendingProgress{touched: time.Now()}
		c.jobs[id] = e
	}
	if e.value != nil {
		return // a newer report came meanwhile
	}
	e.value, e.worker = p, worker
	if e.timer == nil {
		e.timer = time.AfterFunc(max(time.Until(e.last.Add(c.interval)), 0), func() { c.flush(id) })
	}
}

// sweepLocked forgets jobs that have been quiet for a minute.
func (c *progressCoalescer) sweepLocked(now time.Time) {
	if len(c.jobs) < 1024 {
		return
	}
	for id, e := range c.jobs {
		if e.timer == nil && now.Sub(e.touched) > time.Minute {
			delete(c.jobs, id)
		}
	}
}
