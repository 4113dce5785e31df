package runtime

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/lifecycle"
)

// presence keeps an SDK worker's record in the worker registry: written
// when its first runtime starts, rewritten at every beat (a third of its
// shortest lease) with the jobs its runtimes hold, which is the evidence
// that their leases are renewed (commands.LeaseLeft), and deleted when its
// last runtime stops. The runtimes of one worker id in a process share one
// (joinPresence).
//
// It costs nothing per job: one KV write per worker per beat.
type presence struct {
	workers *store.Workers
	log     *slog.Logger

	life     lifecycle.Loop
	mu       sync.Mutex
	rec      domain.WorkerRecord
	runtimes map[*Runtime]bool
}

// presences are the SDK workers of this process, by store (a process may
// open several) and worker id.
var (
	presenceMu sync.Mutex
	presences  = map[presenceKey]*presence{}
)

type presenceKey struct {
	store *store.Store
	id    string
}

// joinPresence adds rt to the presence of its worker id, starting it (and
// writing the record) if rt is the first.
func joinPresence(ctx context.Context, rt *Runtime) error {
	presenceMu.Lock()
	defer presenceMu.Unlock()
	id := rt.cfg.WorkerID
	key := presenceKey{rt.store, id}
	p := presences[key]
	if p == nil {
		p = &presence{workers: rt.store.Workers(), runtimes: map[*Runtime]bool{},
			log: rt.cfg.Log.With("component", "presence", "worker", id),
			rec: domain.WorkerRecord{ID: id, Name: id, Kind: domain.WorkerSDK, RegisteredAt: time.Now().UTC(),
				Namespace: rt.cfg.Namespace, QueueConcurrency: map[string]int{}}}
		if rt.cfg.Kind != "" {
			p.rec.Kind = rt.cfg.Kind
		}
		if p.rec.Namespace == "" {
			p.rec.Namespace = domain.DefaultNS
		}
	}
	p.mu.Lock()
	p.runtimes[rt] = true
	for t := range rt.cfg.Handlers {
		if !slices.Contains(p.rec.Types, t) {
			p.rec.Types = append(p.rec.Types, t)
		}
	}
	sort.Strings(p.rec.Types)
	if !slices.Contains(p.rec.Queues, rt.cfg.Queue) {
		p.rec.Queues = append(p.rec.Queues, rt.cfg.Queue)
	}
	p.rec.Concurrency += rt.cfg.Concurrency
	p.rec.QueueConcurrency[rt.cfg.Queue] += rt.cfg.Concurrency
	err := p.beatLocked(ctx)
	p.mu.Unlock()
	if err != nil {
		p.mu.Lock()
		delete(p.runtimes, rt)
		p.rec.Concurrency -= rt.cfg.Concurrency
		p.leaveQueueLocked(rt)
		p.mu.Unlock()
		return err
	}
	if presences[key] == nil {
		presences[key] = p
		_ = p.life.Start(func() (func(context.Context), error) { return p.loop, nil })
	}
	return nil
}

// leavePresence takes rt out of its worker's presence; the last to leave
// stops it and deletes the record.
func leavePresence(ctx context.Context, rt *Runtime) {
	key := presenceKey{rt.store, rt.cfg.WorkerID}
	presenceMu.Lock()
	p := presences[key]
	if p == nil {
		presenceMu.Unlock()
		return
	}
	p.mu.Lock()
	if p.runtimes[rt] {
		delete(p.runtimes, rt)
		p.rec.Concurrency -= rt.cfg.Concurrency
		p.leaveQueueLocked(rt)
	}
	last := len(p.runtimes) == 0
	p.mu.Unlock()
	if last {
		delete(presences, key)
	}
	presenceMu.Unlock()
	if last {
		p.stop(ctx)
	}
}

// every is how often the worker beats: a third of its shortest lease.
func (p *presence) every() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := time.Duration(0)
	for rt := range p.runtimes {
		if l := rt.cfg.Lease / 3; d == 0 || l < d {
			d = l
		}
	}
	return max(d, 100*time.Millisecond)
}

func (p *presence) loop(ctx context.Context) {
	for {
		t := time.NewTimer(p.every())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		p.mu.Lock()
		err := p.beatLocked(ctx)
		p.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			p.log.Warn("heartbeat", "err", err)
		}
	}
}

// beatLocked writes the record with the claims held now.
func (p *presence) beatLocked(ctx context.Context) error {
	claims := []string{}
	for rt := range p.runtimes {
		claims = append(claims, rt.claims()...)
	}
	p.rec.LastHeartbeat = time.Now().UTC()
	p.rec.Claims = claims
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return p.workers.Put(wctx, &p.rec)
}

func (p *presence) stop(ctx context.Context) {
	p.life.Stop(context.WithoutCancel(ctx))
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := p.workers.Delete(dctx, p.rec.ID); err != nil {
		p.log.Warn("unregister", "err", err)
	}
}

// leaveQueueLocked takes rt's handlers out of its queue's concurrency.
func (p *presence) leaveQueueLocked(rt *Runtime) {
	q := rt.cfg.Queue
	p.rec.QueueConcurrency[q] -= rt.cfg.Concurrency
	if p.rec.QueueConcurrency[q] <= 0 {
		delete(p.rec.QueueConcurrency, q)
	}
}
