package runtime

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Claims ahead of the handlers.
//
// A claim is a write that the runtime waits for: about 1 ms on one server
// in the default mode, a group commit of the log under sync always (10-30
// ms on this machine's disk), a replicated write on a cluster (several
// ms). Were the claim made in a handler's slot, a fast handler's slot would
// spend much of its time waiting for claims (under sync always each group
// commit would carry at most the slots that freed during the last one). So
// while every slot is busy, an item may be claimed ahead: its claim is
// written while the handlers run, and its handler starts the moment a slot
// frees.
//
// How many may be claimed ahead is four times the number of slots expected
// to free during one claim: the claim's latency (a running average) × the
// handlers' ends per second (over the last one to two seconds), at most
// aheadFactor × Concurrency. None unless a claim waits for more than a
// round trip: for a group commit of the log (a single server under sync
// always) or a replicated write (a cluster). On one server in the default
// mode, about 1 ms a claim, claims ahead cost plain jobs 3-10 % of their
// throughput (more CPU a job; 2026-11-30: 10 % over eight alternated pairs,
// then 3-4 % between the medians of six; not the slots' holds, which
// removed changed nothing),
// though they gain a wide workflow 10-15 % since the steps claimed at once
// share their reads of the workflow's new events (Store.ParentEnded; before
// that, they cost it a third). None while a handler that ended in those
// seconds, or one still running, ran for more than half of minSeatWait (a
// mix of fast and slow handlers would leave jobs claimed ahead waiting
// behind the slow ones; counting only those that ended, a worker claimed
// ahead while its first slow handlers were still running, and 1.8 % of the
// soak's jobs were given back).
// With handlers much slower than a claim it is 0, and nothing is hoarded:
// a job claimed ahead waits a few claims' time for its slot at most, about
// what it would have waited before its claim anyway. Such a job is running as its record
// says (it is this worker's, listed in its heartbeats, its lease renewed),
// with its handler not started yet. Its cancel and its timeout end the
// wait, as they would end its handler; so do Stop (it has not started:
// another worker may run it now) and seatWait (when the handlers turned
// out slower than the average said): the job is then given back to its
// queue, no retry spent, and none is claimed ahead for seatWait after that
// (else a worker whose slots are stuck would claim and give back the same
// jobs over and over).
//
// Handler slots go to the items claimed, in the order the items were
// fetched (a queue with priorities orders its starts so): a slot waits for
// an item fetched earlier whose claim is on its way, for at most holdFor
// (about two claims); then it goes to the next.
//
// Only jobs are claimed ahead; a fan-out's batches are not (they have no
// claim to write), but they take their slots in the same order.

// Bounds of claims ahead.
const (
	// aheadFactor: at most this many times Concurrency are claimed ahead.
	aheadFactor = 8
	// minSeatWait: an item claimed ahead waits at least this long for a
	// handler slot (and 4 claim latencies) before it is given back.
	minSeatWait = time.Second
	// maxClaimSample bounds one claim's weight in the claims' average (a
	// claim answered with an error reads the log back for up to minutes).
	maxClaimSample = time.Second
	// minHold: a slot waits at least this long for an earlier item's claim.
	minHold = time.Millisecond
	// completingFactor: at most this many times Concurrency outcomes are
	// being recorded at once (a group commit carries those of many slots).
	completingFactor = 8
	// bigResult: a result larger than this takes one of only Concurrency
	// places among the outcomes being recorded, so that those held in
	// memory stay near what the handlers hold.
	bigResult = 64 << 10
)

// seats hands out a runtime's places (the items it is processing: at most
// Concurrency, and those claimed ahead besides) and its handler slots
// (Concurrency), the slots in fetch order.
type seats struct {
	r    *Runtime
	conc int

	mu       sync.Mutex
	inFlight int           // places held
	running  int           // handler slots held
	ticket   uint64        // the next item's
	claiming []*place      // jobs whose claim is on its way, by ticket (so by since too)
	waiting  []*place      // items waiting for a slot, by ticket
	freed    chan struct{} // closed (and made again) when a place is given back and awaited
	awaited  bool          // someone waits on freed
	recheck  time.Time     // when a grant is scheduled (a hold ends), zero if none
	// granted are the places given a slot, in the order of their grants;
	// those whose handler ended are dropped from its front as they come
	// there, and all at once when it grows past twice Concurrency. Its
	// first running one is the oldest handler running.
	granted []*place
}

func newSeats(r *Runtime, conc int) *seats {
	return &seats{r: r, conc: conc, freed: make(chan struct{})}
}

// place is what an item holds while it is processed: its place (its
// ticket), and, once granted, a handler slot. Its fields are guarded by
// the seats' mu.
type place struct {
	s        *seats
	ticket   uint64
	since    time.Time // when it was fetched
	ahead    bool      // taken beyond Concurrency: claimed ahead
	held     bool      // it holds its place
	claiming bool      // in s.claiming
	waiting  bool      // in s.waiting
	running  bool      // it holds a handler slot
	granted  chan struct{}
	grantAt  time.Time // when it was given its slot
}

// take takes a place for an item, claimed ahead if mayAhead allows it,
// without waiting; it returns nil, and a channel closed when a place is
// given back, when none is free. A job's place is among those claiming.
func (s *seats) take(mayAhead bool) (*place, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inFlight >= s.limit(mayAhead) {
		s.awaited = true
		return nil, s.freed
	}
	s.inFlight++
	p := &place{s: s, ticket: s.ticket, since: time.Now(), ahead: s.inFlight > s.conc, held: true}
	s.ticket++
	if mayAhead {
		p.claiming = true
		s.claiming = append(s.claiming, p) // the largest ticket yet
	}
	return p, nil
}

// free gives back what p holds: its handler slot, its place.
func (p *place) free() {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaveLocked(p)
	if p.running {
		p.running = false
		s.running--
	}
	if p.held {
		p.held = false
		s.inFlight--
		if s.awaited {
			close(s.freed)
			s.freed, s.awaited = make(chan struct{}), false
		}
	}
	s.grantLocked()
}

// leave takes p out of the claiming and the waiting (its claim failed, or
// it will not start): a slot no longer waits for it.
func (p *place) leave() {
	s := p.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaveLocked(p)
	s.grantLocked()
}

func (s *seats) leaveLocked(p *place) {
	if p.claiming {
		p.claiming = false
		s.claiming = remove(s.claiming, p)
	}
	if p.waiting {
		p.waiting = false
		s.waiting = remove(s.waiting, p)
	}
}

// byTicket orders places by ticket (for slices.BinarySearchFunc).
func byTicket(q *place, ticket uint64) int { return cmp.Compare(q.ticket, ticket) }

// remove removes p from ps, sorted by ticket.
func remove(ps []*place, p *place) []*place {
	i, ok := slices.BinarySearchFunc(ps, p.ticket, byTicket)
	if !ok {
		return ps
	}
	return slices.Delete(ps, i, i+1)
}

// grantLocked gives the free slots to the items waiting, lowest ticket
// first; it holds a slot back while an item fetched before the first one
// waiting is still being claimed, for at most holdFor since that item was
// fetched.
func (s *seats) grantLocked() {
	var now time.Time
	for s.running < s.conc && len(s.waiting) > 0 {
		w := s.waiting[0]
		if until, ok := s.holdLocked(w.ticket); ok {
			s.scheduleLocked(until)
			return
		}
		s.waiting = s.waiting[1:]
		w.waiting, w.running = false, true
		s.running++
		if now.IsZero() {
			now = time.Now()
		}
		w.grantAt = now
		s.granted = append(s.granted, w)
		s.trimGrantedLocked()
		close(w.granted)
	}
}

// trimGrantedLocked drops from granted the places whose handler ended: those
// at its front, and all of them once it holds more than twice Concurrency
// (ended handlers behind a long one), so that it stays within that bound
// whether or not anything asks for the oldest (a runtime of batches only
// never does).
func (s *seats) trimGrantedLocked() {
	for len(s.granted) > 0 && !s.granted[0].running {
		s.granted[0] = nil
		s.granted = s.granted[1:]
	}
	if len(s.granted) > 2*s.conc {
		s.granted = slices.DeleteFunc(s.granted, func(p *place) bool { return !p.running })
	}
}

// oldestRunningLocked is when the handler running longest was given its
// slot (zero: none runs).
func (s *seats) oldestRunningLocked() time.Time {
	s.trimGrantedLocked()
	if len(s.granted) == 0 {
		return time.Time{}
	}
	return s.granted[0].grantAt
}

// holdLocked reports whether an item fetched before ticket is still being
// claimed, and fetched within holdFor: until when a slot waits for it.
func (s *seats) holdLocked(ticket uint64) (time.Time, bool) {
	if len(s.claiming) == 0 || s.claiming[0].ticket > ticket {
		return time.Time{}, false
	}
	now := time.Now()
	hold := s.r.holdFor()
	// claiming is in fetch order: the recent ones are at its end.
	i, _ := slices.BinarySearchFunc(s.claiming, now.Add(-hold), func(q *place, t time.Time) int { return q.since.Compare(t) })
	if i == len(s.claiming) || s.claiming[i].ticket > ticket {
		return time.Time{}, false
	}
	return s.claiming[i].since.Add(hold), true
}

// scheduleLocked has the slots granted again at until, unless that is
// scheduled already.
func (s *seats) scheduleLocked(until time.Time) {
	if !s.recheck.IsZero() && !s.recheck.After(until) {
		return
	}
	s.recheck = until
	time.AfterFunc(time.Until(until), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.recheck.After(until) {
			s.recheck = time.Time{}
		}
		s.grantLocked()
	})
}

// seat waits for a handler slot for p. It returns why not when something
// comes first: ctx's end (its cause), or, for an item claimed ahead, the
// runtime stopping (ErrShutdown) or seatWait passing (errNotSeated). The
// job's execution timeout runs from its claim, as the Reaper reckons it, so
// that wait is also bounded by a tenth of timeout.
func (p *place) seat(ctx context.Context, timeout time.Duration) error {
	s := p.s
	s.mu.Lock()
	ahead := p.ahead
	p.granted = make(chan struct{})
	granted := p.granted
	s.leaveLocked(p)
	p.waiting = true
	i, _ := slices.BinarySearchFunc(s.waiting, p.ticket, byTicket)
	s.waiting = slices.Insert(s.waiting, i, p)
	s.grantLocked()
	s.mu.Unlock()

	var expired <-chan time.Time // nil: no bound
	var stopping <-chan struct{} // nil: runs in Stop's grace like a running handler
	if ahead {
		stopping = s.r.stopping
		wait := s.r.seatWait()
		if timeout > 0 {
			wait = min(wait, timeout/10)
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		expired = t.C
	}
	var err error
	select {
	case <-granted:
		return nil
	case <-ctx.Done():
		err = context.Cause(ctx)
	case <-stopping:
		err = ErrShutdown
	case <-expired:
		s.r.unseatedUntil.Store(time.Now().Add(s.r.seatWait()).UnixNano())
		err = errNotSeated
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.leaveLocked(p)
	if p.running { // granted meanwhile: the slot is the next one's
		p.running = false
		s.running--
	}
	s.grantLocked()
	return err
}

// fetchSize is how many items a fetch of jobs (mayAhead) or batches asks
// for: the places free now, so that fetched items do not wait here while
// their lease runs, but at least half of Concurrency, so that a busy
// runtime does not fetch one item at a time.
func (s *seats) fetchSize(mayAhead bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.limit(mayAhead)-s.inFlight, (s.conc+1)/2)
}

// limit is how many places items may hold: Concurrency, and with mayAhead
// those that may be claimed ahead now.
func (s *seats) limit(mayAhead bool) int {
	if mayAhead {
		return s.conc + s.r.aheadAllowedAt(time.Now(), s.oldestRunningLocked())
	}
	return s.conc
}

// seatWait bounds how long an item claimed ahead waits for a slot before
// it is given back (for another worker): long past the claim latency that
// made it worth claiming ahead, when the handlers running turned out slow.
func (r *Runtime) seatWait() time.Duration {
	return max(minSeatWait, 4*time.Duration(r.claimTime.get()))
}

// holdFor is how long a slot waits for an item fetched earlier whose claim
// is on its way: two claims.
func (r *Runtime) holdFor() time.Duration {
	return max(minHold, 2*time.Duration(r.claimTime.get()))
}

// handlerEnded records that a handler ended at now after running for d.
func (r *Runtime) handlerEnded(now time.Time, d time.Duration) { r.ends.add(now, d) }

// aheadAllowedAt is how many items may be claimed ahead at now, the
// oldest handler running given its slot at oldest (zero: none runs): four
// times the slots expected to free during one claim, at most aheadFactor ×
// Concurrency. The seats' lock is held (seats.limit).
func (r *Runtime) aheadAllowedAt(now, oldest time.Time) int {
	if now.UnixNano() < r.unseatedUntil.Load() {
		return 0 // a job found no slot in time lately
	}
	if n := r.fixedAhead.Load(); n > 0 {
		return int(n)
	}
	if !r.slowClaims {
		return 0 // about 1 ms a claim (see above)
	}
	c := time.Duration(r.claimTime.get())
	perSecond, slowest := r.ends.rate(now)
	if !oldest.IsZero() {
		slowest = max(slowest, now.Sub(oldest))
	}
	if slowest > minSeatWait/2 {
		return 0 // a handler that slow (ended lately, or running) could keep a job claimed ahead past seatWait
	}
	n := 4 * c.Seconds() * perSecond
	return int(min(n, float64(aheadFactor*r.cfg.Concurrency)))
}

// endWindow is the window over which handlers' ends are counted.
const endWindow = time.Second

// endRate counts handlers' ends per second, and keeps the longest handler,
// over the last one to two endWindows: the window under way and the one
// before it.
type endRate struct {
	mu              sync.Mutex
	start           time.Time     // of the window under way (zero: none yet)
	cur, prev       int           // ends in it, and in the one before
	curMax, prevMax time.Duration // the longest handler of each
	hasPrev         bool          // the one before it counted
}

func (e *endRate) add(now time.Time, d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.roll(now)
	e.cur++
	e.curMax = max(e.curMax, d)
}

// rate is the ends per second over the window under way and the one before
// it (over at least a tenth of a window), and the longest handler of them.
func (e *endRate) rate(now time.Time) (perSecond float64, slowest time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.roll(now)
	if e.start.IsZero() {
		return 0, 0
	}
	over := now.Sub(e.start)
	if e.hasPrev {
		over += endWindow
	}
	return float64(e.cur+e.prev) / max(over, endWindow/10).Seconds(), max(e.curMax, e.prevMax)
}

func (e *endRate) roll(now time.Time) {
	switch d := now.Sub(e.start); {
	case e.start.IsZero() || d >= 2*endWindow:
		e.start, e.cur, e.prev, e.curMax, e.prevMax, e.hasPrev = now, 0, 0, 0, 0, false
	case d >= endWindow:
		e.start, e.cur, e.prev, e.curMax, e.prevMax, e.hasPrev = e.start.Add(endWindow), 0, e.cur, 0, e.curMax, true
	}
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
