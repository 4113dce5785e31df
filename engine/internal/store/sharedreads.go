package store

import (
	"context"
	"sync"

	"github.com/jetflow/jetflow/internal/domain"
)

// parentReads shares ParentEnded's reads of one parent among the children
// that ask at once (steps of a workflow, pieces of a fan-out, claimed
// together). A child must see every transition of its parent that was in
// the log before it asked (its own start or claim is in the log by then),
// so it may take the answer of a read that began after it asked, never of
// one already under way. So there is one read of a parent at a time, and
// the next one, which every child that asks meanwhile joins, begins when
// it ends. A hundred children claimed together cost two reads, not
// a hundred reads of the same new events.
type parentReads struct {
	mu sync.Mutex
	m  map[string]*parentRead // parent id -> its reads
}

// parentRead is the reads of one parent: the one under way and the next.
type parentRead struct {
	running *parentFlight // begun; nil: none
	next    *parentFlight // not begun yet: those who ask now join it
}

// parentFlight is one read and its answer, for all who joined it.
type parentFlight struct {
	done     chan struct{} // closed once state and ok are set
	state    domain.State
	ok       bool
	finished bool // set under parentReads.mu once the read ended
	askers   int  // who take its answer, its maker included (under parentReads.mu)
}

// do returns read's answer for parent id, from a read that began after do
// was called: its own, or one it shared with others who asked meanwhile.
// ok false (read's, or ctx ended while waiting) means: no answer, read it
// another way.
func (p *parentReads) do(ctx context.Context, id string, read func() (domain.State, bool)) (domain.State, bool) {
	p.mu.Lock()
	if p.m == nil {
		p.m = make(map[string]*parentRead)
	}
	r := p.m[id]
	if r == nil {
		r = &parentRead{}
		p.m[id] = r
	}
	if r.next == nil && (r.running == nil || r.running.finished) { // nothing under way: read now
		f := &parentFlight{done: make(chan struct{}), askers: 1}
		r.running = f
		p.mu.Unlock()
		return p.run(id, r, f, read)
	}
	if f := r.next; f != nil { // join the next read, which begins later
		f.askers++
		p.mu.Unlock()
		select {
		case <-f.done:
			return f.state, f.ok
		case <-ctx.Done():
			return "", false
		}
	}
	// Make the next read, and begin it when the one under way ends.
	f := &parentFlight{done: make(chan struct{}), askers: 1}
	r.next = f
	before := r.running
	p.mu.Unlock()
	select {
	case <-before.done:
	case <-ctx.Done():
		// Leave; whoever joined this read reads another way.
		p.mu.Lock()
		if r.next == f {
			r.next = nil
		}
		p.forgetIdle(id, r)
		p.mu.Unlock()
		close(f.done)
		return "", false
	}
	p.mu.Lock()
	if r.next != f { // (cannot happen: only its maker unlinks it)
		p.mu.Unlock()
		close(f.done) // those who joined read another way
		return "", false
	}
	r.running, r.next = f, nil
	p.mu.Unlock()
	return p.run(id, r, f, read)
}

// run makes read f, under way as r.running. Once it ended, it stays
// r.running (ended) until the next read, if one was asked for meanwhile,
// takes its place, so that those who ask in between join that one; with
// none, id is forgotten.
func (p *parentReads) run(id string, r *parentRead, f *parentFlight, read func() (domain.State, bool)) (domain.State, bool) {
	defer func() {
		p.mu.Lock()
		f.finished = true
		p.forgetIdle(id, r)
		p.mu.Unlock()
		close(f.done)
	}()
	f.state, f.ok = read()
	return f.state, f.ok
}

// forgetIdle forgets the reads of id when none is under way or asked for.
// p.mu is held.
func (p *parentReads) forgetIdle(id string, r *parentRead) {
	if r.next != nil || (r.running != nil && !r.running.finished) {
		return
	}
	r.running = nil
	if p.m[id] == r {
		delete(p.m, id)
	}
}
