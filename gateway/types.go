package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// typeView is a registered type as the API shows it: the type, who serves
// it and how many of its jobs wait and run.
type typeView struct {
	*projections.TypeView
	// LiveWorkers are the live workers that serve the type.
	LiveWorkers []string `json:"live_workers"`
	Queued      int      `json:"queued"`
	Running     int      `json:"running"` // claimed or running
	// FreeForm: a type without registration (demo.echo), known from its
	// live workers and jobs (the dashboard's Types page).
	FreeForm bool `json:"free_form,omitempty"`
}

// typeView renders a type with its live workers and job counts, those a
// namespaced token may see: its namespace's.
func (g *Gateway) typeView(r *http.Request, t *domain.TypeRecord, workers []*workerRecord) *typeView {
	v := &typeView{TypeView: projections.ViewType(t), LiveWorkers: []string{}}
	for _, w := range workers {
		if g.workers.View(w).Live && slices.Contains(w.Types, v.FullName) && seesWorker(r, w) == nil {
			v.LiveWorkers = append(v.LiveWorkers, w.ID)
		}
	}
	c := g.index.CountsIn(ownNamespace(r), "", v.FullName)
	v.Queued, v.Running = c[domain.StateQueued], c[domain.StateClaimed]+c[domain.StateRunning]
	return v
}

// typeName reads {scope}/{category}/{name} from the path.
func typeName(r *http.Request) (commands.TypeName, error) {
	n := commands.TypeName{Scope: r.PathValue("scope"), Category: r.PathValue("category"), Name: r.PathValue("name")}
	return n, n.Check(nil)
}

// typeBody is the body of PUT /types/{scope}/{category}/{name}.
type typeBody struct {
	Schema      json.RawMessage `json:"schema,omitempty"`
	Description string          `json:"description,omitempty"`
}

// PUT /types/{scope}/{category}/{name}
func (g *Gateway) putType(w http.ResponseWriter, r *http.Request) {
	n, err := typeName(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	if n.Internal() {
		// The engine registers its own types in its process; over the API
		// an @internal type could be given a schema that refuses every job.
		fail(w, r, fmt.Errorf("type %s: registered by the engine only: %w", n, commands.ErrInternalType), "")
		return
	}
	var b typeBody
	if err := g.readJSON(w, r, &b, true); err != nil {
		fail(w, r, err, "")
		return
	}
	if err := g.mayRegister(r, commands.TypeDef{Name: n, Schema: b.Schema}, false); err != nil {
		fail(w, r, err, "")
		return
	}
	t, created, err := g.store.Types.Register(r.Context(), commands.TypeDef{Name: n, Schema: b.Schema, Description: b.Description}, g.store.ActorOf(r.Context()))
	if err != nil {
		fail(w, r, err, "")
		return
	}
	workers, _ := g.cachedWorkers(r.Context())
	status := http.StatusOK
	if created {
		status = http.StatusCreated
		w.Header().Set("Location", "/api/v1/types/"+n.Scope+"/"+n.Category+"/"+n.Name)
	}
	writeJSON(w, status, g.typeView(r, t, workers))
}

// GET /types/{scope}/{category}/{name}
func (g *Gateway) getType(w http.ResponseWriter, r *http.Request) {
	n, err := typeName(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	if !seesType(r, n.Scope) {
		fail(w, r, fmt.Errorf("type %s: %w", n, commands.ErrUnknownType), "")
		return
	}
	t, err := g.store.Types.Type(r.Context(), n)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	workers, _ := g.cachedWorkers(r.Context())
	writeJSON(w, http.StatusOK, g.typeView(r, t, workers))
}

// GET /types?namespace=NS&deleted=true
func (g *Gateway) listTypes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns := q.Get("namespace")
	if ns != "" {
		if err := commands.CheckNamespace(ns); err != nil {
			fail(w, r, err, "")
			return
		}
	}
	deleted := false
	switch q.Get("deleted") {
	case "", "false":
	case "true":
		deleted = true
	default:
		fail(w, r, &commands.InputError{Field: "deleted", Value: q.Get("deleted"), Reason: "want true or false"}, "")
		return
	}
	ts, err := g.store.Types.Types(r.Context(), ns, deleted)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	workers, _ := g.cachedWorkers(r.Context())
	out := make([]*typeView, len(ts))
	for i, t := range ts {
		out[i] = g.typeView(r, t, workers)
	}
	writeJSON(w, http.StatusOK, map[string]any{"types": out})
}

// namespaceView is a namespace as the API shows it: its settings and its
// jobs by state.
type namespaceView struct {
	Name     string                   `json:"name"`
	Settings domain.NamespaceSettings `json:"settings"`
	Jobs     map[domain.State]int     `json:"jobs"`
}

// GET /namespaces: every namespace with jobs or settings.
func (g *Gateway) listNamespaces(w http.ResponseWriter, r *http.Request) {
	if err := g.index.waitSynced(r.Context()); err != nil {
		fail(w, r, err, "")
		return
	}
	recs, err := g.store.Types.Namespaces(r.Context())
	if err != nil {
		fail(w, r, err, "")
		return
	}
	settings := map[string]domain.NamespaceSettings{}
	names := g.index.Namespaces()
	for _, rec := range recs {
		settings[rec.Name] = rec.Settings
		if !slices.Contains(names, rec.Name) {
			names = append(names, rec.Name)
		}
	}
	if !slices.Contains(names, domain.DefaultNS) {
		names = append(names, domain.DefaultNS)
	}
	if p := principal(r); p != nil && p.Namespace != commands.AllNamespaces && !slices.Contains(names, p.Namespace) {
		names = append(names, p.Namespace) // its own, with no job and no settings yet
	}
	slices.Sort(names)
	out := make([]*namespaceView, len(names))
	out = out[:0]
	for _, ns := range names {
		if p := principal(r); p == nil || p.Sees(ns) {
			out = append(out, &namespaceView{Name: ns, Settings: settings[ns], Jobs: g.index.CountsIn(ns, "", "")})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"namespaces": out})
}

// PUT /namespaces/{ns}
func (g *Gateway) putNamespace(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("ns")
	if err := commands.CheckNamespace(ns); err != nil {
		fail(w, r, err, "")
		return
	}
	var b domain.NamespaceSettings
	if err := g.readJSON(w, r, &b, false); err != nil {
		fail(w, r, err, "")
		return
	}
	rec, err := g.store.Types.SetNamespace(r.Context(), ns, b, g.store.ActorOf(r.Context()))
	if err != nil {
		fail(w, r, err, "")
		return
	}
	settings := b
	if rec != nil {
		settings = rec.Settings
	}
	writeJSON(w, http.StatusOK, &namespaceView{Name: ns, Settings: settings, Jobs: g.index.CountsIn(ns, "", "")})
}
