package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// jobID reads the {id} of a job route; an id that cannot name a job is an
// unknown job (404), like an id no job has.
func jobID(r *http.Request) (string, error) {
	id := r.PathValue("id")
	if !domain.ValidID(id) {
		p := newProblem(engine.ProblemNotFound, http.StatusNotFound, fmt.Sprintf("no job has the id %q", id))
		p.JobID = id
		return "", p
	}
	return id, nil
}

// fail writes err as a problem, with the job id it is about.
func fail(w http.ResponseWriter, r *http.Request, err error, jobID string) {
	p := problemOf(err)
	if p.JobID == "" {
		p.JobID = jobID
	}
	writeProblem(w, r, p)
}

// view renders a job as the API returns it: the one JSON object of the
// CLI's --json, with the queue position of a queued job.
func (g *Gateway) view(ctx context.Context, j *domain.Job) *projections.JobView {
	return g.store.View(ctx, j)
}

func jobURL(id string) string { return "/api/v1/jobs/" + id }

// POST /jobs
func (g *Gateway) submitJob(w http.ResponseWriter, r *http.Request) {
	if isMultipart(r) {
		g.submitWithFiles(w, r)
		return
	}
	body, err := readBody(w, r, g.cfg.MaxBodyBytes)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	req, err := decodeSubmit(body)
	if err == nil {
		req.Namespace, err = scopeNamespace(r, commands.ActSubmit, req.Namespace)
	}
	if err == nil {
		err = submitUser(r, req)
	}
	if err == nil {
		err = g.store.CheckRefs(r.Context(), principal(r), req)
	}
	if err != nil {
		fail(w, r, err, "")
		return
	}
	res, err := g.store.Submit(submitContext(r.Context(), r), req)
	g.created(w, r, res, err, "")
}

// submitUser sets who a submitted job runs for: with access control, the
// token's name unless an admin names another (commands.SubmitUser; a
// non-admin naming another user is 403 user-not-allowed); without, as
// given.
func submitUser(r *http.Request, req *commands.SubmitRequest) error {
	p := principal(r)
	if p == nil {
		return nil
	}
	user, err := commands.SubmitUser(p.Role, p.Name, req.User)
	if err != nil {
		return err
	}
	req.User = user
	return nil
}

// created answers a submit (or a retry): 201 and the new job, 200 and the
// existing job an idempotency key named.
func (g *Gateway) created(w http.ResponseWriter, r *http.Request, res engine.Submitted, err error, id string) {
	if err != nil {
		fail(w, r, err, id)
		return
	}
	g.index.Put(res.Job, res.Rev)
	w.Header().Set("Location", jobURL(res.Job.ID))
	status := http.StatusCreated
	if !res.Created {
		status = http.StatusOK
	}
	writeJSON(w, status, g.answer(r.Context(), g.view(r.Context(), res.Job)))
}

// GET /jobs/{id}, with Prefer: wait=N.
func (g *Gateway) getJob(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	if r.URL.Query().Has("at") {
		g.getJobAt(w, r, id)
		return
	}
	ctx := r.Context()
	snap, err := g.store.Read(ctx, id)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	w.Header().Add("Vary", "Prefer")
	if d, ok := preferWait(r.Header.Get("Prefer"), g.cfg.MaxWait); ok && d > 0 && !snap.Job.State.Terminal() {
		// Preference-Applied says the request waited: not for a job
		// that was already terminal, nor for wait=0.
		release, err := g.hold(w)
		if err != nil {
			fail(w, r, err, id)
			return
		}
		defer release()
		w.Header().Set("Preference-Applied", "wait="+strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10))
		wctx, cancel := g.revocable(r)
		defer cancel()
		if snap.Job, err = g.waitTerminal(wctx, id, d, snap.Job); err != nil {
			fail(w, r, err, id)
			return
		}
	}
	writeJSON(w, http.StatusOK, g.view(ctx, snap.Job))
}

// preferWait reads the wait preference of a Prefer header (RFC 7240):
// "wait=10", possibly among other preferences, capped at limit (a number
// of seconds of any length is read, and saturates). Anything malformed is
// no preference at all.
func preferWait(h string, limit time.Duration) (time.Duration, bool) {
	if h == "" {
		return 0, false
	}
	for _, pref := range strings.Split(h, ",") {
		pref, _, _ = strings.Cut(pref, ";")
		name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
			continue
		}
		val = strings.Trim(strings.TrimSpace(val), `"`)
		if val == "" {
			return 0, false
		}
		capSecs := uint64(limit / time.Second)
		var secs uint64
		for _, c := range val {
			if c < '0' || c > '9' {
				return 0, false
			}
			if secs <= capSecs {
				secs = secs*10 + uint64(c-'0')
			}
		}
		if secs > capSecs {
			return limit, true
		}
		return min(time.Duration(secs)*time.Second, limit), true
	}
	return 0, false
}

// waitTerminal watches a job's record until it is terminal or d passed,
// and returns the last record seen, or shown if none came past it:
// Store.WaitTerminal, which the NATS wait command uses too, ended early
// when the gateway stops.
func (g *Gateway) waitTerminal(ctx context.Context, id string, d time.Duration, shown *domain.Job) (*domain.Job, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(g.base(), cancel)
	defer stop()
	return g.store.WaitTerminal(ctx, id, d, shown)
}

// POST /jobs/{id}/cancel, DELETE /jobs/{id}
func (g *Gateway) cancelJob(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	var req cancelRequest
	if r.Method == http.MethodPost {
		if err := g.readJSON(w, r, &req, true); err != nil {
			fail(w, r, err, id)
			return
		}
	} else {
		req.Reason = r.URL.Query().Get("reason")
	}
	if err := commands.CheckReason("reason", req.Reason); err != nil {
		fail(w, r, err, id)
		return
	}
	snap, err := g.store.Cancel(r.Context(), id, req.Reason)
	if err != nil && !errors.Is(err, commands.ErrTerminal) {
		fail(w, r, err, id)
		return
	}
	g.index.Put(snap.Job, snap.Rev)
	writeJSON(w, http.StatusOK, g.view(r.Context(), snap.Job))
}

// POST /jobs/{id}/retry
func (g *Gateway) retryJob(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	var req retryRequest
	if err := g.readJSON(w, r, &req, true); err != nil {
		fail(w, r, err, id)
		return
	}
	res, err := g.store.Retry(submitContext(r.Context(), r), id, req.IdempotencyKey, req.FailedPieces)
	g.created(w, r, res, err, id)
}

// POST /jobs/{id}/purge: {"reason": "..."} (optional). The job and its
// children are purged (job.purged; records, files, schedule deleted; the
// events stay in the log); a job not finished, or with a child that is
// not, is refused (invalid-transition).
func (g *Gateway) purgeJob(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	var req cancelRequest
	if err := g.readJSON(w, r, &req, true); err != nil {
		fail(w, r, err, id)
		return
	}
	if err := commands.CheckReason("reason", req.Reason); err != nil {
		fail(w, r, err, id)
		return
	}
	if req.Reason == "" {
		req.Reason = commands.DefaultPurgeReason
	}
	n, err := g.store.Purge(r.Context(), id, req.Reason)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"id": id, "purged": n})
}

// POST /jobs/{id}/priority: {"priority": N} for a job that has not
// started (job.reprioritized).
func (g *Gateway) reprioritizeJob(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	var req priorityRequest
	if err := g.readJSON(w, r, &req, false); err != nil {
		fail(w, r, err, id)
		return
	}
	if req.Priority == nil {
		fail(w, r, &commands.InputError{Field: "priority", Reason: "is required"}, id)
		return
	}
	snap, err := g.store.Reprioritize(r.Context(), id, *req.Priority)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	g.index.Put(snap.Job, snap.Rev)
	writeJSON(w, http.StatusOK, g.view(r.Context(), snap.Job))
}

// jobList is a page of jobs, newest first.
type jobList struct {
	Jobs []*projections.JobView `json:"jobs"`
	// NextCursor fetches the next (older) page; absent on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
	// Scanned is how many jobs a search of their payloads read for this
	// page (search.go): a page may end short of the limit, with a cursor,
	// when it read searchBudget of them.
	Scanned int `json:"scanned,omitempty"`
}

// strictQuery parses a request's query, refusing one that is malformed
// (url.Values drops a pair it cannot unescape, which would turn
// "?cursor=%%%" into the first page): a bad-cursor problem if the pair is
// the cursor, else an invalid-input problem naming the parameter.
func strictQuery(r *http.Request) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err == nil {
		return q, nil
	}
	field := "query"
	for _, part := range strings.Split(r.URL.RawQuery, "&") {
		k, v, _ := strings.Cut(part, "=")
		key, kerr := url.QueryUnescape(k)
		if _, verr := url.QueryUnescape(v); kerr != nil || verr != nil || strings.Contains(part, ";") {
			field = key
			if kerr != nil {
				field = k
			}
			break
		}
	}
	if field == "cursor" {
		return nil, newProblem(problemBadCursor, http.StatusBadRequest,
			"the cursor is not one this API handed out (the query does not decode); start again without it")
	}
	return nil, &commands.InputError{Field: field, Reason: "the query string does not decode: " + err.Error()}
}

// listParams reads the filter, cursor and limit of a list request.
func listParams(q url.Values) (engine.Filter, *Cursor, int, error) {
	f := engine.Filter{State: domain.State(q.Get("state")), Queue: q.Get("queue"), Type: q.Get("type"),
		Namespace: q.Get("namespace"), Parent: q.Get("parent")}
	var err error
	if f.Search, err = searchParams(q, time.Now()); err != nil {
		return f, nil, 0, err
	}
	if err := f.Validate(); err != nil {
		return f, nil, 0, err
	}
	limit := defaultPageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageSize {
			return f, nil, 0, &commands.InputError{Field: "limit", Reason: fmt.Sprintf("%q: want 1-%d", s, maxPageSize)}
		}
		limit = n
	}
	var cur *Cursor
	if s := q.Get("cursor"); s != "" {
		c, err := decodeCursor(s)
		if err != nil {
			return f, nil, 0, err
		}
		cur = &c
	}
	return f, cur, limit, nil
}

// GET /jobs
func (g *Gateway) listJobs(w http.ResponseWriter, r *http.Request) {
	q, err := strictQuery(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	if q.Has("at") {
		g.listJobsAt(w, r, q)
		return
	}
	f, cur, limit, err := listParams(q)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	list, err := g.list(r.Context(), f, cur, limit)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// GET /jobs/{id}/children
func (g *Gateway) listChildren(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	if _, err := g.store.Read(r.Context(), id); err != nil {
		fail(w, r, err, id)
		return
	}
	q, err := strictQuery(r)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	q.Del("parent") // the path names the parent
	f, cur, limit, err := listParams(q)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	f.Parent = id
	list, err := g.list(r.Context(), f, cur, limit)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// list pages through the index and reads the page's records in one
// request (a multi-subject direct get of the jobs bucket's stream).
func (g *Gateway) list(ctx context.Context, f engine.Filter, cur *Cursor, limit int) (*jobList, error) {
	if err := g.index.waitSynced(ctx); err != nil {
		return nil, err
	}
	if f.NeedsRecord() {
		return g.searchPage(ctx, f, cur, limit)
	}
	sums, next := g.index.List(f, cur, limit)
	out := &jobList{Jobs: make([]*projections.JobView, 0, len(sums))}
	if next != nil {
		out.NextCursor = next.Encode()
	}
	jobs, err := g.records(ctx, sums)
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		// The index may be a moment behind the bucket: the filter is
		// checked again on the current record.
		if f.Match(j) {
			out.Jobs = append(out.Jobs, projections.View(j))
		}
	}
	return out, nil
}

// records reads the current records of the summarized jobs, in order.
func (g *Gateway) records(ctx context.Context, sums []*summary) ([]*domain.Job, error) {
	if len(sums) == 0 {
		return nil, nil
	}
	subjects := make([]string, len(sums))
	for i, s := range sums {
		subjects[i] = streams.KVSubject(s.ID)
	}
	msgs, err := streams.MultiLast(ctx, g.store.NC, "KV_"+streams.JobsBucket, subjects)
	if err != nil {
		return nil, fmt.Errorf("read a page of jobs: %w", err)
	}
	out := make([]*domain.Job, 0, len(sums))
	for i, s := range sums {
		m, ok := msgs[subjects[i]]
		if !ok {
			// Left out of a large answer, or gone: ask for this one.
			snap, err := g.store.Record(ctx, s.ID)
			if err != nil {
				continue
			}
			out = append(out, snap.Job)
			continue
		}
		if m.Deleted {
			continue
		}
		j, err := streams.DecodeJob(m.Data)
		if err != nil {
			g.log.Warn("undecodable job record", "job", s.ID, "err", err)
			continue
		}
		out = append(out, j)
	}
	return out, nil
}
