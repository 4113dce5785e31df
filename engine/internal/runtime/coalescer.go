package runtime

import (
	"sync"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// Coalescer keeps a flood of progress reports from swamping the event log:
// at most one job.progress per job per interval is written, with the last
// value reported, and a value still pending when the job's attempt reports
// its next state goes with that report (Take). A handler in process and a
// remote worker's reports (the gateway's) are coalesced alike.
type Coalescer struct {
	interval time.Duration
	flush    func(id, worker string, p domain.Progress)

	mu   sync.Mutex
	jobs map[string]*pendingProgress
}

type pendingProgress struct {
	last    time.Time // when the last write began
	value   *domain.Progress
	worker  string
	timer   *time.Timer // a flush is due
	touched time.Time
}

// NewCoalescer returns a coalescer whose held values are written by flush
// at the end of their job's interval (from a timer's goroutine).
func NewCoalescer(interval time.Duration, flush func(id, worker string, p domain.Progress)) *Coalescer {
	return &Coalescer{interval: interval, flush: flush, jobs: map[string]*pendingProgress{}}
}

// entryLocked is the job's entry, made if need be.
func (c *Coalescer) entryLocked(id string, now time.Time) *pendingProgress {
	e := c.jobs[id]
	if e == nil {
		e = &pendingProgress{}
		c.jobs[id] = e
		c.sweepLocked(now)
	}
	e.touched = now
	return e
}

// Hold keeps p, reported by worker for job id, to be written at the end of
// the job's interval, and returns true, while that interval runs (a write
// is due, or one began less than an interval ago). Otherwise it counts a
// write as begun now and returns false: the caller writes p itself.
func (c *Coalescer) Hold(id, worker string, p domain.Progress) bool {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entryLocked(id, now)
	if e.timer != nil || now.Sub(e.last) < c.interval {
		e.value, e.worker = &p, worker
		if e.timer == nil {
			e.timer = time.AfterFunc(e.last.Add(c.interval).Sub(now), func() { c.flushJob(id) })
		}
		return true
	}
	e.last = now
	return false
}

// Defer keeps p, reported by worker for job id, to be written when the
// job's interval ends: at once (from the timer's goroutine) if the last
// write began an interval ago or more. Its caller never waits for I/O.
func (c *Coalescer) Defer(id, worker string, p domain.Progress) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entryLocked(id, now)
	e.value, e.worker = &p, worker
	if e.timer == nil {
		e.timer = time.AfterFunc(max(c.interval-now.Sub(e.last), 0), func() { c.flushJob(id) })
	}
}

// flushJob writes a job's pending value, if any (its interval ended).
func (c *Coalescer) flushJob(id string) {
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
	if value != nil {
		c.flush(id, worker, *value)
	}
}

// Take removes and returns the value pending for job id from worker (nil
// if none), and counts a write as begun now: the caller writes it with the
// job's next report (its state, or its outcome). With end, the job is
// forgotten (its attempt ended).
func (c *Coalescer) Take(id, worker string, end bool) *domain.Progress {
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

// PutBack returns a value taken for a report that was refused: it is
// written at the end of its interval, as if never taken, unless a newer
// one came meanwhile.
func (c *Coalescer) PutBack(id, worker string, p *domain.Progress) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entryLocked(id, now)
	if e.value != nil {
		return // a newer report came meanwhile
	}
	e.value, e.worker = p, worker
	if e.timer == nil {
		e.timer = time.AfterFunc(max(e.last.Add(c.interval).Sub(now), 0), func() { c.flushJob(id) })
	}
}

// Pause stops the timer of job id, keeping its value for a Take: its
// attempt ended, and the value goes before its outcome.
func (c *Coalescer) Pause(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.jobs[id]; e != nil && e.timer != nil {
		e.timer.Stop()
		e.timer = nil
	}
}

// sweepLocked forgets jobs that have been quiet for a minute, once there
// are many.
func (c *Coalescer) sweepLocked(now time.Time) {
	if len(c.jobs) < 1024 {
		return
	}
	for id, e := range c.jobs {
		if e.timer == nil && now.Sub(e.touched) > time.Minute {
			delete(c.jobs, id)
		}
	}
}
