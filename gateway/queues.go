package gateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
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
	q.Running = q.Jobs[domain.StateRunning] + q.Jobs[domain.StateClaimed]
	select {
	case <-g.index.Synced():
		q.Depth = min(q.Depth, uint64(q.Jobs[domain.StateQueued]))
	default:
	}
}

// scopedQueues is qs as the request's principal may see them: for a
// namespaced token, copies whose every count comes from its namespace's
// jobs (none from the queue's stream, which holds every namespace's work
// items), of the queues it has jobs in and the default one, without the
// admitter's slots (they count, and name, every namespace's users; the
// limits themselves are shown). qs itself (a shared cache's) is not
// changed.
func (g *Gateway) scopedQueues(r *http.Request, qs []*QueueInfo) []*QueueInfo {
	p := principal(r)
	if !p.Scoped() {
		return qs
	}
	out := make([]*QueueInfo, 0, len(qs))
	for _, q := range qs {
		jobs := g.index.CountsIn(p.Namespace, q.Name, "")
		total := 0
		for _, n := range jobs {
			total += n
		}
		if p.SeesQueue(q.Name, total) {
			out = append(out, q.Scoped(jobs))
		}
	}
	return out
}

// GET /queues
func (g *Gateway) listQueues(w http.ResponseWriter, r *http.Request) {
	qs, err := g.queues(r.Context())
	if err != nil {
		fail(w, r, err, "")
		return
	}
	qs = g.scopedQueues(r, qs)
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
	g.writeQueue(w, r, name)
}

// writeQueue answers a change of a queue with the queue as GET /queues
// shows it to the request's principal.
func (g *Gateway) writeQueue(w http.ResponseWriter, r *http.Request, name string) {
	q, err := g.queueInfo(r.Context(), name)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, g.scopedQueues(r, []*QueueInfo{q})[0])
}

// queueInfo reads one queue as QueueInfos reads each, with the index's
// counts.
func (g *Gateway) queueInfo(ctx context.Context, name string) (*QueueInfo, error) {
	q, err := g.store.QueueInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	g.withCounts(q)
	return q, nil
}

// PUT /queues/{queue}: the queue's limits (quotas). A limit the body
// leaves out keeps its value; 0 removes it. The queue is created if it
// does not exist yet.
func (g *Gateway) setQueueLimits(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("queue")
	if !domain.ValidQueue(name) {
		fail(w, r, &commands.InputError{Field: "queue", Value: fmt.Sprintf("%q", name), Reason: "want 1-64 of [A-Za-z0-9_-]"}, "")
		return
	}
	body, err := readBody(w, r, g.cfg.MaxBodyBytes)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	req, err := decodeQueueLimits(body)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	// The change is decided on the limits as they are when it is written
	// (a field left out keeps its value even if another PUT changed it
	// meanwhile); limits that are already those asked for write nothing.
	if _, err := g.store.ChangeQueueLimits(r.Context(), name, req.Apply); err != nil {
		fail(w, r, err, "")
		return
	}
	g.writeQueue(w, r, name)
}

// everyNamespace wraps a handler of what every namespace shares (a
// queue's limits): with access control, only a token of every namespace
// ("*") may use it, whatever its role (403), as for /metrics.
func everyNamespace(act commands.Action, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := principal(r).InEveryNamespace(act); err != nil {
			fail(w, r, err, "")
			return
		}
		h(w, r)
	}
}
