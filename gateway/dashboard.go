package gateway

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// The dashboard: server-rendered pages (html/template) with a little
// JavaScript for live updates over Server-Sent Events, all embedded in the
// binary. No external assets: it works on a machine without internet.
//
//go:embed web
var webFS embed.FS

var pageNames = []string{"jobs", "job", "queues", "workers", "notfound"}

func parseTemplates() map[string]*template.Template {
	funcs := template.FuncMap{
		"stateClass": func(s streams.State) string { return "st-" + string(s) },
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
		"terminal": func(s streams.State) bool { return s.Terminal() },
		// A progress bar is shown while the job can still move: the last
		// report of a finished job (50% of a job that then succeeded) is
		// stale. app.js's showProgress is the same rule.
		"showProgress": func(s streams.State, p *projections.ProgressView) bool { return p != nil && !s.Terminal() },
		"present":      func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" },
		"json": func(v any) template.JS {
			b, _ := json.Marshal(v)
			return template.JS(b)
		},
		"query": func(kv ...string) string {
			q := url.Values{}
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i+1] != "" {
					q.Set(kv[i], kv[i+1])
				}
			}
			if len(q) == 0 {
				return "/"
			}
			return "/?" + q.Encode()
		},
		"join": strings.Join,
	}
	base := template.Must(template.New("layout.html").Funcs(funcs).ParseFS(webFS, "web/templates/layout.html", "web/templates/rows.html"))
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		out[name] = template.Must(template.Must(base.Clone()).ParseFS(webFS, "web/templates/"+name+".html"))
	}
	return out
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
	Data    any
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

func (g *Gateway) render(w http.ResponseWriter, status int, name, title string, data any) {
	var b bytes.Buffer
	if err := templates[name].ExecuteTemplate(&b, "layout.html", pageData{Title: title, Nav: name, Version: assetVersion, Data: data}); err != nil {
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
	route(mux, "/{$}", methods{"GET": g.pageJobs})
	route(mux, "/jobs/{id}", methods{"GET": g.pageJob})
	route(mux, "/queues", methods{"GET": g.pageQueues})
	route(mux, "/workers", methods{"GET": g.pageWorkers})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		g.render(w, http.StatusNotFound, "notfound", "Not found", map[string]string{"Path": r.URL.Path})
	})
}

type jobsPage struct {
	State, Queue, Type string
	Cursor, Next       string
	Stats              *Stats
	States             []streams.State
	Jobs               []*Summary
	PageSize           int
	Error              string
}

// GET /
func (g *Gateway) pageJobs(w http.ResponseWriter, r *http.Request) {
	q, qerr := strictQuery(r)
	d := &jobsPage{State: q.Get("state"), Queue: q.Get("queue"), Type: q.Get("type"), Cursor: q.Get("cursor"),
		States: streams.States, PageSize: DefaultPageSize}
	status := http.StatusOK
	f, cur, _, err := listParams(url.Values{"state": {d.State}, "queue": {d.Queue}, "type": {d.Type}, "cursor": {d.Cursor}})
	if qerr != nil {
		err = qerr
	}
	if err == nil {
		err = g.index.waitSynced(r.Context())
	}
	if err != nil {
		d.Error = problemOf(err).Detail
		status = problemOf(err).Status
		f, cur = engine.Filter{}, nil
	}
	d.Stats = g.statsFor(f.Queue, f.Type)
	var next *Cursor
	d.Jobs, next = g.index.List(f, cur, DefaultPageSize)
	if next != nil {
		d.Next = next.Encode()
	}
	title := "Jobs"
	if d.State != "" {
		title = strings.ToUpper(d.State[:1]) + d.State[1:] + " jobs"
	}
	g.render(w, status, "jobs", title, d)
}

type jobPage struct {
	Job      *projections.JobView
	Events   []*timelineEntry
	Children []*Summary
	MoreKids bool
	LastSeq  uint64
}

// GET /jobs/{id}
func (g *Gateway) pageJob(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var snap engine.Snapshot
	err := fmt.Errorf("job %q: %w", id, errNotAJob)
	if streams.ValidID(id) {
		snap, err = g.store.Lookup(r.Context(), id)
	}
	if err != nil {
		p := problemOf(err)
		g.render(w, p.Status, "notfound", "Not found", map[string]string{"Path": r.URL.Path, "Detail": p.Detail})
		return
	}
	d := &jobPage{Job: g.view(r.Context(), snap.Job)}
	n := 0
	_ = g.store.History(r.Context(), id, 0, false, func(e *streams.Event) error {
		v := projections.ViewEvent(e)
		if k := len(d.Events); k > 0 && collapses(v.Type) && d.Events[k-1].Type == v.Type {
			d.Events[k-1].EventView, d.Events[k-1].Repeat = v, d.Events[k-1].Repeat+1
		} else {
			d.Events = append(d.Events, &timelineEntry{EventView: v, Repeat: 1})
		}
		d.LastSeq = e.Seq
		if n++; n >= MaxEventsLimit {
			return errPageFull
		}
		return nil
	})
	if g.index.waitSynced(r.Context()) == nil {
		var next *Cursor
		d.Children, next = g.index.List(engine.Filter{Parent: id}, nil, 200)
		d.MoreKids = next != nil
	}
	g.render(w, http.StatusOK, "job", "Job "+id, d)
}

// collapses reports whether a run of events of this type is one line of the
// timeline (the last of them, and how many): progress reports, and the
// fan-in counts of a waiting parent.
func collapses(typ string) bool { return typ == streams.EvProgress || typ == streams.EvFanIn }

// timelineEntry is one line of a job's timeline: an event, or the last of
// a run of progress or fan-in events (Repeat of them).
type timelineEntry struct {
	*projections.EventView
	Repeat int
}

var errNotAJob = fmt.Errorf("not a job id: %w", commands.ErrNotFound)

// GET /queues
func (g *Gateway) pageQueues(w http.ResponseWriter, r *http.Request) {
	qs, err := g.queues(r.Context())
	d := map[string]any{"Queues": qs, "Error": ""}
	status := http.StatusOK
	if err != nil {
		d["Error"] = err.Error()
		status = http.StatusServiceUnavailable
	}
	g.render(w, status, "queues", "Queues", d)
}

// GET /workers
func (g *Gateway) pageWorkers(w http.ResponseWriter, r *http.Request) {
	recs, err := g.workers.List(r.Context())
	views := make([]*WorkerView, 0, len(recs))
	for _, rec := range recs {
		views = append(views, g.workers.View(rec))
	}
	d := map[string]any{"Workers": views, "Error": "", "Lease": g.cfg.Lease.Seconds()}
	status := http.StatusOK
	if err != nil {
		d["Error"] = err.Error()
		status = http.StatusServiceUnavailable
	}
	g.render(w, status, "workers", "Workers", d)
}
