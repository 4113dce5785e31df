package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// GET /healthz: the process is up.
func (g *Gateway) healthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// GET /readyz: NATS is connected, jetflow's streams and buckets exist, and
// the job index is loaded. 503 with the failed checks otherwise.
func (g *Gateway) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	checks := map[string]string{}
	ok := true
	check := func(name string, err error) {
		if err != nil {
			checks[name] = err.Error()
			ok = false
			return
		}
		checks[name] = "ok"
	}
	if st := g.store.NC.Status(); st != nats.CONNECTED {
		checks["nats"] = "connection is " + st.String()
		ok = false
	} else {
		checks["nats"] = "ok"
		_, err := g.store.JS.Stream(ctx, streams.EventsStream)
		check("events_stream", err)
		_, err = g.store.JS.KeyValue(ctx, streams.JobsBucket)
		check("jobs_bucket", err)
		_, err = g.store.JS.KeyValue(ctx, streams.QueuesBucket)
		check("queues_bucket", err)
		_, err = g.store.JS.KeyValue(ctx, streams.WorkersBucket)
		check("workers_bucket", err)
	}
	select {
	case <-g.index.Synced():
		checks["index"] = "ok"
	default:
		checks["index"] = "loading"
		ok = false
	}
	status, word := http.StatusOK, "ready"
	if !ok {
		status, word = http.StatusServiceUnavailable, "not ready"
	}
	writeJSON(w, status, map[string]any{"status": word, "checks": checks})
}

// stats is what GET /stats answers: job counts by state (for a namespace,
// a queue and a type, or all), and the queues and types seen.
type stats struct {
	States map[domain.State]int `json:"states"`
	Total  int                  `json:"total"`
	Queues []string             `json:"queues"`
	Types  []string             `json:"types"`
}

func (g *Gateway) statsFor(ns, queue, jobType string) *stats {
	s := &stats{States: g.index.CountsIn(ns, queue, jobType)}
	for _, n := range s.States {
		s.Total += n
	}
	s.Queues, s.Types = g.index.Names(ns)
	if s.Queues == nil {
		s.Queues = []string{}
	}
	if s.Types == nil {
		s.Types = []string{}
	}
	return s
}

// GET /stats?namespace=&queue=&type=
func (g *Gateway) stats(w http.ResponseWriter, r *http.Request) {
	if err := g.index.waitSynced(r.Context()); err != nil {
		fail(w, r, err, "")
		return
	}
	q := r.URL.Query()
	f := engine.Filter{Namespace: q.Get("namespace"), Queue: q.Get("queue"), Type: q.Get("type")}
	if err := f.Validate(); err != nil {
		fail(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, g.statsFor(f.Namespace, f.Queue, f.Type))
}
