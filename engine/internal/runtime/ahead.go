package runtime

import (
	"context"
	"sync/atomic"
	"time"
)

// Claims ahead of the handlers.
//
// A claim is a write that the runtime waits for: under sync always, one
// group commit of the log (a few ms on a real disk). Were the claim made in
// a handler's slot, a fast handler's slot would spend most of its time
// waiting for claims, and each group commit would carry at most the slots
// that freed during the last one. So while every slot is busy, an item may
// be claimed ahead: its claim is written while the handlers run, and its
// handler starts the moment a slot frees.
//
// How many may be claimed ahead is the number of slots expected to free
// during one claim (Concurrency × claim latency ÷ handler duration, both
// running averages), at most aheadFactor × Concurrency. With handlers much
// slower than a claim it is 0, and nothing is hoarded: a job claimed ahead
// waits about one claim's time for its slot, which it would have waited
// before its claim anyway. Such a job is running as its record says (it is
// this worker's, listed in its heartbeats, its lease renewed), with its
// handler not started yet. Its cancel, its timeout and Stop end the wait,
// and so does seatWait (when the handlers running turned out slower than
// the average said): the job is then given back to its queue, no attempt
// spent, for another worker, and none is claimed ahead again until a
// handler ends (else a worker whose slots are all stuck would claim and give
// back the same jobs over and over).
//
// Handlers start in the order their items were fetched, claimed ahead or
// not (a queue with priorities orders its starts so): every item waits for
// the one fetched before it to start its handler (or to leave) before it
// takes a handler slot (the line: place.prev, place.turn).
//
// Only jobs are claimed ahead; a fan-out's batches are not (they have no
// claim to write), but they keep their turn in the line.

// Bounds of claims ahead.
const (
	// aheadFactor: at most this many times Concurrency are claimed ahead.
	aheadFactor = 8
	// minSeatWait: an item claimed ahead waits at least this long for a
	// handler slot (and 4 claim latencies) before it is given back.
	minSeatWait = time.Second
	// completingFactor: at most this many times Concurrency outcomes are
	// being recorded at once (a group commit carries those of many slots).
	completingFactor = 8
	// bigResult: a result larger than this takes one of only Concurrency
	// places among the outcomes being recorded, so that those held in
	// memory stay near what the handlers hold.
	bigResult = 64 << 10
)

// place is what an item holds while it is processed: a place among the
// items being claimed and run (in r.slots, or, claimed ahead, in r.ahead),
// then a handler slot (r.running), and its turn in the line. One goroutine
// (the item's) uses it.
type place struct {
	r       *Runtime
	ahead   bool // its place is in r.ahead, not in r.slots
	held    bool // it holds its place
	running bool // it holds a handler slot
	// prev is closed when the item fetched before this one started its
	// handler or left; turn, when this one did.
	prev <-chan struct{}
	turn chan struct{}
}

// free gives back what p holds: its handler slot, its place, its turn.
func (p *place) free() {
	if p.running {
		p.running = false
		<-p.r.running
	}
	if p.held {
		p.held = false
		if p.ahead {
			<-p.r.ahead
		} else {
			<-p.r.slots
		}
	}
	p.leave()
}

// leave gives up p's turn in the line: the next item may start.
func (p *place) leave() {
	if p.turn != nil {
		close(p.turn)
		p.turn = nil
	}
}

// seat waits for p's turn in the line, then for a handler slot. It returns
// why not when something comes first: ctx's end (its cause), or, for an
// item claimed ahead, the runtime stopping (ErrShutdown: it has not started,
// so another worker may run it now) or seatWait passing (errNotSeated). The job's execution timeout runs from its claim, as the
// Reaper reckons it, so that wait is also bounded by a tenth of timeout.
func (p *place) seat(ctx context.Context, timeout time.Duration) error {
	var expired <-chan time.Time // nil: no bound
	var stopping <-chan struct{} // nil: runs in Stop's grace like a running handler
	if p.ahead {
		stopping = p.r.stopping
		wait := p.r.seatWait()
		if timeout > 0 {
			wait = min(wait, timeout/10)
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	// wait waits for ready to be closed or for a place in slot.
	wait := func(ready <-chan struct{}, slot chan<- struct{}) error {
		select {
		case <-ready:
		case slot <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-stopping:
			return ErrShutdown
		case <-expired:
			p.r.unseated.Store(true)
			return errNotSeated
		}
		return nil
	}
	if p.prev != nil {
		if err := wait(p.prev, nil); err != nil {
			return err
		}
	}
	if err := wait(nil, p.r.running); err != nil {
		return err
	}
	p.running = true
	p.leave()
	return nil
}

// seatWait bounds how long an item claimed ahead waits for a slot before
// it is given back (for another worker): long past the claim latency that
// made it worth claiming ahead, when the handlers running turned out slow.
func (r *Runtime) seatWait() time.Duration {
	return max(minSeatWait, 4*time.Duration(r.claimTime.get()))
}

// aheadAllowed is how many items may be claimed ahead now: the slots
// expected to free during one claim, at most aheadFactor × Concurrency.
func (r *Runtime) aheadAllowed() int {
	c, h := r.claimTime.get(), r.handlerTime.get()
	if c == 0 || h == 0 || r.unseated.Load() {
		return 0 // nothing measured yet, or a job found no slot in time
	}
	n := int(int64(cap(r.slots)) * c / max(h, 1))
	return min(n, cap(r.ahead))
}

// meanTime is a running average of durations (in ns; the last one weighs
// an eighth).
type meanTime struct{ ns atomic.Int64 }

// add adds d to the average.
func (m *meanTime) add(d time.Duration) {
	for {
		old := m.ns.Load()
		next := int64(d)
		if old > 0 {
			next = old + (int64(d)-old)/8
		}
		if next < 1 {
			next = 1 // measured: never 0 again
		}
		if m.ns.CompareAndSwap(old, next) {
			return
		}
	}
}

// get is the average, 0 before the first duration.
func (m *meanTime) get() int64 { return m.ns.Load() }
