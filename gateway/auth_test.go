package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
)

// authEnv is a gateway with access control on, and one token of each kind.
type authEnv struct {
	*env
	tok map[string]string // by who: admin, prodA, workA, readA, prodB, workB, revoked
	ids map[string]string // token ids, by who
}

var whos = []string{"none", "revoked", "admin", "prodA", "workA", "readA", "prodB"}

func newAuthEnv(t *testing.T) *authEnv {
	e := &authEnv{env: newEnv(t, func(c *Config) { c.Auth = true }), tok: map[string]string{}, ids: map[string]string{}}
	for who, spec := range map[string]commands.TokenSpec{
		"admin":   {Name: "root", Namespace: "*", Role: commands.RoleAdmin},
		"prodA":   {Name: "prod-a", Namespace: "acme", Role: commands.RoleProducer},
		"workA":   {Name: "work-a", Namespace: "acme", Role: commands.RoleWorker},
		"readA":   {Name: "read-a", Namespace: "acme", Role: commands.RoleReader},
		"prodB":   {Name: "prod-b", Namespace: "other", Role: commands.RoleProducer},
		"workB":   {Name: "work-b", Namespace: "other", Role: commands.RoleWorker},
		"revoked": {Name: "gone", Namespace: "acme", Role: commands.RoleProducer},
	} {
		rec, tok, err := e.store.Tokens.Create(e.ctx, spec, "test")
		if err != nil {
			t.Fatal(err)
		}
		e.tok[who], e.ids[who] = tok, rec.ID
	}
	// The gateway saw the token work, then it is revoked: refused within
	// a second (its watch of the tokens), with no restart.
	e.as("revoked", "GET", "/api/v1/jobs", nil).want(t, http.StatusOK)
	if _, err := e.store.Tokens.Revoke(e.ctx, e.ids["revoked"], "test"); err != nil {
		t.Fatal(err)
	}
	revokedAt := time.Now()
	testkit.WaitFor(t, time.Second, func() error {
		if r := e.as("revoked", "GET", "/api/v1/jobs", nil); r.status != http.StatusUnauthorized {
			return fmt.Errorf("revoked token still answered %d", r.status)
		}
		return nil
	})
	t.Logf("revoked token refused %s after the revoke", time.Since(revokedAt).Round(time.Millisecond))
	return e
}

// as sends a request with who's token ("none": without), not following
// redirects.
func (e *authEnv) as(who, method, path string, body any, headers ...string) resp {
	e.t.Helper()
	if tok := e.tok[who]; tok != "" {
		headers = append(headers, "Authorization", "Bearer "+tok)
	}
	return e.doNoRedirect(method, path, body, headers...)
}

// TestEveryRouteEveryRole sends every route of the API, the operations
// endpoints and the dashboard with no token, a revoked one, and one of
// each role in namespace acme (and a producer of namespace other), on
// acme's resources, and checks the status; a refused request writes
// nothing to the event log.
func TestEveryRouteEveryRole(t *testing.T) {
	e := newAuthEnv(t)
	ctx := engine.WithPrincipal(e.ctx, &engine.Principal{TokenID: "setup", Name: "setup", Namespace: "*", Role: commands.RoleAdmin})
	jobA, err := e.store.Submit(ctx, &commands.SubmitRequest{Type: "t.a", Namespace: "acme", Payload: commands.RawJSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	done, err := e.store.Submit(ctx, &commands.SubmitRequest{Type: "t.a", Namespace: "acme", Payload: commands.RawJSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Cancel(ctx, done.Job.ID, "for retry"); err != nil {
		t.Fatal(err)
	}
	jobB, err := e.store.Submit(ctx, &commands.SubmitRequest{Type: "t.b", Namespace: "other", Payload: commands.RawJSON(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	reg := func(who, ns string) string {
		var v WorkerView
		body := map[string]any{"name": who, "types": []string{"t.none"}}
		if ns != "" { // an empty namespace is refused; left out, it is the token's
			body["namespace"] = ns
		}
		r := e.as(who, "POST", "/api/v1/workers", body)
		r.want(t, http.StatusCreated).json(t, &v)
		return v.ID
	}
	wkA, wkB := reg("workA", "acme"), reg("workB", "")
	e.as("admin", "PUT", "/api/v1/types/acme/cat/seen", map[string]any{"schema": map[string]any{"type": "object"}}).want(t, http.StatusCreated)
	e.as("admin", "PUT", "/api/v1/types/other/cat/hidden", map[string]any{}).want(t, http.StatusCreated)
	e.as("admin", "POST", "/api/v1/schedules?namespace=acme", map[string]any{"name": "s-acme", "cron": "@daily", "job": map[string]any{"type": "t.s"}}).
		want(t, http.StatusCreated)
	e.as("admin", "POST", "/api/v1/schedules?namespace=other", map[string]any{"name": "s-other", "cron": "@daily", "job": map[string]any{"type": "t.s"}}).
		want(t, http.StatusCreated)
	newSchedule := func(ns string) func() any {
		return func() any {
			b := map[string]any{"name": "s-new", "every": "1h", "job": map[string]any{"type": "t.s"}}
			if ns != "" {
				b["namespace"] = ns
			}
			return b
		}
	}

	// A bulk operation of namespace acme that selects nothing (its
	// progress is the route's resource).
	var bulk bulkOp
	e.as("admin", "POST", "/api/v1/jobs/bulk", map[string]any{"action": "cancel", "query": "namespace=acme&type=t.nothing"}).
		want(t, http.StatusAccepted).json(t, &bulk)
	bulkA := bulk.ID

	const any2xx = 1 // any 2xx
	now := time.Now().UTC().Format(time.RFC3339Nano)
	A, T, B := jobA.Job.ID, done.Job.ID, jobB.Job.ID
	type route struct {
		method, path string
		body         func() any
		// status by who, in the order of whos: none, revoked, admin,
		// prodA, workA, readA, prodB.
		want [7]int
	}
	routes := []route{
		{"GET", "/api/v1/jobs", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"GET", "/api/v1/jobs?namespace=acme", nil, [7]int{401, 401, 200, 200, 403, 200, 403}},
		{"POST", "/api/v1/jobs", func() any { return map[string]any{"type": "t.new"} }, [7]int{401, 401, 201, 201, 403, 403, 201}},
		{"POST", "/api/v1/jobs", func() any { return map[string]any{"type": "t.new", "namespace": "acme"} }, [7]int{401, 401, 201, 201, 403, 403, 403}},
		{"GET", "/api/v1/jobs/" + A, nil, [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"GET", "/api/v1/jobs/" + B, nil, [7]int{401, 401, 200, 404, 403, 404, 200}},
		{"GET", "/api/v1/jobs/" + A + "/children", nil, [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"GET", "/api/v1/jobs/" + A + "/events", nil, [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"GET", "/api/v1/jobs/" + A + "/files", nil, [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"GET", "/api/v1/jobs/" + B + "/files", nil, [7]int{401, 401, 200, 404, 403, 404, 200}},
		{"GET", "/api/v1/jobs/" + A + "/download", nil, [7]int{401, 401, 202, 202, 403, 202, 404}},
		{"GET", "/api/v1/jobs/" + T + "/download", nil, [7]int{401, 401, 404, 404, 403, 404, 404}},
		{"GET", "/api/v1/jobs/" + A + "/inputs/in.txt?worker_id=" + wkA, nil, [7]int{401, 401, 409, 403, 409, 403, 403}},
		{"GET", "/api/v1/jobs/" + A + "/inputs/in.txt?worker_id=" + wkB, nil, [7]int{401, 401, 409, 403, 404, 403, 403}},
		{"PUT", "/api/v1/jobs/" + A + "/result?worker_id=" + wkA, func() any { return "zip" }, [7]int{401, 401, 409, 403, 409, 403, 403}},
		{"POST", "/api/v1/jobs/" + T + "/retry", func() any { return map[string]any{} }, [7]int{401, 401, 201, 201, 403, 403, 404}},
		{"POST", "/api/v1/jobs/" + A + "/purge", func() any { return map[string]any{} }, [7]int{401, 401, 409, 403, 403, 403, 403}},
		{"PATCH", "/api/v1/jobs/" + A, func() any { return map[string]any{"worker_id": wkA, "state": "running"} }, [7]int{401, 401, 409, 403, 409, 403, 403}},
		{"POST", "/api/v1/jobs/" + A + "/cancel", func() any { return map[string]any{"reason": "r"} }, [7]int{401, 401, 200, 200, 403, 403, 404}},
		{"DELETE", "/api/v1/jobs/" + B, nil, [7]int{401, 401, 200, 404, 403, 403, 200}},
		{"GET", "/api/v1/workers", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"POST", "/api/v1/workers", func() any { return map[string]any{"name": "x", "types": []string{"t.none"}} }, [7]int{401, 401, 201, 403, 201, 403, 403}},
		{"POST", "/api/v1/workers", func() any { return map[string]any{"name": "x", "types": []string{"t.none"}, "namespace": "other"} }, [7]int{401, 401, 201, 403, 403, 403, 403}},
		{"GET", "/api/v1/workers/" + wkA, nil, [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"GET", "/api/v1/workers/" + wkB, nil, [7]int{401, 401, 200, 404, 403, 404, 200}},
		{"POST", "/api/v1/workers/" + wkA + "/heartbeat", nil, [7]int{401, 401, 200, 403, 200, 403, 403}},
		{"POST", "/api/v1/workers/" + wkB + "/heartbeat", nil, [7]int{401, 401, 200, 403, 404, 403, 403}},
		{"POST", "/api/v1/tasks/claim", func() any { return map[string]any{"worker_id": wkA} }, [7]int{401, 401, 200, 403, 200, 403, 403}},
		{"POST", "/api/v1/tasks/claim", func() any { return map[string]any{"worker_id": wkB} }, [7]int{401, 401, 200, 403, 404, 403, 403}},
		{"PATCH", "/api/v1/batches/bt-AAAA", func() any { return map[string]any{"worker_id": wkA, "state": "succeeded"} }, [7]int{401, 401, 409, 403, 409, 403, 403}},
		{"PATCH", "/api/v1/batches/bt-AAAA", func() any { return map[string]any{"worker_id": wkB, "state": "succeeded"} }, [7]int{401, 401, 409, 403, 404, 403, 403}},
		{"GET", "/api/v1/queues", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"PUT", "/api/v1/queues/qlim", func() any { return map[string]any{"max_running": 5} }, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"POST", "/api/v1/queues/default/pause", nil, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"POST", "/api/v1/queues/default/resume", nil, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"GET", "/api/v1/types", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"GET", "/api/v1/types?namespace=other", nil, [7]int{401, 401, 200, 403, 403, 403, 200}},
		{"GET", "/api/v1/types/acme/cat/seen", nil, [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"GET", "/api/v1/types/other/cat/hidden", nil, [7]int{401, 401, 200, 404, 403, 404, 200}},
		{"PUT", "/api/v1/types/acme/cat/mine", func() any { return map[string]any{} }, [7]int{401, 401, any2xx, 403, any2xx, 403, 403}},
		{"PUT", "/api/v1/types/@global/cat/new", func() any { return map[string]any{} }, [7]int{401, 401, 201, 403, 403, 403, 403}},
		{"PUT", "/api/v1/types/other/cat/theirs", func() any { return map[string]any{} }, [7]int{401, 401, 201, 403, 403, 403, 403}},
		{"GET", "/api/v1/namespaces", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"PUT", "/api/v1/namespaces/acme", func() any { return map[string]any{"strict_types": false} }, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"GET", "/api/v1/tokens", nil, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"POST", "/api/v1/tokens", func() any { return map[string]any{"name": "n", "namespace": "acme", "role": "reader"} }, [7]int{401, 401, 201, 403, 403, 403, 403}},
		{"DELETE", "/api/v1/tokens/" + e.ids["workB"], nil, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"GET", "/api/v1/schedules", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"GET", "/api/v1/schedules?namespace=acme", nil, [7]int{401, 401, 200, 200, 403, 200, 403}},
		{"POST", "/api/v1/schedules", newSchedule(""), [7]int{401, 401, 201, 201, 403, 403, 201}},
		// prodA made acme's s-new above, its job running for prod-a; the
		// admin's runs for no one: another spec.
		{"POST", "/api/v1/schedules", newSchedule("acme"), [7]int{401, 401, 409, 200, 403, 403, 403}},
		{"GET", "/api/v1/schedules/s-acme?namespace=acme", nil, [7]int{401, 401, 200, 200, 403, 200, 403}},
		{"GET", "/api/v1/schedules/s-acme", nil, [7]int{401, 401, 404, 200, 403, 200, 404}},
		{"PATCH", "/api/v1/schedules/s-acme?namespace=acme", func() any { return map[string]any{"overlap": "allow"} }, [7]int{401, 401, 200, 200, 403, 403, 403}},
		{"POST", "/api/v1/schedules/s-acme/pause", nil, [7]int{401, 401, 404, 200, 403, 403, 404}},
		{"POST", "/api/v1/schedules/s-acme/resume?namespace=acme", nil, [7]int{401, 401, 200, 200, 403, 403, 403}},
		{"DELETE", "/api/v1/schedules/s-other?namespace=other", nil, [7]int{401, 401, 200, 403, 403, 403, 404}},
		{"GET", "/api/v1/stats", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"GET", "/api/v1/stats?namespace=acme", nil, [7]int{401, 401, 200, 200, 403, 200, 403}},
		{"GET", "/api/v1/stats/series", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"GET", "/api/v1/stats/series?range=week&namespace=acme", nil, [7]int{401, 401, 200, 200, 403, 200, 403}},
		{"GET", "/api/v1/jobs/" + A + "/pieces", nil, [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"GET", "/api/v1/jobs/" + B + "/pieces", nil, [7]int{401, 401, 200, 404, 403, 404, 200}},
		{"POST", "/api/v1/jobs/bulk", func() any { return map[string]any{"action": "cancel", "query": "type=t.a", "dry_run": true} }, [7]int{401, 401, 200, 200, 403, 403, 200}},
		{"POST", "/api/v1/jobs/bulk", func() any { return map[string]any{"action": "retry", "query": "namespace=acme", "dry_run": true} }, [7]int{401, 401, 200, 200, 403, 403, 403}},
		{"POST", "/api/v1/jobs/bulk", func() any { return map[string]any{"action": "purge", "query": "state=failed", "dry_run": true} }, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"GET", "/api/v1/bulk/" + bulkA, nil, [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"GET", "/api/v1/bulk/bk-NONE", nil, [7]int{401, 401, 404, 404, 403, 404, 404}},
		{"GET", "/api/v1/jobs?at=" + now, nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"GET", "/api/v1/jobs?namespace=acme&at=" + now, nil, [7]int{401, 401, 200, 200, 403, 200, 403}},
		{"GET", "/api/v1/audit/verify", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"GET", "/api/v1/audit/verify?namespace=acme", nil, [7]int{401, 401, 200, 200, 403, 200, 403}},
		{"GET", "/api/v1/audit/verify?job=" + A, nil, [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"GET", "/api/v1/audit/verify?job=" + B, nil, [7]int{401, 401, 200, 404, 403, 404, 200}},
		{"GET", "/api/v1/audit/export", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"GET", "/api/v1/audit/export?namespace=other", nil, [7]int{401, 401, 200, 403, 403, 403, 200}},
		{"GET", "/api/v1/audit/pubkey", nil, [7]int{401, 401, 404, 404, 403, 404, 404}},
		{"GET", "/metrics", nil, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"GET", "/readyz", nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"GET", "/healthz", nil, [7]int{200, 200, 200, 200, 200, 200, 200}},
		{"GET", "/", nil, [7]int{303, 303, 200, 200, 403, 200, 200}},
		{"GET", "/jobs/" + A, nil, [7]int{303, 303, 200, 200, 403, 200, 404}},
		{"GET", "/queues", nil, [7]int{303, 303, 200, 200, 403, 200, 200}},
		{"GET", "/types", nil, [7]int{303, 303, 200, 200, 403, 200, 200}},
		{"GET", "/workers", nil, [7]int{303, 303, 200, 200, 403, 200, 200}},
		{"GET", "/overview", nil, [7]int{303, 303, 200, 200, 403, 200, 200}},
		{"GET", "/overview?namespace=acme", nil, [7]int{303, 303, 200, 200, 403, 200, 403}},
		{"GET", "/queues/default", nil, [7]int{303, 303, 200, 200, 403, 200, 200}},
		{"GET", "/failures", nil, [7]int{303, 303, 200, 200, 403, 200, 200}},
		{"GET", "/failures?namespace=acme", nil, [7]int{303, 303, 200, 200, 403, 200, 403}},
		{"GET", "/schedules", nil, [7]int{303, 303, 200, 200, 403, 200, 200}},
		{"GET", "/schedules?namespace=acme", nil, [7]int{303, 303, 200, 200, 403, 200, 403}},
		{"GET", "/login", nil, [7]int{200, 200, 200, 200, 200, 200, 200}},
	}
	for _, rt := range routes {
		for i, who := range whos {
			var body any
			if rt.body != nil {
				body = rt.body()
			}
			before := e.eventCount()
			r := e.as(who, rt.method, rt.path, body)
			want := rt.want[i]
			ok := r.status == want || want == any2xx && r.status/100 == 2
			if !ok {
				t.Errorf("%s %s as %s: %d %s, want %d", rt.method, rt.path, who, r.status, strings.TrimSpace(string(r.body)), want)
				continue
			}
			if r.status >= 400 {
				if after := e.eventCount(); after != before {
					t.Errorf("%s %s as %s: refused with %d but the log grew by %d events", rt.method, rt.path, who, r.status, after-before)
				}
			}
			if r.status == 401 && strings.HasPrefix(rt.path, "/api/") && r.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s as %s: 401 without WWW-Authenticate", rt.method, rt.path, who)
			}
		}
	}
	// What a namespaced token sees of lists is its namespace's only.
	var list jobList
	e.as("prodB", "GET", "/api/v1/jobs", nil).want(t, 200).json(t, &list)
	for _, j := range list.Jobs {
		if j.Namespace != "other" {
			t.Errorf("prodB listed job %s of namespace %s", j.ID, j.Namespace)
		}
	}
	if len(list.Jobs) == 0 {
		t.Error("prodB listed none of its own jobs")
	}
	var nss struct{ Namespaces []namespaceView }
	e.as("readA", "GET", "/api/v1/namespaces", nil).want(t, 200).json(t, &nss)
	for _, n := range nss.Namespaces {
		if n.Name != "acme" {
			t.Errorf("readA sees namespace %s", n.Name)
		}
	}
	var st stats
	e.as("readA", "GET", "/api/v1/stats", nil).want(t, 200).json(t, &st)
	for _, typ := range st.Types {
		if typ == "t.b" {
			t.Errorf("readA's stats name another namespace's type %s", typ)
		}
	}
	// A namespaced token's charts count its namespace's jobs: as many
	// submitted as acme's, fewer than every namespace's.
	submitted := func(who, query string) int {
		var s struct{ Submitted []int }
		e.as(who, "GET", "/api/v1/stats/series"+query, nil).want(t, 200).json(t, &s)
		n := 0
		for _, v := range s.Submitted {
			n += v
		}
		return n
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		mine, acme, all := submitted("readA", ""), submitted("admin", "?namespace=acme"), submitted("admin", "")
		if mine != acme || mine == 0 || all <= mine {
			return fmt.Errorf("readA's series counts %d submitted, acme's %d, every namespace's %d", mine, acme, all)
		}
		return nil
	})
	// A submit with a namespaced token goes to its namespace, and its
	// event names the token as the actor.
	var v projections.JobView
	e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "t.audit"}).want(t, 201).json(t, &v)
	if v.Namespace != "acme" {
		t.Errorf("prodA's job went to namespace %q", v.Namespace)
	}
	e.as("prodA", "POST", "/api/v1/jobs/"+v.ID+"/cancel", map[string]any{"reason": "audit"}).want(t, 200)
	var evs struct {
		Events []struct{ Type, Actor string }
	}
	e.as("admin", "GET", "/api/v1/jobs/"+v.ID+"/events", nil).want(t, 200).json(t, &evs)
	want := "token:prod-a/" + e.ids["prodA"]
	if len(evs.Events) != 2 || evs.Events[0].Actor != want || evs.Events[1].Actor != want {
		t.Errorf("events of a job prodA submitted and cancelled: %+v, want both by %s", evs.Events, want)
	}
}

// TestWorkerClaimsOnlyItsNamespace: a worker registered with a token of
// namespace acme is handed acme's jobs of a free-form type, never
// another namespace's of the same type, which stay queued for theirs.
func TestWorkerClaimsOnlyItsNamespace(t *testing.T) {
	e := newAuthEnv(t)
	var b, a projections.JobView
	e.as("prodB", "POST", "/api/v1/jobs", map[string]any{"type": "t.shared"}).want(t, 201).json(t, &b)
	e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "t.shared"}).want(t, 201).json(t, &a)
	var wk WorkerView
	e.as("workA", "POST", "/api/v1/workers", map[string]any{"name": "a", "types": []string{"t.shared"}, "concurrency": 2}).want(t, 201).json(t, &wk)
	var got ClaimResponse
	e.as("workA", "POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wk.ID, "wait": "5s"}).want(t, 200).json(t, &got)
	if got.Job == nil || got.Job.ID != a.ID {
		t.Fatalf("workA claimed %+v, want acme's job %s", got.Job, a.ID)
	}
	var none ClaimResponse
	e.as("workA", "POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wk.ID, "wait": "1s"}).want(t, 200).json(t, &none)
	if none.Job != nil {
		t.Fatalf("workA claimed %s of namespace %s", none.Job.ID, none.Job.Namespace)
	}
	if s := e.as("admin", "GET", "/api/v1/jobs/"+b.ID, nil).job(t); s.State != domain.StateQueued {
		t.Fatalf("other's job is %s, want queued", s.State)
	}
	var wkB WorkerView
	e.as("workB", "POST", "/api/v1/workers", map[string]any{"name": "b", "types": []string{"t.shared"}}).want(t, 201).json(t, &wkB)
	e.as("workB", "POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wkB.ID, "wait": "5s"}).want(t, 200).json(t, &got)
	if got.Job == nil || got.Job.ID != b.ID {
		t.Fatalf("workB claimed %+v, want other's job %s", got.Job, b.ID)
	}
}

// TestDashboardLogin: a page without a token goes to the login page; a
// valid token sets an HttpOnly, SameSite=Strict cookie that the pages
// accept; a bad one is refused on the page; signing out forgets it.
func TestDashboardLogin(t *testing.T) {
	e := newAuthEnv(t)
	r := e.as("none", "GET", "/queues?x=1", nil).want(t, http.StatusSeeOther)
	if loc := r.header.Get("Location"); loc != "/login?next=%2Fqueues%3Fx%3D1" {
		t.Fatalf("redirect to %q", loc)
	}
	form := "application/x-www-form-urlencoded"
	bad := e.doNoRedirect("POST", "/login", "token=jft_nope&next=%2Fqueues", "Content-Type", form)
	bad.want(t, http.StatusUnauthorized)
	if len(bad.header.Values("Set-Cookie")) != 0 || !strings.Contains(string(bad.body), "not valid") {
		t.Fatalf("bad login: cookies %v body %s", bad.header.Values("Set-Cookie"), bad.body)
	}
	ok := e.doNoRedirect("POST", "/login", "token="+e.tok["readA"]+"&next=%2F%2Fevil.example", "Content-Type", form)
	ok.want(t, http.StatusSeeOther)
	if loc := ok.header.Get("Location"); loc != "/" {
		t.Fatalf("login sent the browser to %q, want / (next was another host)", loc)
	}
	c := ok.header.Get("Set-Cookie")
	for _, part := range []string{tokenCookie + "=" + e.tok["readA"], "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(c, part) {
			t.Fatalf("cookie %q lacks %q", c, part)
		}
	}
	cookie := tokenCookie + "=" + e.tok["readA"]
	page := e.doNoRedirect("GET", "/queues", nil, "Cookie", cookie).want(t, http.StatusOK)
	if !strings.Contains(string(page.body), `id="logout"`) {
		t.Fatal("a signed-in page has no sign-out button")
	}
	// The cookie is a token like any other: the API takes it, its role
	// rules apply (a reader may not submit).
	e.doNoRedirect("POST", "/api/v1/jobs", `{"type":"t.x"}`, "Cookie", cookie, "Content-Type", "application/json").want(t, http.StatusForbidden)
	out := e.doNoRedirect("POST", "/logout", nil, "Cookie", cookie).want(t, http.StatusSeeOther)
	if c := out.header.Get("Set-Cookie"); !strings.Contains(c, tokenCookie+"=;") || !strings.Contains(c, "Max-Age=0") {
		t.Fatalf("logout cookie %q", c)
	}
	// A stale cookie does not keep anyone from the login page.
	e.doNoRedirect("GET", "/login", nil, "Cookie", tokenCookie+"=jft_stale").want(t, http.StatusOK)
}

// TestBadTokensNeverCrash: tokens of every malformed shape, of another
// system, and a right id with a wrong secret are 401.
func TestBadTokensNeverCrash(t *testing.T) {
	e := newAuthEnv(t)
	// A token that expires: taken until its expiry, refused after it.
	_, short, err := e.store.Tokens.Create(e.ctx, commands.TokenSpec{Name: "short", Namespace: "acme", Role: commands.RoleReader, TTL: time.Second}, "test")
	if err != nil {
		t.Fatal(err)
	}
	e.doNoRedirect("GET", "/api/v1/jobs", nil, "Authorization", "Bearer "+short).want(t, http.StatusOK)
	testkit.WaitFor(t, 5*time.Second, func() error {
		if r := e.doNoRedirect("GET", "/api/v1/jobs", nil, "Authorization", "Bearer "+short); r.status != http.StatusUnauthorized {
			return fmt.Errorf("an expired token answered %d", r.status)
		}
		return nil
	})
	good := e.tok["prodA"]
	id, _, err := commands.ParseToken(good)
	if err != nil {
		t.Fatal(err)
	}
	_, other, _, _ := commands.NewToken() // another system's
	for _, tok := range []string{"x", good[:len(good)-1], good + "x", strings.ToUpper(good), "jft_" + id + "_" + strings.Repeat("A", 43),
		other, "Basic " + good, strings.Repeat("a", 5000), "jft_" + id + "_" + good[len(good)-43:len(good)-1] + "~"} {
		r := e.doNoRedirect("GET", "/api/v1/jobs", nil, "Authorization", "Bearer "+tok)
		if r.status != http.StatusUnauthorized {
			t.Errorf("token %.40q: %d %s", tok, r.status, r.body)
		}
	}
}

// TestNamespacedViewsLeakNothing: what a review found leaking from a
// namespaced token's views, each checked: the jobs page with a bad
// filter, the live stream's queues and workers, a type's counts and
// workers, queues another namespace alone uses, a parent of another
// namespace; and a revoked token's open stream ends.
func TestNamespacedViewsLeakNothing(t *testing.T) {
	e := newAuthEnv(t)
	var theirs projections.JobView
	e.as("admin", "PUT", "/api/v1/types/@global/cat/shared", map[string]any{}).want(t, 201)
	e.as("prodB", "POST", "/api/v1/jobs", map[string]any{"type": "t.q", "queue": "qsecret"}).want(t, 201)
	for range 3 {
		e.as("prodB", "POST", "/api/v1/jobs", map[string]any{"type": "@global:cat:shared"}).want(t, 201).json(t, &theirs)
	}
	e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "@global:cat:shared"}).want(t, 201)
	var wk WorkerView
	e.as("workB", "POST", "/api/v1/workers", map[string]any{"name": "secret-worker-of-other", "types": []string{"@global:cat:shared"}}).
		want(t, 201).json(t, &wk)

	page := e.as("readA", "GET", "/?state=bogus", nil)
	if page.status != 400 || strings.Contains(string(page.body), theirs.ID) {
		t.Errorf("jobs page with a bad filter: %d, shows other's job: %v", page.status, strings.Contains(string(page.body), theirs.ID))
	}
	var tv typeView
	e.as("readA", "GET", "/api/v1/types/@global/cat/shared", nil).want(t, 200).json(t, &tv)
	if tv.Queued != 1 || len(tv.LiveWorkers) != 0 {
		t.Errorf("readA sees @global:cat:shared with %d queued and workers %v, want its own 1 and none", tv.Queued, tv.LiveWorkers)
	}
	var qs struct{ Queues []QueueInfo }
	e.as("readA", "GET", "/api/v1/queues", nil).want(t, 200).json(t, &qs)
	for _, q := range qs.Queues {
		if q.Name == "qsecret" {
			t.Error("readA sees queue qsecret, used by other only")
		}
	}
	ch, _ := e.openSSE("/api/v1/stream?with=queues,workers", "Authorization", "Bearer "+e.tok["readA"])
	for _, typ := range []string{"queues", "workers"} {
		ev := next(t, ch, typ)
		if strings.Contains(ev.data, "qsecret") || strings.Contains(ev.data, wk.ID) || strings.Contains(ev.data, "secret-worker") {
			t.Errorf("readA's stream %s event: %s", typ, ev.data)
		}
	}
	r := e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "t.child", "parent": theirs.ID})
	if r.status != 400 || !strings.Contains(string(r.body), `"field":"parent"`) {
		t.Errorf("a child of another namespace's job: %d %s", r.status, r.body)
	}
	// A stream outlives its token by at most the recheck.
	_, tok, err := e.store.Tokens.Create(e.ctx, commands.TokenSpec{Name: "brief", Namespace: "acme", Role: commands.RoleReader}, "test")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := e.store.Tokens.List(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	brief, _ := e.openSSE("/api/v1/stream", "Authorization", "Bearer "+tok)
	next(t, brief, "counts")
	if _, err := e.store.Tokens.Revoke(e.ctx, rec[0].ID, "test"); err != nil {
		t.Fatal(err)
	}
	ended := time.After(2 * time.Second)
	for open := true; open; {
		select {
		case _, open = <-brief:
		case <-ended:
			t.Fatal("a revoked token's stream is still open 2 s after the revoke")
		}
	}
}

func TestSafeNext(t *testing.T) {
	for in, want := range map[string]string{"/queues?x=1": "/queues?x=1", "": "/", "//evil": "/", "/\\evil": "/",
		"/\t/evil.example": "/", "https://evil": "/", "/ok/../x": "/ok/../x", "/\x7f": "/", "evil": "/", "/%0a": "/%0a"} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}
