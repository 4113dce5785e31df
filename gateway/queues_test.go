package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
)

// limitsOf reads a queue's limits from its record (none: no record).
func (e *env) limitsOf(queue string) domain.QueueLimits {
	e.t.Helper()
	rec, err := e.store.Queue(e.ctx, queue)
	if err != nil {
		return domain.QueueLimits{}
	}
	return rec.Limits
}

// queueOf is one queue of GET /queues, as its raw JSON object.
func queueOf(t *testing.T, r resp, name string) map[string]json.RawMessage {
	t.Helper()
	var qs struct{ Queues []map[string]json.RawMessage }
	r.want(t, http.StatusOK).json(t, &qs)
	for _, q := range qs.Queues {
		if string(q["name"]) == `"`+name+`"` {
			return q
		}
	}
	t.Fatalf("no queue %s in %s", name, r.body)
	return nil
}

// TestQueueLimitsPut: PUT /queues/{queue} sets the limits given and keeps
// those left out; every refusal is its problem and changes nothing.
func TestQueueLimitsPut(t *testing.T) {
	e := newEnv(t)
	var q QueueInfo
	e.do("PUT", "/api/v1/queues/lim", `{"max_running": 3}`).want(t, http.StatusOK).json(t, &q)
	if q.Name != "lim" || q.MaxRunning != 3 || q.MaxRunningPerUser != 0 {
		t.Fatalf("after max_running 3: %+v", q)
	}
	e.do("PUT", "/api/v1/queues/lim", `{"max_running_per_user": 2}`).want(t, http.StatusOK).json(t, &q)
	if q.MaxRunning != 3 || q.MaxRunningPerUser != 2 {
		t.Fatalf("after max_running_per_user 2 (max_running left out): %+v", q)
	}
	if got := e.limitsOf("lim"); got != (domain.QueueLimits{MaxRunning: 3, MaxRunningPerUser: 2}) {
		t.Fatalf("record's limits %+v", got)
	}
	e.do("PUT", "/api/v1/queues/lim", `{}`).want(t, http.StatusOK).json(t, &q)
	if q.MaxRunning != 3 || q.MaxRunningPerUser != 2 {
		t.Fatalf("after {}: %+v", q)
	}

	for _, c := range []struct {
		path, body  string
		status      int
		slug, field string
	}{
		{"/api/v1/queues/lim", `{"max_running": -1}`, 400, "invalid-input", "max_running"},
		{"/api/v1/queues/lim", `{"max_running_per_user": 1000001}`, 400, "invalid-input", "max_running_per_user"},
		{"/api/v1/queues/lim", `{"max_running": 1, "max_running_per_user": -5}`, 400, "invalid-input", "max_running_per_user"},
		{"/api/v1/queues/lim", `{"max_running": 1e30}`, 400, "malformed-request", "max_running"},
		{"/api/v1/queues/lim", `{"max_running": 1.5}`, 400, "malformed-request", "max_running"},
		{"/api/v1/queues/lim", `{"max_running": "many"}`, 400, "malformed-request", "max_running"},
		{"/api/v1/queues/lim", `{"max_running": 1, "paused": true}`, 400, "malformed-request", ""},
		{"/api/v1/queues/lim", `{"max_running": 1} {}`, 400, "malformed-request", ""},
		{"/api/v1/queues/lim", ``, 400, "malformed-request", ""},
		{"/api/v1/queues/bad.name", `{"max_running": 1}`, 400, "invalid-input", "queue"},
		{"/api/v1/queues/" + strings.Repeat("q", 65), `{"max_running": 1}`, 400, "invalid-input", "queue"},
	} {
		before := e.eventCount()
		p := e.do("PUT", c.path, c.body).problem(t, c.status, c.slug)
		if p.Field != c.field {
			t.Errorf("PUT %s %s: field %q, want %q", c.path, c.body, p.Field, c.field)
		}
		if after := e.eventCount(); after != before {
			t.Errorf("PUT %s %s: refused, but the log grew by %d", c.path, c.body, after-before)
		}
		if got := e.limitsOf("lim"); got != (domain.QueueLimits{MaxRunning: 3, MaxRunningPerUser: 2}) {
			t.Errorf("PUT %s %s: refused, but the limits are %+v", c.path, c.body, got)
		}
	}
	if _, err := e.store.Queue(e.ctx, "bad.name"); err == nil {
		t.Error("a refused PUT created queue bad.name")
	}
	r := e.do("GET", "/api/v1/queues/lim", nil)
	r.problem(t, http.StatusMethodNotAllowed, "method-not-allowed")
	if r.header.Get("Allow") != "PUT" {
		t.Errorf("Allow %q", r.header.Get("Allow"))
	}

	// Limits as they are write nothing, for a queue that never had any too.
	e.submit(map[string]any{"type": "t.x"})
	before := e.eventCount()
	e.do("PUT", "/api/v1/queues/lim", `{"max_running": 3}`).want(t, http.StatusOK)
	e.do("PUT", "/api/v1/queues/default", `{"max_running": 0, "max_running_per_user": 0}`).want(t, http.StatusOK).json(t, &q)
	if after := e.eventCount(); after != before || q.Name != "default" || q.MaxRunning != 0 {
		t.Errorf("PUTs of the limits a queue has: the log grew by %d, answered %+v", after-before, q)
	}
	if rec, err := e.store.Queue(e.ctx, "default"); err != nil || rec.LimitsSeq != 0 {
		t.Errorf("default queue %+v %v: limits recorded", rec, err)
	}

	// 0 removes a limit.
	e.do("PUT", "/api/v1/queues/lim", `{"max_running": 0}`).want(t, http.StatusOK).json(t, &q)
	if q.MaxRunning != 0 || q.MaxRunningPerUser != 2 {
		t.Fatalf("after max_running 0: %+v", q)
	}
	got := queueOf(t, e.do("GET", "/api/v1/queues", nil), "lim")
	if string(got["max_running"]) != "0" || string(got["max_running_per_user"]) != "2" {
		t.Fatalf("GET /queues shows %s", e.do("GET", "/api/v1/queues", nil).body)
	}
}

// TestPendingJobView: with max_running 1, the first job takes the slot
// (queued, no worker takes it) and the others wait in pending: their view
// says which limit holds them and where they stand, GET /queues counts
// them by user, and the dashboard shows both. Removing the limit admits
// them up to the per-user one.
func TestPendingJobView(t *testing.T) {
	e := newEnv(t)
	e.do("PUT", "/api/v1/queues/lim", map[string]any{"max_running": 1, "max_running_per_user": 2}).want(t, http.StatusOK)
	first := e.submit(map[string]any{"type": "t.block", "queue": "lim", "user": "ann"})
	if first.User != "ann" {
		t.Fatalf("user %q: without access control the user is as given", first.User)
	}
	e.waitState(first.ID, domain.StateQueued)
	var pend []string
	for range 2 {
		pend = append(pend, e.submit(map[string]any{"type": "t.block", "queue": "lim", "user": "ann"}).ID)
	}
	for i, id := range pend {
		testkit.WaitFor(t, 20*time.Second, func() error {
			v := e.get(id)
			if v.State != domain.StatePending || v.PendingPosition == nil || v.Hold == nil {
				return fmt.Errorf("job %s: %s, position %v, hold %+v", id, v.State, v.PendingPosition, v.Hold)
			}
			if *v.PendingPosition != i {
				return fmt.Errorf("job %s: pending_position %d, want %d", id, *v.PendingPosition, i)
			}
			want := commands.HoldMessage("lim", "ann", domain.Hold{Limit: domain.LimitQueue, Max: 1})
			if v.Hold.Limit != domain.LimitQueue || v.Hold.Max != 1 || v.Hold.Message != want || v.Hold.Since.IsZero() {
				return fmt.Errorf("job %s: hold %+v, want max_running 1 %q", id, v.Hold, want)
			}
			if v.User != "ann" {
				return fmt.Errorf("job %s: user %q", id, v.User)
			}
			return nil
		})
	}
	// A job that is not pending has neither.
	raw := string(e.do("GET", "/api/v1/jobs/"+first.ID, nil).want(t, 200).body)
	if strings.Contains(raw, `"hold"`) || strings.Contains(raw, `"pending_position"`) || !strings.Contains(raw, `"queue_position"`) {
		t.Errorf("a queued job: %s", raw)
	}

	testkit.WaitFor(t, 20*time.Second, func() error {
		q := queueOf(t, e.do("GET", "/api/v1/queues", nil), "lim")
		var slots commands.Counts
		if err := json.Unmarshal(q["slots"], &slots); err != nil {
			return fmt.Errorf("slots %s: %v", q["slots"], err)
		}
		if slots.Holding != 1 || slots.Pending != 2 || slots.Users["default/ann"] != (commands.Count{Holding: 1, Pending: 2}) {
			return fmt.Errorf("slots %+v", slots)
		}
		if string(q["max_running"]) != "1" || string(q["max_running_per_user"]) != "2" {
			return fmt.Errorf("limits %s %s", q["max_running"], q["max_running_per_user"])
		}
		return nil
	})

	// /metrics: the limits and the admitter's counts.
	testkit.WaitFor(t, 10*time.Second, func() error {
		body := string(e.do("GET", "/metrics", nil).want(t, 200).body)
		for _, s := range []string{`jetflow_queue_limit{limit="max_running",queue="lim"} 1`,
			`jetflow_queue_limit{limit="max_running_per_user",queue="lim"} 2`,
			`jetflow_queue_slots{queue="lim",state="running"} 1`, `jetflow_queue_slots{queue="lim",state="pending"} 2`} {
			if !strings.Contains(body, s) {
				return fmt.Errorf("/metrics lacks %s", s)
			}
		}
		return nil
	})

	// The dashboard: the queues page shows the limits and the pending
	// jobs, the job's page why it waits and where it stands, the jobs
	// page filters by pending.
	page := string(e.do("GET", "/queues", nil).want(t, 200).body)
	for _, s := range []string{`class="num maxrun">1<`, `class="num maxuser">2<`, `title="default/ann: 1 running, 2 pending">2<`} {
		if !strings.Contains(page, s) {
			t.Errorf("queues page lacks %s", s)
		}
	}
	jp := string(e.do("GET", "/jobs/"+pend[1], nil).want(t, 200).body)
	for _, s := range []string{`id="f-hold"`, "its max_running", `id="f-pending"`, "1 ahead", `id="f-user"`, "ann"} {
		if !strings.Contains(jp, s) {
			t.Errorf("the page of a pending job lacks %s", s)
		}
	}
	list := string(e.do("GET", "/?state=pending", nil).want(t, 200).body)
	if !strings.Contains(list, pend[0]) || !strings.Contains(list, pend[1]) || strings.Contains(list, first.ID) {
		t.Error("the jobs page filtered by pending does not list exactly the pending jobs")
	}

	// Without max_running, ann's limit of 2 admits one more; the last
	// waits for ann's slot.
	e.do("PUT", "/api/v1/queues/lim", `{"max_running": 0}`).want(t, http.StatusOK)
	e.waitState(pend[0], domain.StateQueued)
	testkit.WaitFor(t, 20*time.Second, func() error {
		v := e.get(pend[1])
		want := commands.HoldMessage("lim", "ann", domain.Hold{Limit: domain.LimitUser, Max: 2})
		if v.State != domain.StatePending || v.PendingPosition == nil || *v.PendingPosition != 0 ||
			v.Hold == nil || v.Hold.Limit != domain.LimitUser || v.Hold.Message != want {
			return fmt.Errorf("the last job: %s, position %v, hold %+v; want pending, first in line, held by ann's limit", v.State, v.PendingPosition, v.Hold)
		}
		return nil
	})
}

// TestQueueLimitsAccess: only a token of every namespace with the admin
// role may set limits (a namespaced one is 403 whatever its role); a
// namespaced token sees the limits, never the slots (other namespaces'
// users).
func TestQueueLimitsAccess(t *testing.T) {
	e := newAuthEnv(t)
	e.as("admin", "PUT", "/api/v1/queues/lim", `{"max_running": 1, "max_running_per_user": 1}`).want(t, http.StatusOK)
	want := domain.QueueLimits{MaxRunning: 1, MaxRunningPerUser: 1}
	refused := func(what string, r resp, status int, slug string) {
		t.Helper()
		r.problem(t, status, slug)
		if got := e.limitsOf("lim"); got != want {
			t.Errorf("%s: refused, but the limits are %+v", what, got)
		}
	}
	for _, who := range []string{"prodA", "workA", "readA", "prodB"} {
		before := e.eventCount()
		refused(who, e.as(who, "PUT", "/api/v1/queues/lim", `{"max_running": 9}`), http.StatusForbidden, "forbidden")
		if e.eventCount() != before {
			t.Errorf("%s: refused, but the log grew", who)
		}
	}
	refused("none", e.as("none", "PUT", "/api/v1/queues/lim", `{"max_running": 9}`), http.StatusUnauthorized, "unauthenticated")
	// An admin bound to one namespace (no token can be made so; the
	// principal is put in the request's context as the middleware would).
	req := httptest.NewRequest("PUT", "/api/v1/queues/lim", strings.NewReader(`{"max_running": 9}`))
	req = req.WithContext(engine.WithPrincipal(e.ctx, &engine.Principal{TokenID: "x", Name: "nsadmin", Namespace: "acme", Role: commands.RoleAdmin}))
	rec := httptest.NewRecorder()
	e.g.ServeHTTP(rec, req)
	refused("an admin of namespace acme", resp{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}, http.StatusForbidden, "forbidden")

	// Jobs of two namespaces' users; one waits.
	e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "t.x", "queue": "lim"}).want(t, http.StatusCreated)
	e.as("prodB", "POST", "/api/v1/jobs", map[string]any{"type": "t.x", "queue": "lim"}).want(t, http.StatusCreated)
	testkit.WaitFor(t, 20*time.Second, func() error {
		q := queueOf(t, e.as("admin", "GET", "/api/v1/queues", nil), "lim")
		var slots commands.Counts
		if err := json.Unmarshal(q["slots"], &slots); err != nil || slots.Holding != 1 || slots.Pending != 1 {
			return fmt.Errorf("admin sees slots %s", q["slots"])
		}
		if _, ok := slots.Users["acme/prod-a"]; !ok {
			return fmt.Errorf("admin sees slots %s, without user acme/prod-a", q["slots"])
		}
		return nil
	})
	for _, who := range []string{"readA", "prodA"} {
		r := e.as(who, "GET", "/api/v1/queues", nil)
		q := queueOf(t, r, "lim")
		if _, ok := q["slots"]; ok || strings.Contains(string(r.body), "prod-b") {
			t.Errorf("%s sees the slots: %s", who, r.body)
		}
		if string(q["max_running"]) != "1" || string(q["max_running_per_user"]) != "1" {
			t.Errorf("%s sees limits %s %s", who, q["max_running"], q["max_running_per_user"])
		}
	}
	ch, _ := e.openSSE("/api/v1/stream?with=queues", "Authorization", "Bearer "+e.tok["readA"])
	if ev := next(t, ch, "queues"); strings.Contains(ev.data, "slots") {
		t.Errorf("readA's stream shows slots: %s", ev.data)
	}
	if page := string(e.as("readA", "GET", "/queues", nil).want(t, 200).body); strings.Contains(page, "prod-b") {
		t.Error("readA's queues page names another namespace's user")
	}
}

// TestSubmitUser: with access control the job's user is its token's name,
// or another an admin names; any other token naming another is 403
// user-not-allowed and nothing is written, over JSON and multipart alike.
func TestSubmitUser(t *testing.T) {
	e := newAuthEnv(t)
	var v projections.JobView
	for _, c := range []struct {
		who, asked, want string
	}{
		{"prodA", "", "prod-a"},
		{"prodA", "prod-a", "prod-a"},
		{"admin", "", "root"},
		{"admin", "alice", "alice"},
	} {
		body := map[string]any{"type": "t.u"}
		if c.asked != "" {
			body["user"] = c.asked
		}
		e.as(c.who, "POST", "/api/v1/jobs", body).want(t, http.StatusCreated).json(t, &v)
		if v.User != c.want {
			t.Errorf("%s asking %q: user %q, want %q", c.who, c.asked, v.User, c.want)
		}
		if snap, err := e.store.Current(e.ctx, v.ID); err != nil || snap.Job.Spec.User != c.want {
			t.Errorf("%s asking %q: recorded %+v %v", c.who, c.asked, snap.Job, err)
		}
	}
	before := e.eventCount()
	p := e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "t.u", "user": "alice"}).problem(t, http.StatusForbidden, "user-not-allowed")
	if !strings.Contains(p.Detail, "alice") {
		t.Errorf("detail %q", p.Detail)
	}
	body, ct := multipartBody(t, `{"type":"t.u","user":"alice"}`, upFile{"in.txt", "x"})
	e.as("prodA", "POST", "/api/v1/jobs", body, "Content-Type", ct).problem(t, http.StatusForbidden, "user-not-allowed")
	if after := e.eventCount(); after != before {
		t.Errorf("refused submits grew the log by %d", after-before)
	}
	if obs := e.objects(); len(obs) != 0 {
		t.Errorf("a refused multipart submit left files %v", obs)
	}
	body, ct = multipartBody(t, `{"type":"t.u"}`, upFile{"in.txt", "x"})
	e.as("prodA", "POST", "/api/v1/jobs", body, "Content-Type", ct).want(t, http.StatusCreated).json(t, &v)
	if v.User != "prod-a" {
		t.Errorf("multipart by prodA: user %q", v.User)
	}
}

// TestSubmitUserWithoutAuth: without access control the user is as given.
func TestSubmitUserWithoutAuth(t *testing.T) {
	e := newEnv(t)
	if v := e.submit(map[string]any{"type": "t.u", "user": "bob"}); v.User != "bob" {
		t.Errorf("user %q, want bob", v.User)
	}
	raw := e.do("POST", "/api/v1/jobs", `{"type":"t.u"}`).want(t, http.StatusCreated).body
	if strings.Contains(string(raw), `"user"`) {
		t.Errorf("a job without a user shows one: %s", raw)
	}
	e.do("POST", "/api/v1/jobs", map[string]any{"type": "t.u", "user": "a\x00b"}).problem(t, http.StatusBadRequest, "invalid-input")
}
