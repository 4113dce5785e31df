// Package pull hands the messages of a durable consumer to a callback, one
// Fetch at a time: the worker runtime's and the promoter's way to pull.
package pull

import (
	"context"
	"errors"
	"log/slog"
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
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}
}

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
	for p.ctx.Err() == nil {
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

// Signal tells the puller to stop. What its current fetch received is
// still handed to the callback; a message the server sent at that very
// moment is dropped and comes again after the consumer's AckWait.
func (p *Puller) Signal() { p.cancel() }

// Stop stops the puller and waits until its callback is no longer called.
func (p *Puller) Stop() {
	p.Signal()
	<-p.done
}
