package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// newCmdAuthEnv is newAuthEnv with the engine's command service checking
// tokens too (serve --auth), and the revoked token refused by both.
func newCmdAuthEnv(t *testing.T) *authEnv {
	t.Helper()
	srv := testkit.Server(t)
	e := &env{t: t, srv: srv, ctx: testkit.Ctx(t)}
	e.store = testkit.Store(t, testkit.Conn(t, srv), "client")
	e.eng = engine.NewEngine(testkit.Store(t, testkit.Conn(t, srv), "engine"),
		engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Auth: true, Log: testkit.Logger(t)})
	g, err := New(Config{Client: testkit.Client(t, testkit.Conn(t, srv), "gateway"), Auth: true, Lease: 3 * time.Second, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	e.g = g
	e.eng.Add(g)
	e.ts = httptest.NewServer(g)
	t.Cleanup(e.ts.Close)
	if err := e.eng.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.eng.Stop(context.Background()) })
	<-g.index.Synced()
	a := &authEnv{env: e, tok: map[string]string{}, ids: map[string]string{}}
	for who, spec := range map[string]commands.TokenSpec{
		"admin":   {Name: "root", Namespace: "*", Role: commands.RoleAdmin},
		"prodA":   {Name: "prod-a", Namespace: "acme", Role: commands.RoleProducer},
		"workA":   {Name: "work-a", Namespace: "acme", Role: commands.RoleWorker},
		"readA":   {Name: "read-a", Namespace: "acme", Role: commands.RoleReader},
		"prodB":   {Name: "prod-b", Namespace: "other", Role: commands.RoleProducer},
		"workB":   {Name: "work-b", Namespace: "other", Role: commands.RoleWorker},
		"revoked": {Name: "gone", Namespace: "acme", Role: commands.RoleProducer},
		"spare":   {Name: "spare", Namespace: "acme", Role: commands.RoleReader},
	} {
		rec, tok, err := e.store.Tokens.Create(e.ctx, spec, "test")
		if err != nil {
			t.Fatal(err)
		}
		a.tok[who], a.ids[who] = tok, rec.ID
	}
	if _, err := e.store.Tokens.Revoke(e.ctx, a.ids["revoked"], "test"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		if st, _ := a.cmd("revoked", "queues", struct{}{}); st != 401 {
			return fmt.Errorf("the revoked token answered %d over NATS", st)
		}
		if r := a.as("revoked", "GET", "/api/v1/queues", nil); r.status != 401 {
			return fmt.Errorf("the revoked token answered %d over HTTP", r.status)
		}
		return nil
	})
	return a
}

// cmd sends a command with who's token ("none": without) and returns the
// status it answers (200 for a success, a problem's status otherwise) and
// its reply.
func (e *authEnv) cmd(who, verb string, body any) (int, map[string]any) {
	e.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	m := nats.NewMsg(streams.CommandPrefix + "." + verb)
	m.Data = b
	m.Header.Set("Content-Type", "application/json")
	if tok := e.tok[who]; tok != "" {
		m.Header.Set(engine.AuthHeader, "Bearer "+tok)
	}
	res, err := testkit.Conn(e.t, e.srv).RequestMsg(m, 20*time.Second)
	if err != nil {
		e.t.Fatalf("%s as %s: %v", verb, who, err)
	}
	var out map[string]any
	if err := json.Unmarshal(res.Data, &out); err != nil {
		e.t.Fatalf("%s as %s: %s", verb, who, res.Data)
	}
	if p, ok := out["error"].(map[string]any); ok {
		return int(p["status"].(float64)), out
	}
	return 200, out
}

// TestEveryVerbEveryRole sends every verb of the command protocol beyond
// the first seven (admin.go, files.go of cmdservice) with no token, a
// revoked one, and one of each role in namespace acme (and a producer of
// namespace other), on acme's and other's resources, and checks the
// status; where the verb has an HTTP route, the route is sent too and
// answers the same (any success as 200). A refused command writes nothing
// to the event log.
func TestEveryVerbEveryRole(t *testing.T) {
	e := newCmdAuthEnv(t)
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
	reg := func(who string) string {
		var v WorkerView
		e.as(who, "POST", "/api/v1/workers", map[string]any{"name": who, "types": []string{"t.none"}}).want(t, 201).json(t, &v)
		return v.ID
	}
	wkA, wkB := reg("workA"), reg("workB")
	e.as("admin", "PUT", "/api/v1/types/acme/cat/seen", map[string]any{}).want(t, 201)
	e.as("admin", "PUT", "/api/v1/types/other/cat/hidden", map[string]any{}).want(t, 201)
	A, T, B := jobA.Job.ID, done.Job.ID, jobB.Job.ID

	// stage stages a file of one chunk for a file.submit, as the admin.
	stage := func() string {
		st, out := e.cmd("admin", "file.put", map[string]any{"name": "in.txt", "offset": 0, "data": []byte("hi")})
		if st != 200 {
			t.Fatalf("file.put: %v", out)
		}
		return out["upload"].(string)
	}
	hiDigest := digestOf([]byte("hi"))
	fileSubmit := func(job map[string]any) func() any {
		return func() any {
			return map[string]any{"upload": stage(), "job": job,
				"files": []map[string]any{{"name": "in.txt", "size": 2, "digest": hiDigest}}}
		}
	}
	multipart := func(job string) *route2 {
		return &route2{"POST", "/api/v1/jobs", func() (any, []string) {
			b, ct := multipartBody(t, job, upFile{"in.txt", "hi"})
			return b, []string{"Content-Type", ct}
		}}
	}
	plain := func(method, path string, body any) *route2 {
		return &route2{method, path, func() (any, []string) { return body, nil }}
	}
	zip := zipBytes(t, "a.txt")
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for _, v := range []struct {
		verb string
		body func() any
		http *route2
		// status by who, in the order of whos: none, revoked, admin,
		// prodA, workA, readA, prodB.
		want [7]int
	}{
		{"children", fixed(map[string]any{"id": A}), plain("GET", "/api/v1/jobs/"+A+"/children", nil), [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"children", fixed(map[string]any{"id": B}), plain("GET", "/api/v1/jobs/"+B+"/children", nil), [7]int{401, 401, 200, 404, 403, 404, 200}},
		{"retry", fixed(map[string]any{"id": T}), plain("POST", "/api/v1/jobs/"+T+"/retry", map[string]any{}), [7]int{401, 401, 200, 200, 403, 403, 404}},
		{"reprioritize", fixed(map[string]any{"id": A, "priority": 7}), plain("POST", "/api/v1/jobs/"+A+"/priority", map[string]any{"priority": 7}), [7]int{401, 401, 200, 200, 403, 403, 404}},
		{"reprioritize", fixed(map[string]any{"id": B, "priority": 7}), plain("POST", "/api/v1/jobs/"+B+"/priority", map[string]any{"priority": 7}), [7]int{401, 401, 200, 404, 403, 403, 200}},
		{"purge_job", fixed(map[string]any{"id": A}), plain("POST", "/api/v1/jobs/"+A+"/purge", map[string]any{}), [7]int{401, 401, 409, 403, 403, 403, 403}},
		{"purge_job", fixed(map[string]any{"id": B}), plain("POST", "/api/v1/jobs/"+B+"/purge", map[string]any{}), [7]int{401, 401, 409, 403, 403, 403, 403}},
		{"queues", fixed(map[string]any{}), plain("GET", "/api/v1/queues", nil), [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"queue.pause", fixed(map[string]any{"queue": "default"}), plain("POST", "/api/v1/queues/default/pause", nil), [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"queue.resume", fixed(map[string]any{"queue": "default"}), plain("POST", "/api/v1/queues/default/resume", nil), [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"queue.limits", fixed(map[string]any{"queue": "qlim", "max_running": 5}), plain("PUT", "/api/v1/queues/qlim", map[string]any{"max_running": 5}), [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"workers", fixed(map[string]any{}), plain("GET", "/api/v1/workers", nil), [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"tail", fixed(map[string]any{"since": "2000-01-01T00:00:00Z", "limit": 1}), nil, [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"tail", fixed(map[string]any{"namespace": "other", "since": "2000-01-01T00:00:00Z", "limit": 1}), nil, [7]int{401, 401, 200, 403, 403, 403, 200}},
		{"tail", fixed(map[string]any{"queue": "a b"}), nil, [7]int{401, 401, 400, 400, 403, 400, 400}},
		{"verify", fixed(map[string]any{"settle": "0s"}), nil, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"replay", fixed(map[string]any{}), nil, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"replay", fixed(map[string]any{"namespace": "acme"}), nil, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"list_at", fixed(map[string]any{"at": now, "namespace": "acme"}), plain("GET", "/api/v1/jobs?namespace=acme&at="+now, nil), [7]int{401, 401, 200, 200, 403, 200, 403}},
		{"list_at", fixed(map[string]any{"at": now}), plain("GET", "/api/v1/jobs?at="+now, nil), [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"audit_verify", fixed(map[string]any{}), plain("GET", "/api/v1/audit/verify", nil), [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"audit_verify", fixed(map[string]any{"namespace": "acme"}), plain("GET", "/api/v1/audit/verify?namespace=acme", nil), [7]int{401, 401, 200, 200, 403, 200, 403}},
		{"audit_verify", fixed(map[string]any{"job": A}), plain("GET", "/api/v1/audit/verify?job="+A, nil), [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"audit_verify", fixed(map[string]any{"job": B}), plain("GET", "/api/v1/audit/verify?job="+B, nil), [7]int{401, 401, 200, 404, 403, 404, 200}},
		{"audit_verify", fixed(map[string]any{"since": "monday"}), plain("GET", "/api/v1/audit/verify?since=monday", nil), [7]int{401, 401, 400, 400, 403, 400, 400}},
		{"audit_pubkey", fixed(map[string]any{}), plain("GET", "/api/v1/audit/pubkey", nil), [7]int{401, 401, 404, 404, 403, 404, 404}},
		// An export that goes through streams chunks (TestClientAuditExport).
		{"audit_export", fixed(map[string]any{"since": "monday"}), plain("GET", "/api/v1/audit/export?since=monday", nil), [7]int{401, 401, 400, 400, 403, 400, 400}},
		{"audit_export", fixed(map[string]any{"namespace": "a b"}), plain("GET", "/api/v1/audit/export?namespace=a+b", nil), [7]int{401, 401, 400, 403, 403, 403, 403}},
		{"purge", fixed(map[string]any{"older_than": "1000h"}), nil, [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"type.register", fixed(map[string]any{"type": "acme:cat:mine"}), plain("PUT", "/api/v1/types/acme/cat/mine", map[string]any{}), [7]int{401, 401, 200, 403, 200, 403, 403}},
		{"type.register", fixed(map[string]any{"type": "@global:cat:new"}), plain("PUT", "/api/v1/types/@global/cat/new", map[string]any{}), [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"type.register", fixed(map[string]any{"type": "other:cat:theirs"}), plain("PUT", "/api/v1/types/other/cat/theirs", map[string]any{}), [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"type.get", fixed(map[string]any{"type": "acme:cat:seen"}), plain("GET", "/api/v1/types/acme/cat/seen", nil), [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"type.get", fixed(map[string]any{"type": "other:cat:hidden"}), plain("GET", "/api/v1/types/other/cat/hidden", nil), [7]int{401, 401, 200, 404, 403, 404, 200}},
		{"types", fixed(map[string]any{}), plain("GET", "/api/v1/types", nil), [7]int{401, 401, 200, 200, 403, 200, 200}},
		{"types", fixed(map[string]any{"namespace": "other"}), plain("GET", "/api/v1/types?namespace=other", nil), [7]int{401, 401, 200, 403, 403, 403, 200}},
		{"namespace.set", fixed(map[string]any{"namespace": "acme"}), plain("PUT", "/api/v1/namespaces/acme", map[string]any{"strict_types": false}), [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"token.create", fixed(map[string]any{"name": "n", "namespace": "acme", "role": "reader"}), plain("POST", "/api/v1/tokens", map[string]any{"name": "n", "namespace": "acme", "role": "reader"}), [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"tokens", fixed(map[string]any{}), plain("GET", "/api/v1/tokens", nil), [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"token.revoke", fixed(map[string]any{"id": e.ids["spare"]}), plain("DELETE", "/api/v1/tokens/"+e.ids["spare"], nil), [7]int{401, 401, 200, 403, 403, 403, 403}},
		{"file.put", fixed(map[string]any{"name": "a.txt", "offset": 0, "data": []byte("x")}), nil, [7]int{401, 401, 200, 200, 403, 403, 200}},
		{"file.submit", fileSubmit(map[string]any{"type": "t.f"}), multipart(`{"type":"t.f"}`), [7]int{401, 401, 200, 200, 403, 403, 200}},
		{"file.submit", fileSubmit(map[string]any{"type": "t.f", "namespace": "acme"}), multipart(`{"type":"t.f","namespace":"acme"}`), [7]int{401, 401, 200, 200, 403, 403, 403}},
		{"file.input", fixed(map[string]any{"id": A, "name": "in.txt", "worker_id": wkA}), plain("GET", "/api/v1/jobs/"+A+"/inputs/in.txt?worker_id="+wkA, nil), [7]int{401, 401, 409, 403, 409, 403, 403}},
		{"file.input", fixed(map[string]any{"id": A, "name": "in.txt", "worker_id": wkB}), plain("GET", "/api/v1/jobs/"+A+"/inputs/in.txt?worker_id="+wkB, nil), [7]int{401, 401, 409, 403, 404, 403, 403}},
		{"file.input", fixed(map[string]any{"id": B, "name": "in.txt", "worker_id": wkB}), plain("GET", "/api/v1/jobs/"+B+"/inputs/in.txt?worker_id="+wkB, nil), [7]int{401, 401, 409, 403, 404, 403, 403}},
		{"file.input", fixed(map[string]any{"id": A, "name": "in.txt"}), nil, [7]int{401, 401, 409, 403, 409, 403, 403}},
		{"file.result", fixed(map[string]any{"id": A, "worker_id": wkA, "offset": 0, "data": zip, "last": true, "digest": digestOf(zip)}),
			plain("PUT", "/api/v1/jobs/"+A+"/result?worker_id="+wkA, zip), [7]int{401, 401, 409, 403, 409, 403, 403}},
		{"file.result", fixed(map[string]any{"id": B, "worker_id": wkB, "offset": 0, "data": zip}),
			plain("PUT", "/api/v1/jobs/"+B+"/result?worker_id="+wkB, zip), [7]int{401, 401, 409, 403, 404, 403, 403}},
		{"file.download", fixed(map[string]any{"id": A}), plain("GET", "/api/v1/jobs/"+A+"/download", nil), [7]int{401, 401, 200, 200, 403, 200, 404}},
		{"file.download", fixed(map[string]any{"id": T}), plain("GET", "/api/v1/jobs/"+T+"/download", nil), [7]int{401, 401, 404, 404, 403, 404, 404}},
		{"file.download", fixed(map[string]any{"id": B}), plain("GET", "/api/v1/jobs/"+B+"/download", nil), [7]int{401, 401, 200, 404, 403, 404, 200}},
	} {
		name := v.verb + " " + strings.TrimSpace(fmt.Sprint(v.body()))
		if v.verb == "file.submit" {
			name = v.verb
		}
		for i, who := range whos {
			want := v.want[i]
			before := e.eventCount()
			st, out := e.cmd(who, v.verb, v.body())
			if st != want {
				t.Errorf("%s as %s: %d %v, want %d", name, who, st, out["error"], want)
			}
			if st >= 400 {
				if after := e.eventCount(); after != before {
					t.Errorf("%s as %s: refused with %d but the log grew by %d events", name, who, st, after-before)
				}
			}
			if v.http == nil {
				continue
			}
			body, headers := v.http.body()
			r := e.as(who, v.http.method, v.http.path, body, headers...)
			if got := r.status; got != want && !(want == 200 && got/100 == 2) {
				t.Errorf("%s %s as %s: %d %s, want %d (as the command)", v.http.method, v.http.path, who, r.status, strings.TrimSpace(string(r.body)), want)
			}
		}
	}
	// What a namespaced token is shown of lists is its namespace's, over
	// NATS as over HTTP.
	for _, who := range []string{"readA", "prodB"} {
		ns := map[string]string{"readA": "acme", "prodB": "other"}[who]
		_, ws := e.cmd(who, "workers", map[string]any{})
		var hw struct{ Workers []map[string]any }
		e.as(who, "GET", "/api/v1/workers", nil).want(t, 200).json(t, &hw)
		if got := names(ws["workers"], "id"); got != map[string]string{"readA": wkA, "prodB": wkB}[who] || got != names(hw.Workers, "id") {
			t.Errorf("workers as %s: %s (HTTP %s)", who, got, names(hw.Workers, "id"))
		}
		_, ts := e.cmd(who, "types", map[string]any{})
		var ht struct{ Types []map[string]any }
		e.as(who, "GET", "/api/v1/types", nil).want(t, 200).json(t, &ht)
		if got := names(ts["types"], "full_name"); !strings.Contains(got, ns+":cat:") || strings.Contains(got, map[string]string{"acme": "other:", "other": "acme:"}[ns]) ||
			got != names(ht.Types, "full_name") {
			t.Errorf("types as %s: %s (HTTP %s)", who, got, names(ht.Types, "full_name"))
		}
		testkit.WaitFor(t, 5*time.Second, func() error { // the gateway's index follows the jobs
			_, qs := e.cmd(who, "queues", map[string]any{})
			var hq struct{ Queues []map[string]any }
			e.as(who, "GET", "/api/v1/queues", nil).want(t, 200).json(t, &hq)
			nq, _ := json.Marshal(qs["queues"])
			hqs, _ := json.Marshal(hq.Queues)
			if string(nq) != string(hqs) {
				return fmt.Errorf("queues as %s: NATS %s, HTTP %s", who, nq, hqs)
			}
			if strings.Contains(string(nq), "qlim") || strings.Contains(string(nq), "slots") {
				return fmt.Errorf("queues as %s: %s", who, nq)
			}
			return nil
		})
	}
}

// names are the values of key of a list of objects, joined.
func names[T any](list T, key string) string {
	b, _ := json.Marshal(list)
	var objs []map[string]any
	_ = json.Unmarshal(b, &objs)
	var out []string
	for _, o := range objs {
		out = append(out, fmt.Sprint(o[key]))
	}
	return strings.Join(out, ",")
}

// route2 is an HTTP request of TestEveryVerbEveryRole.
type route2 struct {
	method, path string
	body         func() (any, []string) // and headers
}

func fixed(v any) func() any { return func() any { return v } }

// digestOf is the digest of b as the object store writes it.
func digestOf(b []byte) string {
	h := sha256.New()
	h.Write(b)
	return jetstream.GetObjectDigestValue(h)
}
