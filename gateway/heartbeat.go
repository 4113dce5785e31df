package gateway

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/streams"
)

// A heartbeat that waits (its body's "wait"): renewed at once, it is
// answered as soon as one of the worker's jobs or batches is lost, or when
// the wait is over. The gateway keeps nothing of it but the request: it
// hears of losses on the cancel broadcast that the engine publishes (a
// cancel, an execution timeout, a lease written off, a parent of batches
// that ended), through one subscription shared by every waiting heartbeat
// (cancelHub), and looks at the worker's claims again when one of them is
// named; a batch's deadline wakes it too. Waiting heartbeats count against
// Config.MaxStreams like every long poll.

// heartbeatRequest is the optional body of POST /workers/{id}/heartbeat.
type heartbeatRequest struct {
	// Wait holds the answer until a claim is lost or this passed (seconds
	// or "10s"; capped at Config.MaxWait; 0 or left out: answer at once).
	Wait *commands.Duration `json:"wait,omitempty"`
}

// decodeHeartbeat decodes and checks a heartbeat's body (empty: none).
func decodeHeartbeat(body []byte) (*heartbeatRequest, error) {
	var h heartbeatRequest
	if err := decodeStrict(body, &h, true); err != nil {
		return nil, err
	}
	if h.Wait != nil && *h.Wait < 0 {
		return nil, &commands.InputError{Field: "wait", Value: time.Duration(*h.Wait).String(), Reason: "must not be negative"}
	}
	return &h, nil
}

// cancelHub hands the cancel broadcast (streams.CancelSubject: ids of jobs
// that a holder may have lost) to the heartbeats waiting for those ids.
type cancelHub struct {
	nc *nats.Conn

	mu      sync.Mutex
	sub     *nats.Subscription
	waiters map[string]map[*hubWatch]struct{}
}

// hubWatch is one waiting heartbeat's interest: the ids it listens for.
type hubWatch struct {
	hub  *cancelHub
	ch   chan struct{}
	keys []string
}

// watch returns a watch of no ids yet; the subscription is made at the
// first one, and is in place (flushed) when watch returns.
func (h *cancelHub) watch() (*hubWatch, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sub == nil {
		sub, err := h.nc.Subscribe(streams.CancelSubject, h.deliver)
		if err != nil {
			return nil, err
		}
		if err := h.nc.Flush(); err != nil {
			_ = sub.Unsubscribe()
			return nil, err
		}
		h.sub = sub
		h.waiters = map[string]map[*hubWatch]struct{}{}
	}
	return &hubWatch{hub: h, ch: make(chan struct{}, 1)}, nil
}

// set makes keys the ids the watch listens for.
func (w *hubWatch) set(keys []string) {
	h := w.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	w.dropLocked()
	if h.waiters == nil {
		return // closed
	}
	w.keys = keys
	for _, id := range keys {
		if h.waiters[id] == nil {
			h.waiters[id] = map[*hubWatch]struct{}{}
		}
		h.waiters[id][w] = struct{}{}
	}
}

func (w *hubWatch) dropLocked() {
	for _, id := range w.keys {
		delete(w.hub.waiters[id], w)
		if len(w.hub.waiters[id]) == 0 {
			delete(w.hub.waiters, id)
		}
	}
	w.keys = nil
}

// stop forgets the watch.
func (w *hubWatch) stop() {
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	w.dropLocked()
}

func (h *cancelHub) deliver(m *nats.Msg) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters[string(m.Data)] {
		select {
		case w.ch <- struct{}{}:
		default:
		}
	}
}

// close drops the subscription (the gateway stops).
func (h *cancelHub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sub != nil {
		_ = h.sub.Unsubscribe()
		h.sub, h.waiters = nil, nil
	}
}

// lossWatch is what a waiting heartbeat listens to: the cancel broadcast
// for the ids of its worker's claims, and its worker's record, whose
// claims change while it waits (a claim made meanwhile is listened for at
// once).
type lossWatch struct {
	hub    *hubWatch
	sub    *nats.Subscription
	claims chan []string // the record's claims after each write of it
	gone   chan struct{} // the record was deleted
}

// watchLosses starts listening for the losses of worker's claims; stop
// ends it. Nothing broadcast after it returns is missed.
func (g *Gateway) watchLosses(worker string, claims []string) (*lossWatch, error) {
	hw, err := g.cancels.watch()
	if err != nil {
		return nil, err
	}
	lw := &lossWatch{hub: hw, claims: make(chan []string, 1), gone: make(chan struct{}, 1)}
	lw.sub, err = g.store.NC.Subscribe("$KV."+streams.WorkersBucket+"."+worker, func(m *nats.Msg) {
		if op := m.Header.Get("KV-Operation"); op == "DEL" || op == "PURGE" {
			select {
			case lw.gone <- struct{}{}:
			default:
			}
			return
		}
		var rec workerRecord
		if streams.Unmarshal(m.Data, &rec) != nil {
			return
		}
		select { // the newest claims replace ones not taken yet
		case <-lw.claims:
		default:
		}
		lw.claims <- rec.Claims
	})
	if err == nil {
		err = g.store.NC.Flush()
	}
	if err != nil {
		lw.stop()
		return nil, err
	}
	lw.hub.set(lossKeys(claims))
	return lw, nil
}

func (lw *lossWatch) stop() {
	if lw.sub != nil {
		_ = lw.sub.Unsubscribe()
	}
	lw.hub.stop()
}

// lossKeys are the ids whose broadcast may mean that one of claims is
// lost: a job's own, a batch's parent's.
func lossKeys(claims []string) []string {
	keys := make([]string, 0, len(claims))
	for _, id := range claims {
		if engine.IsBatchID(id) {
			id = engine.BatchParent(id)
		}
		if id != "" && !slices.Contains(keys, id) {
			keys = append(keys, id)
		}
	}
	return keys
}

// wait waits up to d for one of the worker's claims to be lost, and
// returns the renewal as it is at the end: at once when a claim is lost
// (it is looked at again when its id is broadcast, or a batch's deadline
// comes), else when d passed, looked at again then.
func (lw *lossWatch) wait(ctx context.Context, g *Gateway, worker string, rn engine.Renewal, d time.Duration) engine.Renewal {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	claims := append(slices.Clip(rn.Held), rn.Unchecked...)
	for {
		var due <-chan time.Time
		var t *time.Timer
		if !rn.Due.IsZero() {
			t = time.NewTimer(time.Until(rn.Due) + 10*time.Millisecond)
			due = t.C
		}
		look := false
		select {
		case <-lw.hub.ch:
			look = true
		case <-due:
			look = true
		case c := <-lw.claims:
			claims = c
			lw.hub.set(lossKeys(c))
		case <-lw.gone:
			look = true
		case <-ctx.Done():
			look = true
		}
		if t != nil {
			t.Stop()
		}
		if !look {
			continue
		}
		next, err := g.remote.Renew(context.WithoutCancel(ctx), worker, claims)
		if err != nil {
			g.log.Warn("heartbeat: claims not renewed", "worker", worker, "unchecked", next.Unchecked, "err", err)
		}
		if len(next.Lost) > 0 || ctx.Err() != nil {
			return next
		}
		rn = next
	}
}

// heartbeatWait is how long a heartbeat asked to wait, capped.
func (g *Gateway) heartbeatWait(req *heartbeatRequest) time.Duration {
	if req.Wait == nil {
		return 0
	}
	return min(time.Duration(*req.Wait), g.cfg.MaxWait)
}
