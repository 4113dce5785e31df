package gateway

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jetflow/jetflow/engine"
)

// Cadence of the live stream.
const (
	streamFlush = 200 * time.Millisecond // changes are coalesced for this long
	streamSide  = 2 * time.Second        // queues and workers are sent this often
	// streamMaxBatch is the most job events sent for one flush; past it,
	// a "bulk" event tells the client to reload its page.
	streamMaxBatch = 200
)

// GET /stream: the dashboard's live feed, as Server-Sent Events fed by the
// index (one watch of the jobs bucket shared by every client):
//
//	event: job      a job changed (a Summary; deleted: true when purged)
//	event: counts   jobs by state for the stream's namespace, queue and type filter
//	event: queues   every queue (with=queues), every 2s
//	event: workers  every registered worker (with=workers), every 2s
//	event: bulk     more jobs changed at once than are sent one by one:
//	                reload the page (GET /jobs)
//	event: resync   changes were dropped (a slow client): reload
//
// Query: queue, type, namespace, parent filter the job events;
// with=queues,workers adds those.
func (g *Gateway) stream(w http.ResponseWriter, r *http.Request) {
	if err := g.index.waitSynced(r.Context()); err != nil {
		fail(w, r, err, "")
		return
	}
	q := r.URL.Query()
	queue, jobType, ns, parent := q.Get("queue"), q.Get("type"), q.Get("namespace"), q.Get("parent")
	f := engine.Filter{Queue: queue, Type: jobType, Namespace: ns, Parent: parent}
	if err := f.Validate(); err != nil {
		fail(w, r, err, "")
		return
	}
	with := q.Get("with")
	wantQueues, wantWorkers := strings.Contains(with, "queues"), strings.Contains(with, "workers")
	if r.Method == http.MethodHead {
		sseHeaders(w)
		return
	}
	release, err := g.hold(w)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	defer release()
	sub := g.index.subscribe()
	defer g.index.unsubscribe(sub)
	sse, err := startSSE(w)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	ctx, cancel := g.revocable(r)
	defer cancel()
	stop := context.AfterFunc(g.base(), cancel)
	defer stop()

	sendSide := func() error {
		if wantQueues {
			if qs, err := g.cachedQueues(ctx); err == nil {
				if err := sse.send("queues", "", g.scopedQueues(r, qs)); err != nil {
					return err
				}
			}
		}
		if wantWorkers {
			if recs, err := g.cachedWorkers(ctx); err == nil {
				views := make([]*WorkerView, 0, len(recs))
				for _, rec := range recs {
					if seesWorker(r, rec) == nil {
						views = append(views, g.workerView(r, rec))
					}
				}
				if err := sse.send("workers", "", views); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if sse.send("counts", "", g.statsFor(ns, queue, jobType)) != nil || sendSide() != nil {
		return
	}
	flush := time.NewTicker(streamFlush)
	defer flush.Stop()
	flushes := flush.C
	if g.cfg.flushTicks != nil {
		flushes = g.cfg.flushTicks
	}
	side := time.NewTicker(streamSide)
	defer side.Stop()
	ping := time.NewTicker(sseKeepAlive)
	defer ping.Stop()
	pending := map[string]*summary{}
	keep := func(s *summary) {
		if matches(&f, s) {
			pending[s.ID] = s
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-sub.ch:
			keep(s)
		case <-sub.wake:
			if sub.takeOverflow() {
				clear(pending)
				if sse.send("resync", "", map[string]any{}) != nil {
					return
				}
			}
		case <-flushes:
			// The changes already buffered go in this flush: select picks
			// at random among ready cases, so a tick could otherwise split
			// changes made together (a bulk change sent as single jobs).
			for n := len(sub.ch); n > 0; n-- {
				keep(<-sub.ch)
			}
			if len(pending) == 0 {
				continue
			}
			batch := make([]*summary, 0, len(pending))
			for _, s := range pending {
				batch = append(batch, s)
			}
			clear(pending)
			if len(batch) > streamMaxBatch {
				// More changes than a page shows: the client reloads its
				// page rather than apply them one by one.
				if sse.send("bulk", "", map[string]int{"changed": len(batch)}) != nil ||
					sse.send("counts", "", g.statsFor(ns, queue, jobType)) != nil {
					return
				}
				continue
			}
			sort.Slice(batch, func(i, k int) bool {
				return before(batch[i].CreatedAt, batch[i].ID, batch[k].CreatedAt, batch[k].ID)
			})
			for _, s := range batch {
				if sse.send("job", "", s) != nil {
					return
				}
			}
			if sse.send("counts", "", g.statsFor(ns, queue, jobType)) != nil {
				return
			}
		case <-side.C:
			if sendSide() != nil {
				return
			}
		case <-ping.C:
			if sse.comment("ping") != nil {
				return
			}
		}
	}
}

// sharedRead shares one reading of something slow to read (every queue's
// stats, the whole worker registry) among every reader for ttl: the
// streams of every open dashboard and the metrics scrapes. Readers that
// come while a reading is in flight wait for it rather than start another.
type sharedRead[T any] struct {
	ttl time.Duration

	mu     sync.Mutex
	at     time.Time
	v      T
	flight chan struct{} // closed when the reading in flight ends
	err    error         // of the last reading
}

// get returns the last reading if it is younger than ttl, else reads
// (once for all who ask meanwhile) within base's life.
func (c *sharedRead[T]) get(ctx, base context.Context, read func(context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	if !c.at.IsZero() && time.Since(c.at) < c.ttl {
		v := c.v
		c.mu.Unlock()
		return v, nil
	}
	flight := c.flight
	if flight == nil {
		flight = make(chan struct{})
		c.flight = flight
		go func() {
			rctx, cancel := context.WithTimeout(base, 5*time.Second)
			defer cancel()
			v, err := read(rctx)
			c.mu.Lock()
			if c.err = err; err == nil {
				c.v, c.at = v, time.Now()
			}
			c.flight = nil
			c.mu.Unlock()
			close(flight)
		}()
	}
	c.mu.Unlock()
	select {
	case <-flight:
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		var zero T
		return zero, c.err
	}
	return c.v, nil
}

// sharedTTL is how old a shared reading of the queues or the workers may be.
const sharedTTL = time.Second

// cachedQueues is every queue, read at most once per sharedTTL.
func (g *Gateway) cachedQueues(ctx context.Context) ([]*QueueInfo, error) {
	return g.qcache.get(ctx, g.base(), g.queues)
}

// cachedWorkers is the worker registry, read at most once per sharedTTL.
// The records are shared: read them, do not change them.
func (g *Gateway) cachedWorkers(ctx context.Context) ([]*workerRecord, error) {
	return g.wcache.get(ctx, g.base(), g.workers.List)
}
