package gateway

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// warning is something a client should know about what it just did,
// though it was done: a submitted job that no live worker serves (a typo
// of the type, a worker not started) waits with nothing else saying why.
type warning struct {
	Type   string `json:"type"` // a stable slug: no-worker
	Detail string `json:"detail"`
}

// warningNoWorker: no live worker serves the job's type in its queue.
const warningNoWorker = "no-worker"

// submitAnswer is a submitted job with what the client should know about
// it.
type submitAnswer struct {
	*projections.JobView
	Warnings []warning `json:"warnings,omitempty"`
}

// serves reports whether worker w (live) runs jobs of type typ in queue
// and namespace ns: the type is one of its own, it serves the queue (no
// queues: every one), and a worker registered with a namespaced token is
// handed its namespace's jobs only.
func serves(w *workerRecord, typ, queue, ns string) bool {
	return slices.Contains(w.Types, typ) && (len(w.Queues) == 0 || slices.Contains(w.Queues, queue)) &&
		(!w.OnlyNamespace || w.Namespace == ns)
}

// unserved says that no live worker serves job j's type in its queue
// ("" when one does, when the job does not wait for a worker, or when the
// workers cannot be read now). The workers are the shared reading of the
// registry (at most one read a second for every caller).
func (g *Gateway) unserved(ctx context.Context, j *projections.JobView) string {
	switch {
	case j.State.Terminal(), commands.AwaitsPieces(j.State), strings.HasPrefix(j.Type, commands.ScopeInternal+":"):
		return "" // ended, or waits for its pieces; @internal types are run by the engine
	}
	recs, err := g.cachedWorkers(ctx)
	if err != nil {
		return ""
	}
	for _, w := range recs {
		if g.workers.View(w).Live && serves(w, j.Type, j.Queue, j.Namespace) {
			return ""
		}
	}
	return fmt.Sprintf("no live worker serves %s in queue %s: the job waits until one does (is the type spelt right? is a worker started?)",
		j.Type, j.Queue)
}

// answer is a submitted job with its warnings.
func (g *Gateway) answer(ctx context.Context, v *projections.JobView) *submitAnswer {
	a := &submitAnswer{JobView: v}
	if msg := g.unserved(ctx, v); msg != "" {
		a.Warnings = append(a.Warnings, warning{Type: warningNoWorker, Detail: msg})
	}
	return a
}

// freeFormTypes are the free-form types (no registration: demo.echo) seen
// from namespace ns ("": every one): those live workers serve, that r may
// see, and those of the namespace's jobs, with their live workers and
// queued and running jobs.
func (g *Gateway) freeFormTypes(r *http.Request, ns string, workers []*workerRecord) []*typeView {
	live := map[string][]string{}
	for _, w := range workers {
		if !g.workers.View(w).Live || seesWorker(r, w) != nil || (ns != "" && w.OnlyNamespace && w.Namespace != ns) {
			continue
		}
		for _, t := range w.Types {
			if !commands.Registered(t) {
				live[t] = append(live[t], w.ID)
			}
		}
	}
	_, jobTypes := g.index.Names(ns)
	for _, t := range jobTypes {
		if _, ok := live[t]; !ok && !commands.Registered(t) {
			live[t] = nil
		}
	}
	names := make([]string, 0, len(live))
	for t := range live {
		names = append(names, t)
	}
	sort.Strings(names)
	out := make([]*typeView, 0, len(names))
	for _, t := range names {
		v := &typeView{TypeView: &projections.TypeView{FullName: t, Name: t, Schema: []byte("null")}, FreeForm: true,
			LiveWorkers: live[t]}
		if v.LiveWorkers == nil {
			v.LiveWorkers = []string{}
		}
		c := g.index.CountsIn(ns, "", t)
		v.Queued, v.Running = c[domain.StateQueued], c[domain.StateClaimed]+c[domain.StateRunning]
		out = append(out, v)
	}
	return out
}
