// Package pull hands the messages of a durable consumer to a callback, one
// Fetch at a time: the worker runtime's and the promoter's way to pull.
package pull

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// pullWait is how long one fetch waits for messages: an idle puller sends
// one request per pullWait.
const pullWait = 5 * time.Second

// Puller hands the messages of a durable consumer to a callback, one
// Fetch at a time, until it is stopped.
//
// Not Consume: in nats.go v1.55, Consume refills its pull request from the
// callback's goroutine only while its publishing goroutine is idle
// (pull.go, checkPending). When the server answers a refill before that
// goroutine returns, the next refill is skipped and none is left
// outstanding, so the consumer receives nothing until its missing
// heartbeat fires 30 s later. With a few slots per worker this stalled one
// run in eight under load (and once in CI). A fetch loop always has its
// next request out as soon as its last batch is handed over.
type Puller struct {
	ctx       context.Context
	cancel    context.CancelFunc
	done      chan struct{}
	signalled atomic.Bool  // no fetch after the current one
	since     atomic.Int64 // when it was first signalled (UnixNano)
}

// stopWait is how long Stop lets the current fetch end by itself after
// Signal before it cancels it. A message given back while the puller
// stops comes to the fetch again until its batch is full: this lets that
// end, so that no pull request is left on the server when it is cancelled.
const stopWait = 250 * time.Millisecond

// Start starts a puller. size says how many messages to ask for next
// (at least 1 is asked for); cb may block, which holds back the next fetch.
func Start(cons jetstream.Consumer, size func() int, cb func(jetstream.Msg), log *slog.Logger) *Puller {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Puller{ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go p.run(cons, size, cb, log)
	return p
}

func (p *Puller) run(cons jetstream.Consumer, size func() int, cb func(jetstream.Msg), log *slog.Logger) {
	defer close(p.done)
	pause := time.Duration(0)
	for p.ctx.Err() == nil && !p.signalled.Load() {
		if pause > 0 {
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(pause):
			}
		}
		ctx, cancel := context.WithTimeout(p.ctx, pullWait)
		batch, err := cons.Fetch(max(1, size()), jetstream.FetchContext(ctx))
		if err == nil {
			for m := range batch.Messages() {
				cb(m)
			}
			err = batch.Error()
		}
		cancel()
		if err == nil || p.ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
			pause = 0
			continue
		}
		// The server is away or the consumer is gone: ask again, less often.
		log.Debug("fetch", "err", err)
		pause = min(max(2*pause, 50*time.Millisecond), pullWait)
	}
}

// Signal tells the puller to fetch no more. Its current fetch goes on
// until it ends (its batch filled, or its wait over): everything the
// server sends for it is handed to the callback, which gives back what it
// will not run (a Nak: at once to another worker). Cancelling the fetch
// instead would drop what is in flight at that moment, to come again only
// after the consumer's AckWait.
func (p *Puller) Signal() {
	p.since.CompareAndSwap(0, time.Now().UnixNano())
	p.signalled.Store(true)
}

// Stop stops the puller and waits until its callback is no longer called.
// The current fetch has until stopWait after Signal to end by itself; then
// it is cancelled, and a message in flight to it at that instant is
// dropped (it comes again after the consumer's AckWait).
func (p *Puller) Stop() {
	p.Signal()
	t := time.NewTimer(time.Until(time.Unix(0, p.since.Load()).Add(stopWait)))
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	p.cancel()
	<-p.done
}
