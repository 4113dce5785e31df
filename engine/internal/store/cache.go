package store

import (
	"context"
	"sync"
)

// Warm is the first read of a cache that watches of buckets keep current
// (the registry's, the tokens', the queues' limits): the first Wait starts
// the watches, and every Wait returns once each of them has read what its
// bucket held (or ctx is done).
type Warm struct {
	once sync.Once
	done chan struct{}
}

// Wait starts follows the first time it is called (each tells ready once
// its first read is done: Aggregate.Feed), and waits for them.
func (w *Warm) Wait(ctx context.Context, follows ...func(ready func())) error {
	w.once.Do(func() {
		w.done = make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(len(follows))
		for _, follow := range follows {
			go follow(sync.OnceFunc(wg.Done))
		}
		go func() { wg.Wait(); close(w.done) }()
	})
	select {
	case <-w.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Feed is a follow of the aggregate's bucket for a Warm: follow, feeding
// fn.
func (a *Aggregate[R]) Feed(fn func(rec *R)) func(ready func()) {
	return func(ready func()) { a.follow(ready, fn) }
}
