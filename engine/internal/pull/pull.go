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
	since     atomic.Int64 // when it was signalled (UnixNano), 0 before
}

// stopWait is how long the current fetch goes on after Signal, handing
// over what the server sends it, before it is cancelled.
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
// for stopWait more (or until it ends by itself): everything the server
// sends it is handed to the callback, which gives back what it will not run
// with GiveBack. Cancelling the fetch at once would drop what is in flight
// at that moment, to come again only after the consumer's AckWait.
func (p *Puller) Signal() {
	if p.since.CompareAndSwap(0, time.Now().UnixNano()) {
		p.signalled.Store(true)
		time.AfterFunc(stopWait, p.cancel)
	}
}

// GiveBack hands back a message that a stopping puller's callback will not
// run. It comes again after the puller's fetch has ended, so to another
// puller: given back at once, it would come to the same fetch again and
// again, each delivery counted (a batch's attempts are its deliveries).
func GiveBack(m jetstream.Msg) error { return m.NakWithDelay(2 * stopWait) }

// Stop stops the puller and waits until its callback is no longer called:
// at most stopWait after Signal, when the current fetch is cancelled. A
// message in flight to it at that instant is dropped (it comes again after
// the consumer's AckWait).
func (p *Puller) Stop() {
	p.Signal()
	<-p.done
	p.cancel()
}
