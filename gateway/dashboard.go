package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// The dashboard: server-rendered pages (html/template) with a little
// JavaScript for live updates over Server-Sent Events, all embedded in the
// binary. No external assets: it works on a machine without internet.
//
//go:embed web
var webFS embed.FS

// pageNames are the pages: every template of web/templates but the
// layout and the rows they share, so that a page is added by adding its
// file (and its route).
var pageNames = func() []string {
	files, _ := fs.Glob(webFS, "web/templates/*.html")
	var out []string
	for _, f := range files {
		name := strings.TrimSuffix(path.Base(f), ".html")
		if name != "layout" && name != "rows" {
			out = append(out, name)
		}
	}
	return out
}()

func parseTemplates() map[string]*template.Template {
	funcs := template.FuncMap{
		"stateClass": func(s domain.State) string { return "st-" + string(s) },
		"ts":         func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
		"tsp": func(t *time.Time) string {
			if t == nil {
				return ""
			}
			return t.UTC().Format(time.RFC3339Nano)
		},
		"clock": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05") },
		"pct": func(p *projections.ProgressView) float64 {
			if p == nil || p.Percent == nil {
				return 0
			}
			return *p.Percent
		},
		"pretty": func(raw json.RawMessage) string {
			var b bytes.Buffer
			if len(raw) == 0 {
				return "null"
			}
			if err := json.Indent(&b, raw, "", "  "); err != nil {
				return string(raw)
			}
			return b.String()
		},
		"secs": func(f *float64) string {
			if f == nil {
				return ""
			}
			return fmtSeconds(*f)
		},
		"terminal":  func(s domain.State) bool { return s.Terminal() },
		"unstarted": commands.Reprioritizable,
		"workflow":  func(jobType string) bool { return jobType == domain.WorkflowType },
		// A progress bar is shown while the job can still move: the last
		// report of a finished job (50% of a job that then succeeded) is
		// stale. app.js's showProgress is the same rule.
		"showProgress": func(s domain.State, p *projections.ProgressView) bool { return p != nil && !s.Terminal() },
		"present":      func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" },
		"json": func(v any) template.JS {
			b, _ := json.Marshal(v)
			return template.JS(b)
		},
		// in is a dashboard path in a namespace ("": every one), with the
		// pairs of kv that have a value as its query.
		"in":   func(path, ns string, kv ...string) string { return withQuery(path, append(kv, "namespace", ns)...) },
		"join": strings.Join,
		// concurrency is a worker's handlers at once (workerview.go).
		"concurrency": concurrencyText,
		"pieceStates": func() []string { return pieceStates },
		// A schedule's timing and its job's type (schedules page).
		"timing":  scheduleTiming,
		"jobType": scheduleJobType,
		// A queue's limit; 0 is none.
		"limit": func(n int) string {
			if n == 0 {
				return "—"
			}
			return fmt.Sprint(n)
		},
		// rate is a queue's rate limit: "10 / 1m0s", "… per user"; — for none.
		"rate": func(q *QueueInfo) string {
			if q.RateLimit == 0 {
				return "—"
			}
			s := fmt.Sprintf("%d / %s", q.RateLimit, time.Duration(q.RatePeriod))
			if q.RateKey != "" {
				s += " per " + q.RateKey
			}
			return s
		},
		// pendingOf is a queue's pending jobs: the admitter's count, or
		// the index's when it did not answer (or the page is a
		// namespace's, whose view has no slots).
		"pendingOf": func(q *QueueInfo) int {
			if q.Slots != nil {
				return q.Slots.Pending
			}
			return q.Jobs[domain.StatePending]
		},
		// slotUsers says how a queue's slots are shared by user.
		"slotUsers": func(q *QueueInfo) string {
			if q.Slots == nil {
				return ""
			}
			names := make([]string, 0, len(q.Slots.Users))
			for u := range q.Slots.Users {
				names = append(names, u)
			}
			slices.Sort(names)
			parts := make([]string, 0, len(names))
			for _, u := range names {
				c := q.Slots.Users[u]
				parts = append(parts, fmt.Sprintf("%s: %d running, %d pending", u, c.Holding, c.Pending))
			}
			return strings.Join(parts, "; ")
		},
	}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(webFS, "web/templates/layout.html", "web/templates/rows.html"))
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		out[name] = template.Must(template.Must(base.Clone()).ParseFS(webFS, "web/templates/"+name+".html"))
	}
	return out
}

// withQuery is path with the pairs of kv whose value is not empty as its
// query.
func withQuery(path string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

func fmtSeconds(f float64) string {
	switch {
	case f < 1:
		return fmt.Sprintf("%.0fms", f*1000)
	case f < 60:
		return fmt.Sprintf("%.2fs", f)
	case f < 3600:
		return fmt.Sprintf("%dm%02ds", int(f)/60, int(f)%60)
	}
	return fmt.Sprintf("%dh%02dm", int(f)/3600, int(f)%3600/60)
}

var templates = parseTemplates()

// pageData is what every page's template gets.
type pageData struct {
	Title   string
	Nav     string
	Version string // of the static assets, so that browsers fetch new ones after an upgrade
	// Namespace is the one the pages show ("": every namespace), from
	// ?namespace=; Namespaces are those to choose from.
	Namespace  string
	Namespaces []string
	Data       any
	// Auth: the page was asked for with a token (access control on): it
	// shows a sign-out button.
	Auth bool
	// Anonymous: access control is on and the page was asked for without
	// a token: it shows no navigation and no namespace.
	Anonymous bool
}

// assetVersion is a hash of the embedded static files.
var assetVersion = func() string {
	h := sha256.New()
	_ = fs.WalkDir(webFS, "web/static", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := webFS.ReadFile(path)
			h.Write(b)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}()

func (g *Gateway) render(w http.ResponseWriter, r *http.Request, status int, name, title string, data any) {
	g.renderIn(w, r, status, name, name, title, data)
}

// renderIn is render with the navigation's entry nav marked (a queue's
// page, drawn by the overview's template, is under Queues).
func (g *Gateway) renderIn(w http.ResponseWriter, r *http.Request, status int, name, nav, title string, data any) {
	var b bytes.Buffer
	ns, _ := pageNamespace(r)
	names := []string{ns}
	// Before sign-in (access control on, no token: the sign-in page, a
	// page not found) nothing of the system is shown: no namespace names,
	// no navigation.
	anonymous := g.cfg.Auth && principal(r) == nil
	switch p := principal(r); {
	case anonymous:
		names, ns = nil, ""
	case p == nil || p.Namespace == commands.AllNamespaces:
		names = g.namespaceNames(r.Context(), ns)
	}
	d := pageData{Title: title, Nav: nav, Version: assetVersion, Namespace: ns, Namespaces: names, Data: data,
		Auth: principal(r) != nil, Anonymous: anonymous}
	if err := templates[name].ExecuteTemplate(&b, "layout.html", d); err != nil {
		g.log.Error("render", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

func (g *Gateway) dashboardRoutes(mux *http.ServeMux) {
	static, _ := fs.Sub(webFS, "web/static")
	files := http.StripPrefix("/static/", http.FileServerFS(static))
	mux.Handle("GET /static/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=86400") // URLs carry ?v=<assetVersion>
		files.ServeHTTP(w, r)
	}))
	read := commands.ActRead
	route(mux, "/{$}", methods{"GET": g.act(read, g.pageJobs)})
	route(mux, "/jobs/{id}", methods{"GET": g.jobAct(read, g.pageJob)})
	route(mux, "/queues", methods{"GET": g.act(read, g.pageQueues)})
	route(mux, "/types", methods{"GET": g.act(read, g.pageTypes)})
	route(mux, "/workers", methods{"GET": g.act(read, g.pageWorkers)})
	g.operatorPages(mux)
	route(mux, "/schedules", methods{"GET": g.act(read, g.pageSchedules)})
	route(mux, "/login", methods{"GET": g.pageLogin, "POST": g.login})
	route(mux, "/logout", methods{"POST": g.logout})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		g.render(w, r, http.StatusNotFound, "notfound", "Not found", map[string]string{"Path": r.URL.Path})
	})
}

// pageNamespace is the namespace a page shows, from ?namespace= ("":
// every namespace); one that cannot be a namespace is an error, and every
// namespace is shown.
func pageNamespace(r *http.Request) (string, error) {
	ns := r.URL.Query().Get("namespace")
	if ns == "" {
		return "", nil
	}
	if err := commands.CheckNamespace(ns); err != nil {
		return "", err
	}
	return ns, nil
}

// namespaceNames are the namespaces to choose from: those with jobs, with
// settings or with registered types, the default one, and the one shown.
func (g *Gateway) namespaceNames(ctx context.Context, shown string) []string {
	seen := map[string]bool{domain.DefaultNS: true}
	if shown != "" {
		seen[shown] = true
	}
	for _, ns := range g.index.Namespaces() {
		seen[ns] = true
	}
	if scopes, err := g.store.Types.Scopes(ctx); err == nil {
		for _, ns := range scopes {
			seen[ns] = true
		}
	}
	out := make([]string, 0, len(seen))
	for ns := range seen {
		out = append(out, ns)
	}
	slices.Sort(out)
	return out
}

// visibleFrom reports whether a worker of these types serves jobs of
// namespace ns ("": any): a free-form type serves every namespace, a
// registered one its scope's (@global and @internal: every namespace).
func visibleFrom(types []string, ns string) bool {
	if ns == "" {
		return true
	}
	for _, t := range types {
		scope, _, registered := strings.Cut(t, ":")
		if !registered || scope == ns || strings.HasPrefix(scope, "@") {
			return true
		}
	}
	return false
}

type jobsPage struct {
	State, Queue, Type string
	Q                  string // the search box (search.go)
	Query              string // the filter as GET /jobs's query, for bulk actions
	Namespace          string
	Cursor, Next       string
	Stats              *stats
	States             []domain.State
	Jobs               []*summary
	PageSize           int
	Error              string
}

// GET /
func (g *Gateway) pageJobs(w http.ResponseWriter, r *http.Request) {
	q, qerr := strictQuery(r)
	d := &jobsPage{State: q.Get("state"), Queue: q.Get("queue"), Type: q.Get("type"), Cursor: q.Get("cursor"),
		Q: q.Get("q"), States: domain.States, PageSize: defaultPageSize}
	status := http.StatusOK
	ns, err := pageNamespace(r)
	d.Namespace = ns
	f, cur, _, lerr := listParams(url.Values{"state": {d.State}, "queue": {d.Queue}, "type": {d.Type}, "cursor": {d.Cursor},
		"namespace": {ns}, "q": {d.Q}})
	d.Query = withQuery("", "state", d.State, "queue", d.Queue, "type", d.Type, "namespace", ns, "q", d.Q)
	if len(d.Query) > 0 {
		d.Query = d.Query[1:]
	}
	if err == nil {
		err = lerr
	}
	if qerr != nil {
		err = qerr
	}
	if err == nil {
		err = g.index.waitSynced(r.Context())
	}
	if err != nil {
		d.Error = problemOf(err).Detail
		status = problemOf(err).Status
		f, cur = engine.Filter{Namespace: ownNamespace(r)}, nil // a namespaced token's, even so
	}
	d.Stats = g.statsFor(f.Namespace, f.Queue, f.Type)
	if f.NeedsRecord() && err == nil {
		d.Jobs, d.Next, err = g.searchSummaries(r.Context(), f, cur, defaultPageSize)
		if err != nil {
			d.Error, status = problemOf(err).Detail, problemOf(err).Status
		}
	} else {
		var next *Cursor
		d.Jobs, next = g.index.List(f, cur, defaultPageSize)
		if next != nil {
			d.Next = next.Encode()
		}
	}
	title := "Jobs"
	if d.State != "" {
		title = strings.ToUpper(d.State[:1]) + d.State[1:] + " jobs"
	}
	g.render(w, r, status, "jobs", title, d)
}

type jobPage struct {
	Job      *projections.JobView
	Events   []*timelineEntry
	Children []*summary
	MoreKids bool
	LastSeq  uint64
	Files    *fileList // nil if the files bucket could not be read
	// Unserved says that no live worker serves the job's type in its
	// queue (served.go).
	Unserved string
	// Attempts are the errors of its failed attempts (attempts.go).
	Attempts []attemptError
}

// GET /jobs/{id}
func (g *Gateway) pageJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var snap engine.Snapshot
	err := fmt.Errorf("job %q: %w", id, errNotAJob)
	if domain.ValidID(id) {
		snap, err = g.store.Read(r.Context(), id)
	}
	if err != nil {
		p := problemOf(err)
		g.render(w, r, p.Status, "notfound", "Not found", map[string]string{"Path": r.URL.Path, "Detail": p.Detail})
		return
	}
	d := &jobPage{Job: g.view(r.Context(), snap.Job)}
	d.Unserved = g.unserved(r.Context(), d.Job)
	n := 0
	_ = g.store.History(r.Context(), id, 0, false, func(e *domain.Event) error {
		v := projections.ViewEvent(e)
		d.Attempts = withAttempt(d.Attempts, v)
		if k := len(d.Events); k > 0 && collapses(v.Type) && d.Events[k-1].Type == v.Type {
			d.Events[k-1].EventView, d.Events[k-1].Repeat = v, d.Events[k-1].Repeat+1
		} else {
			d.Events = append(d.Events, &timelineEntry{EventView: v, Repeat: 1})
		}
		d.LastSeq = e.Seq
		if n++; n >= maxEventsLimit {
			return errPageFull
		}
		return nil
	})
	if g.index.waitSynced(r.Context()) == nil {
		var next *Cursor
		d.Children, next = g.index.List(engine.Filter{Parent: id, Namespace: ownNamespace(r)}, nil, 200)
		d.MoreKids = next != nil
	}
	if fl, err := g.fileList(r.Context(), id); err == nil {
		d.Files = fl
	}
	g.render(w, r, http.StatusOK, "job", "Job "+id, d)
}

// collapses reports whether a run of events of this type is one line of the
// timeline (the last of them, and how many): progress reports, and the
// fan-in counts of a waiting parent.
func collapses(typ string) bool { return typ == domain.EvProgress || typ == domain.EvFanIn }

// timelineEntry is one line of a job's timeline: an event, or the last of
// a run of progress or fan-in events (Repeat of them).
type timelineEntry struct {
	*projections.EventView
	Repeat int
}

var errNotAJob = fmt.Errorf("not a job id: %w", commands.ErrNotFound)

// GET /queues: with a namespace, each queue's jobs are that namespace's
// (waiting, held and delayed are the queue's, every namespace's).
func (g *Gateway) pageQueues(w http.ResponseWriter, r *http.Request) {
	ns, err := pageNamespace(r)
	status := http.StatusOK
	if err != nil {
		status = http.StatusBadRequest
	}
	qs, qerr := g.queues(r.Context())
	if qerr != nil {
		err, status = qerr, http.StatusServiceUnavailable
	}
	for _, q := range qs {
		if ns != "" {
			q.Jobs = g.index.CountsIn(ns, q.Name, "")
			q.Running = q.Jobs[domain.StateRunning] + q.Jobs[domain.StateClaimed]
		}
	}
	qs = g.scopedQueues(r, qs)
	d := map[string]any{"Queues": qs, "Error": "", "Namespace": ns}
	if err != nil {
		d["Error"] = problemOf(err).Detail
	}
	g.render(w, r, status, "queues", "Queues", d)
}

type typesPage struct {
	Namespace string
	Deleted   bool
	Types     []*typeView
	Error     string
}

// GET /types: the types visible from the namespace (its own and @global;
// every type without one), soft-deleted ones with ?deleted=true; with a
// namespace, a type's queued and running jobs are that namespace's.
func (g *Gateway) pageTypes(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	d := &typesPage{Types: []*typeView{}}
	status := http.StatusOK
	q, err := strictQuery(r)
	if err == nil {
		d.Namespace, err = pageNamespace(r)
	}
	switch q.Get("deleted") {
	case "", "false":
	case "true":
		d.Deleted = true
	default:
		if err == nil {
			err = &commands.InputError{Field: "deleted", Value: fmt.Sprintf("%q", q.Get("deleted")), Reason: "want true or false"}
		}
	}
	if err != nil {
		status = problemOf(err).Status
	}
	ts, terr := g.store.Types.Types(ctx, d.Namespace, d.Deleted)
	if terr != nil {
		err, status = terr, problemOf(terr).Status
	}
	workers, _ := g.cachedWorkers(ctx)
	for _, t := range ts {
		v := g.typeView(r, t, workers)
		if d.Namespace != "" {
			c := g.index.CountsIn(d.Namespace, "", v.FullName)
			v.Queued, v.Running = c[domain.StateQueued], c[domain.StateClaimed]+c[domain.StateRunning]
		}
		d.Types = append(d.Types, v)
	}
	if !d.Deleted {
		d.Types = append(d.Types, g.freeFormTypes(r, d.Namespace, workers)...)
	}
	if err != nil {
		d.Error = problemOf(err).Detail
	}
	g.render(w, r, status, "types", "Types", d)
}

// GET /workers: with a namespace, the workers that serve it (one of their
// types is free-form, @global, @internal or of that namespace).
func (g *Gateway) pageWorkers(w http.ResponseWriter, r *http.Request) {
	ns, err := pageNamespace(r)
	status := http.StatusOK
	if err != nil {
		status = http.StatusBadRequest
	}
	recs, lerr := g.workers.List(r.Context())
	if lerr != nil {
		err, status = lerr, http.StatusServiceUnavailable
	}
	views := make([]*WorkerView, 0, len(recs))
	for _, rec := range recs {
		if visibleFrom(rec.Types, ns) && seesWorker(r, rec) == nil {
			views = append(views, g.workerView(r, rec))
		}
	}
	d := map[string]any{"Workers": views, "Error": "", "Lease": g.cfg.Lease.Seconds(), "Namespace": ns}
	if err != nil {
		d["Error"] = problemOf(err).Detail
	}
	g.render(w, r, status, "workers", "Workers", d)
}
