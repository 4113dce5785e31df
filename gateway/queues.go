package gateway

import (
	"context"
	"net/http"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/streams"
)

// QueueInfo is a queue as the API shows it.
type QueueInfo = engine.QueueInfo

func (g *Gateway) queues(ctx context.Context) ([]*QueueInfo, error) {
	qs, err := g.store.QueueInfos(ctx)
	if err != nil {
		return nil, err
	}
	for _, q := range qs {
		g.withCounts(q)
	}
	return qs, nil
}

// withCounts adds the index's counts to a queue read from NATS. Depth is
// the work items waiting on the queue's stream, which include the items
// of jobs cancelled while queued until a worker of their type skips them:
// once the index is loaded, depth is at most the queue's queued jobs.
func (g *Gateway) withCounts(q *QueueInfo) {
	q.Jobs = g.index.Counts(q.Name, "")
	q.Running = q.Jobs[streams.StateRunning] + q.Jobs[streams.StateClaimed]
	select {
	case <-g.index.Synced():
		q.Depth = min(q.Depth, uint64(q.Jobs[streams.StateQueued]))
	default:
	}
}

// scopeQueues shows a namespaced principal its namespace's figures only:
// every count of a queue comes from its namespace's jobs, none from the
// queue's stream, which holds every namespace's work items.
func (g *Gateway) scopeQueues(r *http.Request, qs ...*QueueInfo) {
	p := principal(r)
	if p == nil || p.Namespace == commands.AllNamespaces {
		return
	}
	for _, q := range qs {
		q.Jobs = g.index.CountsIn(p.Namespace, q.Name, "")
		q.Running = q.Jobs[streams.StateRunning] + q.Jobs[streams.StateClaimed]
		q.Depth, q.Held = uint64(q.Jobs[streams.StateQueued]), q.Running
		q.Delayed = uint64(q.Jobs[streams.StateScheduled])
	}
}

// GET /queues
func (g *Gateway) listQueues(w http.ResponseWriter, r *http.Request) {
	qs, err := g.queues(r.Context())
	if err != nil {
		fail(w, r, err, "")
		return
	}
	g.scopeQueues(r, qs...)
	writeJSON(w, http.StatusOK, map[string]any{"queues": qs})
}

func (g *Gateway) pauseQueue(w http.ResponseWriter, r *http.Request)  { g.setPaused(w, r, true) }
func (g *Gateway) resumeQueue(w http.ResponseWriter, r *http.Request) { g.setPaused(w, r, false) }

// POST /queues/{queue}/pause|resume
func (g *Gateway) setPaused(w http.ResponseWriter, r *http.Request, paused bool) {
	name := r.PathValue("queue")
	if _, err := readBody(w, r, g.cfg.MaxBodyBytes); err != nil {
		fail(w, r, err, "")
		return
	}
	if _, err := g.store.SetQueuePaused(r.Context(), name, paused); err != nil {
		fail(w, r, err, "")
		return
	}
	st, err := g.store.QueueStats(r.Context(), name)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	rec, err := g.store.Queue(r.Context(), name)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	q := &QueueInfo{Name: name, Paused: st.Paused, Depth: st.Waiting, Held: st.Held, Delayed: st.Delayed,
		CreatedAt: rec.CreatedAt}
	g.withCounts(q)
	g.scopeQueues(r, q)
	writeJSON(w, http.StatusOK, q)
}
