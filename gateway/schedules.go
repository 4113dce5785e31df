package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// The schedules (docs/schedules.md):
//
//	GET    /api/v1/schedules                  list (?namespace=; text/event-stream: the list at each change)
//	POST   /api/v1/schedules                  create: 201, or 200 and the schedule for the same spec again
//	GET    /api/v1/schedules/{name}           one (?namespace=, default "default")
//	PATCH  /api/v1/schedules/{name}           change
//	DELETE /api/v1/schedules/{name}           delete
//	POST   /api/v1/schedules/{name}/pause     pause
//	POST   /api/v1/schedules/{name}/resume    resume
//
// With access control, reading needs the read action and the rest the
// schedule action (admin, producer); a namespaced token acts in its own
// namespace (naming another is 403).
func (g *Gateway) scheduleRoutes(mux *http.ServeMux) {
	const v1 = "/api/v1"
	read, write := commands.ActRead, commands.ActSchedule
	route(mux, v1+"/schedules", methods{"GET": g.act(read, g.listSchedules), "POST": g.act(write, g.createSchedule)})
	route(mux, v1+"/schedules/{name}", methods{"GET": g.act(read, g.getSchedule), "PATCH": g.act(write, g.patchSchedule),
		"DELETE": g.act(write, g.scheduleAction(g.store.Schedules.Delete))})
	route(mux, v1+"/schedules/{name}/pause", methods{"POST": g.act(write, g.scheduleAction(g.store.Schedules.Pause))})
	route(mux, v1+"/schedules/{name}/resume", methods{"POST": g.act(write, g.scheduleAction(g.store.Schedules.Resume))})
}

// scheduleStreamBatch is how long the schedules stream gathers changes
// before it sends the list again.
const scheduleStreamBatch = 250 * time.Millisecond

// scheduleNamespace is the namespace a request about schedules names:
// ?namespace= (filled in from a namespaced token by act), checked; "" if
// none.
func scheduleNamespace(r *http.Request) (string, error) {
	q, err := strictQuery(r)
	if err != nil {
		return "", err
	}
	ns := q.Get("namespace")
	if ns != "" {
		if err := commands.CheckNamespace(ns); err != nil {
			return "", err
		}
	}
	return ns, nil
}

// oneSchedule is the namespace and name of a request about one schedule.
func oneSchedule(r *http.Request) (string, string, error) {
	ns, err := scheduleNamespace(r)
	if ns == "" {
		ns = domain.DefaultNS
	}
	if err != nil {
		return ns, "", err
	}
	name := r.PathValue("name")
	return ns, name, commands.CheckScheduleName(name)
}

func scheduleURL(ns, name string) string {
	return "/api/v1/schedules/" + url.PathEscape(name) + "?namespace=" + url.QueryEscape(ns)
}

// GET /schedules: {"schedules": [...]}, or with Accept: text/event-stream
// a "schedules" event with the list now and at each change.
func (g *Gateway) listSchedules(w http.ResponseWriter, r *http.Request) {
	ns, err := scheduleNamespace(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	list := func() ([]*projections.ScheduleView, error) {
		recs, err := g.store.Schedules.List(r.Context(), ns)
		if err != nil {
			return nil, err
		}
		out := make([]*projections.ScheduleView, len(recs))
		for i, rec := range recs {
			out[i] = projections.ViewSchedule(rec)
		}
		return out, nil
	}
	if !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		views, err := list()
		if err != nil {
			fail(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"schedules": views})
		return
	}
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
	sse, err := startSSE(w)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	ctx, cancel := g.revocable(r)
	defer cancel()
	stop := context.AfterFunc(g.base(), cancel)
	defer stop()
	ping := time.NewTicker(sseKeepAlive)
	defer ping.Stop()
	for {
		_, changed, err := g.store.Schedules.Snapshot(ctx)
		if err != nil {
			return
		}
		views, err := list()
		if err != nil || sse.send("schedules", "", map[string]any{"schedules": views}) != nil {
			return
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-ping.C:
				if sse.comment("ping") != nil {
					return
				}
			case <-changed:
				break wait
			}
		}
		// Ticks of many schedules come together: one list for them.
		t := time.NewTimer(scheduleStreamBatch)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// POST /schedules: the body of commands.ScheduleRequest; its namespace is
// the body's or ?namespace= (the token's), not two different ones.
func (g *Gateway) createSchedule(w http.ResponseWriter, r *http.Request) {
	ns, err := scheduleNamespace(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	body, err := readBody(w, r, g.cfg.MaxBodyBytes)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	req, err := decodeSchedule(body)
	if err == nil && req.Namespace != "" {
		_, err = scopeNamespace(r, commands.ActSchedule, req.Namespace) // a namespaced token naming another: 403
	}
	if err == nil && ns != "" && req.Namespace != "" && req.Namespace != ns {
		err = &commands.InputError{Field: "namespace", Value: fmt.Sprintf("%q", req.Namespace),
			Reason: fmt.Sprintf("the body names another namespace than the request (%s)", ns)}
	}
	if err == nil && req.Namespace == "" {
		req.Namespace = ns
	}
	if err == nil {
		req.Namespace, err = scopeNamespace(r, commands.ActSchedule, req.Namespace)
	}
	if err == nil {
		err = submitUser(r, req.Job)
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	rec, created, err := g.store.Schedules.Create(r.Context(), req)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	w.Header().Set("Location", scheduleURL(rec.Namespace, rec.Name))
	status := http.StatusCreated
	if !created {
		status = http.StatusOK
	}
	writeJSON(w, status, projections.ViewSchedule(rec))
}

// decodeSchedule decodes the body of POST /schedules strictly and checks
// it without writing anything (commands.ScheduleRequest.Spec; the job's
// type and schema are the registry's, at the create).
func decodeSchedule(body []byte) (*commands.ScheduleRequest, error) {
	var req commands.ScheduleRequest
	if err := decodeStrict(body, &req, false); err != nil {
		return nil, err
	}
	if err := commands.CheckGivenNamespace(body, true); err != nil {
		return nil, err
	}
	if _, _, err := req.Spec(time.Now()); err != nil {
		return nil, err
	}
	return &req, nil
}

// decodeSchedulePatch decodes the body of PATCH /schedules/{name}
// strictly.
func decodeSchedulePatch(body []byte) (*commands.SchedulePatch, error) {
	var p commands.SchedulePatch
	if err := decodeStrict(body, &p, false); err != nil {
		return nil, err
	}
	return &p, nil
}

// GET /schedules/{name}
func (g *Gateway) getSchedule(w http.ResponseWriter, r *http.Request) {
	ns, name, err := oneSchedule(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	g.writeSchedule(w, r)(g.store.Schedules.Get(r.Context(), ns, name))
}

// PATCH /schedules/{name}
func (g *Gateway) patchSchedule(w http.ResponseWriter, r *http.Request) {
	ns, name, err := oneSchedule(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	body, err := readBody(w, r, g.cfg.MaxBodyBytes)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	p, err := decodeSchedulePatch(body)
	if err == nil && p.Namespace != "" && p.Namespace != ns {
		err = &commands.InputError{Field: "namespace", Value: fmt.Sprintf("%q", p.Namespace), Reason: "a schedule does not move to another namespace"}
	}
	if err == nil && p.Job != nil {
		err = submitUser(r, p.Job)
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	g.writeSchedule(w, r)(g.store.Schedules.Update(r.Context(), ns, name, p))
}

// scheduleAction answers DELETE /schedules/{name} (the schedule as it
// ended, deleted: true), POST /schedules/{name}/pause and /resume: act on
// the named schedule of the caller's namespace.
func (g *Gateway) scheduleAction(act func(ctx context.Context, ns, name string) (*domain.ScheduleRecord, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ns, name, err := oneSchedule(r)
		if err != nil {
			fail(w, r, err, "")
			return
		}
		g.writeSchedule(w, r)(act(r.Context(), ns, name))
	}
}

// writeSchedule answers with a schedule, or the error.
func (g *Gateway) writeSchedule(w http.ResponseWriter, r *http.Request) func(*domain.ScheduleRecord, error) {
	return func(rec *domain.ScheduleRecord, err error) {
		if err != nil {
			fail(w, r, err, "")
			return
		}
		writeJSON(w, http.StatusOK, projections.ViewSchedule(rec))
	}
}
