package gateway

import (
	"fmt"
	"net/http"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// seriesParams reads the range, namespace and queue of a series (a
// namespaced token's namespace was put in the query by act).
func seriesParams(r *http.Request) (string, projections.StatsDim, error) {
	q, err := strictQuery(r)
	if err != nil {
		return "", projections.StatsDim{}, err
	}
	rng := q.Get("range")
	if rng == "" {
		rng = "hour"
	}
	d := projections.StatsDim{Namespace: q.Get("namespace"), Queue: q.Get("queue")}
	if d.Namespace != "" && !domain.ValidNamespace(d.Namespace) {
		return "", d, &commands.InputError{Field: "namespace", Value: d.Namespace, Reason: "not a namespace"}
	}
	if d.Queue != "" && !domain.ValidQueue(d.Queue) {
		return "", d, &commands.InputError{Field: "queue", Value: d.Queue, Reason: "not a queue name"}
	}
	switch rng {
	case "hour", "day", "week":
	default:
		return "", d, &commands.InputError{Field: "range", Value: rng, Reason: "want hour, day or week"}
	}
	return rng, d, nil
}

// GET /stats/series?range=hour|day|week&namespace=&queue=: throughput,
// start latency, depth and oldest wait per interval (projections.StatsSeries),
// as the engine's StatsKeeper folded them from the log.
func (g *Gateway) statsSeries(w http.ResponseWriter, r *http.Request) {
	rng, d, err := seriesParams(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	s, err := g.store.StatsSeries(r.Context(), rng, d, time.Now())
	if err != nil {
		fail(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, s)
}

// chartsPage is the overview (every queue) or a queue's page.
type chartsPage struct {
	Namespace, Queue, Range string
	Ranges                  []string
	Queues                  []string // to pick one from (the overview)
	Stats                   *stats
	Info                    *QueueInfo // a queue's page: its settings and depth
	Error                   string
}

// GET /overview: the charts of every queue (of the page's namespace).
func (g *Gateway) pageOverview(w http.ResponseWriter, r *http.Request) { g.chartsPage(w, r, "") }

// GET /queues/{queue}: one queue's charts, settings and jobs.
func (g *Gateway) pageQueue(w http.ResponseWriter, r *http.Request) {
	q := r.PathValue("queue")
	if !domain.ValidQueue(q) {
		g.render(w, r, http.StatusNotFound, "notfound", "Not found", map[string]string{"Path": r.URL.Path,
			"Detail": fmt.Sprintf("%q is not a queue name", q)})
		return
	}
	g.chartsPage(w, r, q)
}

func (g *Gateway) chartsPage(w http.ResponseWriter, r *http.Request, queue string) {
	rng, d, err := seriesParams(r)
	status := http.StatusOK
	if err != nil {
		status = problemOf(err).Status
		rng = "hour"
	}
	p := &chartsPage{Namespace: d.Namespace, Queue: queue, Range: rng, Ranges: []string{"hour", "day", "week"}}
	if err == nil {
		err = g.index.waitSynced(r.Context())
	}
	p.Stats = g.statsFor(d.Namespace, queue, "")
	p.Queues = p.Stats.Queues
	if queue != "" {
		if qs, qerr := g.cachedQueues(r.Context()); qerr == nil {
			for _, qi := range g.scopedQueues(r, qs) {
				if qi.Name == queue {
					p.Info = qi
				}
			}
		}
	}
	if err != nil {
		p.Error = problemOf(err).Detail
	}
	title, nav := "Overview", "overview"
	if queue != "" {
		title, nav = "Queue "+queue, "queues"
	}
	g.renderIn(w, r, status, "overview", nav, title, p)
}
