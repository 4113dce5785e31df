package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// auditEnv is a gateway with access control on, next to an engine that
// signs a checkpoint of the log every 50 ms when anything was appended;
// pub is its public key.
type auditEnv struct {
	*authEnv
	pub string
	// A1 (queued) and A2 (cancelled) are jobs of namespace acme, B1 one of
	// other.
	A1, A2, B1 string
}

func newAuditEnv(t *testing.T) *auditEnv {
	t.Helper()
	kp, _, err := engine.LoadAuditKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pub := engine.AuditPublicKey(kp)
	srv := testkit.Server(t)
	e := &env{t: t, srv: srv, ctx: testkit.Ctx(t)}
	e.store = testkit.Store(t, testkit.Conn(t, srv), "client")
	cfg := engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Auth: true, Log: testkit.Logger(t)}
	cfg.Checkpoints.Key, cfg.Checkpoints.Interval = kp, 50*time.Millisecond
	e.eng = engine.NewEngine(testkit.Store(t, testkit.Conn(t, srv), "engine"), cfg)
	g, err := New(Config{Client: testkit.Client(t, testkit.Conn(t, srv), "gateway"), Auth: true, Lease: 3 * time.Second,
		Log: testkit.Logger(t), AuditPublicKey: pub})
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
	t.Cleanup(func() { e.eng.Stop(t.Context()) })
	<-g.index.Synced()
	a := &auditEnv{authEnv: &authEnv{env: e, tok: map[string]string{}, ids: map[string]string{}}, pub: pub}
	for who, spec := range map[string]commands.TokenSpec{
		"admin":   {Name: "root", Namespace: "*", Role: commands.RoleAdmin},
		"prodA":   {Name: "prod-a", Namespace: "acme", Role: commands.RoleProducer},
		"workA":   {Name: "work-a", Namespace: "acme", Role: commands.RoleWorker},
		"readA":   {Name: "read-a", Namespace: "acme", Role: commands.RoleReader},
		"prodB":   {Name: "prod-b", Namespace: "other", Role: commands.RoleProducer},
		"readAll": {Name: "read-all", Namespace: "*", Role: commands.RoleReader},
	} {
		rec, tok, err := e.store.Tokens.Create(e.ctx, spec, "test")
		if err != nil {
			t.Fatal(err)
		}
		a.tok[who], a.ids[who] = tok, rec.ID
	}
	ctx := engine.WithPrincipal(e.ctx, &engine.Principal{TokenID: "setup", Name: "setup", Namespace: "*", Role: commands.RoleAdmin})
	submit := func(ns string) string {
		res, err := e.store.Submit(ctx, &commands.SubmitRequest{Type: "t.audit", Namespace: ns, Payload: commands.RawJSON(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return res.Job.ID
	}
	a.A1, a.A2, a.B1 = submit("acme"), submit("acme"), submit("other")
	if _, err := e.store.Cancel(ctx, a.A2, "audit"); err != nil {
		t.Fatal(err)
	}
	// Every token works at the gateway (its watch of the tokens), and a
	// checkpoint covers everything appended.
	testkit.WaitFor(t, 10*time.Second, func() error {
		for who := range a.tok {
			if r := a.as(who, "GET", "/healthz", nil); r.status != 200 {
				return fmt.Errorf("healthz as %s: %d", who, r.status)
			}
			if r := a.as(who, "GET", "/api/v1/audit/pubkey", nil); r.status != 200 && r.status != 403 {
				return fmt.Errorf("%s: %d %s", who, r.status, r.body)
			}
		}
		rep := a.verify("admin", "?pubkey="+pub)
		if rep.Checkpoints == 0 || rep.Uncovered != 0 || rep.Events != int(e.eventCount()) {
			return fmt.Errorf("not covered yet: %+v", rep)
		}
		return nil
	})
	return a
}

// verify is GET /api/v1/audit/verify with query as who: the report of a
// 200.
func (e *auditEnv) verify(who, query string) *engine.AuditReport {
	e.t.Helper()
	var rep engine.AuditReport
	e.as(who, "GET", "/api/v1/audit/verify"+query, nil).want(e.t, 200).json(e.t, &rep)
	if rep.Findings == nil {
		e.t.Fatalf("verify%s as %s: findings null, want a list", query, who)
	}
	return &rep
}

// msgsOf are the stored messages of job id, in order.
func (e *auditEnv) msgsOf(id string) []*jetstream.RawStreamMsg {
	e.t.Helper()
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); ; {
		m, err := e.store.Events.GetMsg(e.ctx, seq, jetstream.WithGetMsgSubject(streams.EventFilter(id)))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out
		}
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, m)
		seq = m.Sequence + 1
	}
}

// kinds are a report's findings as "kind seq job", in order.
func kinds(rep *engine.AuditReport) []string {
	var out []string
	for _, f := range rep.Findings {
		out = append(out, fmt.Sprintf("%s %d %s", f.Kind, f.Seq, f.Job))
	}
	slices.Sort(out)
	return out
}

// TestAuditRoutes: GET /api/v1/audit/pubkey, /audit/verify and
// /audit/export with an admin token, namespaced tokens and a reader of
// every namespace; a namespaced token verifies and exports its own
// namespace, is refused another's (403 whether it exists or not, 404 for
// its job as for an unknown one: the answers are the same); an admin
// verifying a log tampered with through JetStream's API gets each
// finding, and each namespaced token those of its namespace only.
func TestAuditRoutes(t *testing.T) {
	e := newAuditEnv(t)
	// The key: the engine's, exactly.
	r := e.as("readA", "GET", "/api/v1/audit/pubkey", nil).want(t, 200)
	if got, want := strings.TrimSpace(string(r.body)), `{"pubkey":"`+e.pub+`","source":"engine"}`; got != want {
		t.Fatalf("pubkey: %s, want %s", got, want)
	}
	e.as("workA", "GET", "/api/v1/audit/pubkey", nil).problem(t, 403, "forbidden")

	// The whole log, by the admin: every event, nothing found.
	whole := e.verify("admin", "?pubkey="+e.pub)
	if !whole.OK() || !whole.KeyPinned || whole.Key != e.pub || whole.Events != int(e.eventCount()) || whole.Uncovered != 0 {
		t.Fatalf("whole log: %+v", whole)
	}
	// acme's part, by its reader: its two jobs' events and the checkpoints.
	a1, a2, b1 := e.msgsOf(e.A1), e.msgsOf(e.A2), e.msgsOf(e.B1)
	if len(a1) != 1 || len(a2) != 2 || len(b1) != 1 {
		t.Fatalf("events: A1 %d, A2 %d, B1 %d", len(a1), len(a2), len(b1))
	}
	for _, who := range []string{"readA", "prodA"} {
		for _, q := range []string{"", "?namespace=acme"} {
			rep := e.verify(who, q)
			if !rep.OK() || rep.Events != 3+rep.Checkpoints || rep.Subjects != 3 || rep.Checkpoints != whole.Checkpoints ||
				rep.KeyPinned || rep.Key != e.pub {
				t.Errorf("%s verifies%s: %+v", who, q, rep)
			}
		}
	}
	if rep := e.verify("readA", "?job="+e.A2); !rep.OK() || rep.Events != 2+rep.Checkpoints || rep.Subjects != 2 {
		t.Errorf("readA verifies A2: %+v", rep)
	}
	if rep := e.verify("prodB", ""); !rep.OK() || rep.Events != 1+rep.Checkpoints || rep.Subjects != 2 {
		t.Errorf("prodB verifies: %+v", rep)
	}
	// Another namespace, or its job: refused as one that does not exist.
	same := func(what string, a, b resp, name, other string) {
		t.Helper()
		if a.status != b.status || strings.ReplaceAll(string(a.body), name, other) != string(b.body) {
			t.Errorf("%s: %d %s\nand %d %s", what, a.status, a.body, b.status, b.body)
		}
	}
	nsOther := e.as("readA", "GET", "/api/v1/audit/verify?namespace=other", nil)
	nsOther.problem(t, 403, "forbidden")
	same("another namespace and none", nsOther, e.as("readA", "GET", "/api/v1/audit/verify?namespace=nowhere", nil), "other", "nowhere")
	unknown := domain.NewID()
	jobOther := e.as("readA", "GET", "/api/v1/audit/verify?job="+e.B1, nil)
	jobOther.problem(t, 404, "not-found")
	same("another namespace's job and none", jobOther, e.as("readA", "GET", "/api/v1/audit/verify?job="+unknown, nil), e.B1, unknown)
	same("a job of another namespace, named with it", e.as("readA", "GET", "/api/v1/audit/verify?namespace=other&job="+e.B1, nil),
		e.as("readA", "GET", "/api/v1/audit/verify?namespace=nowhere&job="+e.B1, nil), "other", "nowhere")
	// A reader of every namespace verifies and exports nothing.
	e.as("readAll", "GET", "/api/v1/audit/verify", nil).problem(t, 403, "forbidden")
	e.as("readAll", "GET", "/api/v1/audit/verify?namespace=acme", nil).problem(t, 403, "forbidden")
	e.as("readAll", "GET", "/api/v1/audit/export?namespace=acme", nil).problem(t, 403, "forbidden")
	e.as("readA", "GET", "/api/v1/audit/export?namespace=other", nil).problem(t, 403, "forbidden")

	// The exports: other's by its producer holds nothing of acme, and
	// verifies offline; the admin's whole one too.
	export := func(who, query string) (string, *engine.AuditReport) {
		t.Helper()
		r := e.as(who, "GET", "/api/v1/audit/export"+query, nil).want(t, 200)
		if ct := r.header.Get("Content-Type"); ct != "application/x-ndjson" {
			t.Fatalf("export as %s: content type %q", who, ct)
		}
		rep, err := engine.VerifyAuditExport(bytes.NewReader(r.body), e.pub)
		if err != nil {
			t.Fatalf("export as %s: %v", who, err)
		}
		return string(r.body), rep
	}
	body, rep := export("prodB", "")
	if !rep.OK() || rep.Events != 1+rep.Checkpoints {
		t.Errorf("other's export: %+v", rep)
	}
	for _, leak := range []string{"acme", e.A1, e.A2} {
		if strings.Contains(body, leak) {
			t.Errorf("other's export holds %q", leak)
		}
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, 1<<20)
	var lines []map[string]any
	for sc.Scan() {
		var l map[string]any
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("a line of the export: %v: %s", err, sc.Bytes())
		}
		lines = append(lines, l)
	}
	if len(lines) == 0 || lines[0]["kind"] != "header" || lines[0]["namespace"] != "other" || lines[1]["kind"] != "event" ||
		lines[1]["job"] != e.B1 || lines[1]["subject"] != b1[0].Subject {
		t.Errorf("other's export begins %v", lines[:min(len(lines), 2)])
	}
	if _, rep := export("admin", ""); !rep.OK() || rep.Events != whole.Events {
		t.Errorf("the whole export: %+v, want %d events", rep, whole.Events)
	}

	// Tampering. An edited copy of A2's last event, with its hash,
	// appended; an event written by hand on B1's subject.
	ctx := e.ctx
	ev, err := streams.DecodeEvent(a2[1].Data)
	if err != nil {
		t.Fatal(err)
	}
	ev.Actor = "someone else"
	data, err := streams.EncodeEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := e.store.JS.PublishMsg(ctx, &nats.Msg{Subject: a2[1].Subject, Data: data,
		Header: nats.Header{streams.HashHeader: a2[1].Header.Values(streams.HashHeader)}})
	if err != nil {
		t.Fatal(err)
	}
	edited := ack.Sequence
	forged, err := streams.EncodeEvent(&domain.Event{Type: domain.EvCancelled, JobID: e.B1, Time: time.Now(), Actor: "engine"})
	if err != nil {
		t.Fatal(err)
	}
	if ack, err = e.store.JS.PublishMsg(ctx, &nats.Msg{Subject: b1[0].Subject, Data: forged}); err != nil {
		t.Fatal(err)
	}
	inA := []string{fmt.Sprintf("edited %d %s", edited, e.A2), fmt.Sprintf("inserted %d %s", edited, e.A2)}
	forgedSeq := ack.Sequence
	inB := []string{fmt.Sprintf("forged %d %s", forgedSeq, e.B1)}
	for _, c := range []struct {
		who, query string
		want       []string
	}{
		{"admin", "?pubkey=" + e.pub, append(slices.Clone(inA), inB...)},
		{"admin", "?namespace=acme", inA},
		{"readA", "", inA},
		{"readA", "?job=" + e.A2, inA},
		{"readA", "?job=" + e.A1, nil},
		{"prodB", "", inB},
	} {
		rep := e.verify(c.who, c.query)
		slices.Sort(c.want)
		if got := kinds(rep); !slices.Equal(got, c.want) {
			t.Errorf("%s verifies%s: %v, want %v", c.who, c.query, got, c.want)
		}
	}
	// Once a checkpoint covers them, the export names them too.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if rep := e.verify("admin", "?pubkey="+e.pub); rep.Uncovered != 0 {
			return fmt.Errorf("%d events not covered", rep.Uncovered)
		}
		return nil
	})
	// (An export carries the hash of an event written without one as its
	// bytes hash: offline, it is a first event after others, reordered.)
	_, rep = export("admin", "")
	want := append(slices.Clone(inA), fmt.Sprintf("reordered %d %s", forgedSeq, e.B1))
	if got := kinds(rep); !slices.Equal(got, want) {
		t.Errorf("the tampered export: %v, want %v", got, want)
	}
}

// TestAuditBadInput: a bad parameter of the audit routes and of GET
// /jobs?at=T is 400 invalid-input naming it, the log is not written, and
// the gateway answers on.
func TestAuditBadInput(t *testing.T) {
	e := newAuditEnv(t)
	before := e.eventCount()
	for _, c := range []struct{ who, path, field string }{
		{"admin", "/api/v1/audit/verify?since=monday", "since"},
		{"admin", "/api/v1/audit/verify?until=2026-13-01T00:00:00Z", "until"},
		{"admin", "/api/v1/audit/verify?since=2021-01-01T00:00:00Z&until=2020-01-01T00:00:00Z", "until"},
		{"admin", "/api/v1/audit/verify?queue=a+b", "queue"},
		{"admin", "/api/v1/audit/verify?type=a*", "type"},
		{"admin", "/api/v1/audit/verify?job=a.b", "job"},
		{"admin", "/api/v1/audit/verify?namespace=a:b", "namespace"},
		{"admin", "/api/v1/audit/verify?pubkey=nope", "pubkey"},
		{"admin", "/api/v1/audit/verify?pubkey=" + e.pub + ",x", "pubkey"},
		{"admin", "/api/v1/audit/verify?settle=1s", "settle"},
		{"admin", "/api/v1/audit/verify?job=a&job=b", "job"},
		{"admin", "/api/v1/audit/verify?%zz=1", "%zz"},
		{"readA", "/api/v1/audit/verify?since=" + url.QueryEscape("2026-11-26 14:00"), "since"},
		{"readA", "/api/v1/audit/verify?pubkey=" + e.pub[1:], "pubkey"},
		{"admin", "/api/v1/audit/export?since=x", "since"},
		{"admin", "/api/v1/audit/export?until=1", "until"},
		{"admin", "/api/v1/audit/export?since=2021-01-01T00:00:00Z&until=2020-01-01T00:00:00Z", "until"},
		{"admin", "/api/v1/audit/export?namespace=a:b", "namespace"},
		{"admin", "/api/v1/audit/export?job=" + e.A1, "job"},
		{"prodB", "/api/v1/audit/export?since=x", "since"},
		{"admin", "/api/v1/jobs?at=yesterday", "at"},
		{"admin", "/api/v1/jobs?at=2026-11-26T14:00:00Z&at=2026-11-26T15:00:00Z", "at"},
		{"admin", "/api/v1/jobs?at=2026-11-26T14:00:00Z&cursor=x", "cursor"},
		{"admin", "/api/v1/jobs?at=2026-11-26T14:00:00Z&tag=x", "tag"},
		{"admin", "/api/v1/jobs?at=2026-11-26T14:00:00Z&limit=0", "limit"},
		{"admin", "/api/v1/jobs?at=2026-11-26T14:00:00Z&limit=1001", "limit"},
		{"admin", "/api/v1/jobs?at=2026-11-26T14:00:00Z&state=done", "state"},
		{"admin", "/api/v1/jobs?at=2026-11-26T14:00:00Z&queue=a+b", "queue"},
		{"readA", "/api/v1/jobs?at=", "at"},
	} {
		r := e.as(c.who, "GET", c.path, nil)
		if r.status != 400 {
			t.Errorf("%s as %s: %d %s, want 400", c.path, c.who, r.status, r.body)
			continue
		}
		if p := r.problem(t, 400, "invalid-input"); p.Field != c.field {
			t.Errorf("%s as %s: field %q, want %q (%s)", c.path, c.who, p.Field, c.field, p.Detail)
		}
	}
	if after := e.eventCount(); after != before {
		t.Errorf("bad input wrote %d events", after-before)
	}
	e.as("admin", "GET", "/healthz", nil).want(t, 200)
	if rep := e.verify("admin", "?pubkey="+e.pub); !rep.OK() {
		t.Errorf("after bad input: %+v", rep)
	}
}

// TestJobsAtInstant: GET /jobs?at=T lists the jobs as the log had them at
// T: none before the first, then acme's jobs in their state, the most
// recently moved first, a namespaced token's its namespace's.
func TestJobsAtInstant(t *testing.T) {
	e := newAuditEnv(t)
	type list struct {
		Jobs []struct{ ID, State, Namespace string }
		More *bool
	}
	get := func(who, query string) list {
		t.Helper()
		var l list
		e.as(who, "GET", "/api/v1/jobs?"+query, nil).want(t, 200).json(t, &l)
		if l.More == nil || l.Jobs == nil {
			t.Fatalf("jobs?%s as %s: %+v: want jobs and more", query, who, l)
		}
		return l
	}
	show := func(l list) string {
		var out []string
		for _, j := range l.Jobs {
			out = append(out, j.ID+" "+j.State+" "+j.Namespace)
		}
		return fmt.Sprintf("%v more %v", out, *l.More)
	}
	at := func(t time.Time) string { return "at=" + url.QueryEscape(t.UTC().Format(time.RFC3339Nano)) }
	if got := show(get("admin", at(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)))); got != "[] more false" {
		t.Errorf("before the log: %s", got)
	}
	now := time.Now()
	want := fmt.Sprintf("[%s cancelled acme %s queued acme] more false", e.A2, e.A1)
	for _, c := range []struct{ who, query string }{{"admin", "&namespace=acme"}, {"readA", ""}, {"prodA", "&namespace=acme"}} {
		if got := show(get(c.who, at(now)+c.query)); got != want {
			t.Errorf("jobs at now as %s%s: %s, want %s", c.who, c.query, got, want)
		}
	}
	if got, want := show(get("readA", at(now)+"&limit=1")), fmt.Sprintf("[%s cancelled acme] more true", e.A2); got != want {
		t.Errorf("one job: %s, want %s", got, want)
	}
	if got, want := show(get("readA", at(now)+"&state=queued")), fmt.Sprintf("[%s queued acme] more false", e.A1); got != want {
		t.Errorf("queued: %s, want %s", got, want)
	}
	// At A2's submit: it was queued then.
	a2 := e.msgsOf(e.A2)
	if got, want := show(get("readA", at(a2[0].Time)+"&type=t.audit")), fmt.Sprintf("[%s queued acme %s queued acme] more false", e.A2, e.A1); got != want {
		t.Errorf("at A2's submit: %s, want %s", got, want)
	}
	if got, want := show(get("prodB", at(now))), fmt.Sprintf("[%s queued other] more false", e.B1); got != want {
		t.Errorf("other's: %s, want %s", got, want)
	}
	// Another namespace's job as of an instant: answered as an unknown
	// one, over HTTP and NATS.
	unknown := domain.NewID()
	stamp := now.UTC().Format(time.RFC3339Nano)
	theirs, none := e.as("readA", "GET", "/api/v1/jobs/"+e.B1+"?"+at(now), nil), e.as("readA", "GET", "/api/v1/jobs/"+unknown+"?"+at(now), nil)
	theirs.problem(t, 404, "not-found")
	if strings.ReplaceAll(string(theirs.body), e.B1, unknown) != string(none.body) {
		t.Errorf("another namespace's job at an instant: %s\nan unknown one: %s", theirs.body, none.body)
	}
	st1, out1 := e.cmd("readA", "get", map[string]any{"id": e.B1, "at": stamp})
	st2, out2 := e.cmd("readA", "get", map[string]any{"id": unknown, "at": stamp})
	b1, _ := json.Marshal(out1)
	b2, _ := json.Marshal(out2)
	if st1 != 404 || st2 != 404 || strings.ReplaceAll(string(b1), e.B1, unknown) != string(b2) {
		t.Errorf("get at over NATS: %d %s\nan unknown one: %d %s", st1, b1, st2, b2)
	}
	e.as("prodB", "GET", "/api/v1/jobs?namespace=acme&"+at(now), nil).problem(t, 403, "forbidden")
	e.as("workA", "GET", "/api/v1/jobs?"+at(now), nil).problem(t, 403, "forbidden")
}
