package engine_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/cmdservice"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// authCommandServer starts a server and the command service on it with
// access control on.
func authCommandServer(t *testing.T) (*server.Server, *engine.Store) {
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "engine")
	cs := cmdservice.New(engine.Internal(st), cmdservice.Config{Auth: true, Tokens: st.Tokens, Log: testkit.Logger(t)})
	if err := cs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Stop(ctx) })
	return srv, st
}

type cmdAnswer struct {
	Job *struct {
		ID, Namespace, User string
		State               domain.State
	} `json:"job"`
	Jobs   []struct{ ID, Namespace string } `json:"jobs"`
	Events []struct{ Type, Actor string }   `json:"events"`
	Error  *engine.Problem                  `json:"error"`
}

// TestCommandsCheckTokens: with Auth on, the NATS command service refuses
// a command without a token or with a bad or revoked one (401), one whose
// role does not allow its verb (403), hides another namespace's jobs (404,
// as an unknown id), lists and submits in the token's namespace, and names
// the token as the actor of what it writes.
func TestCommandsCheckTokens(t *testing.T) {
	srv, st := authCommandServer(t)
	ctx := testkit.Ctx(t)
	nc := testkit.Conn(t, srv)
	tok := map[string]string{}
	ids := map[string]string{}
	for who, spec := range map[string]commands.TokenSpec{
		"prodA":   {Name: "prod-a", Namespace: "acme", Role: commands.RoleProducer},
		"readA":   {Name: "read-a", Namespace: "acme", Role: commands.RoleReader},
		"workA":   {Name: "work-a", Namespace: "acme", Role: commands.RoleWorker},
		"prodB":   {Name: "prod-b", Namespace: "other", Role: commands.RoleProducer},
		"admin":   {Name: "root", Namespace: "*", Role: commands.RoleAdmin},
		"revoked": {Name: "gone", Namespace: "acme", Role: commands.RoleProducer},
	} {
		rec, tk, err := st.Tokens.Create(ctx, spec, "test")
		if err != nil {
			t.Fatal(err)
		}
		tok[who], ids[who] = tk, rec.ID
	}
	if _, err := st.Tokens.Revoke(ctx, ids["revoked"], "test"); err != nil {
		t.Fatal(err)
	}
	send := func(who, verb string, body any) cmdAnswer {
		t.Helper()
		b, _ := json.Marshal(body)
		m := nats.NewMsg(streams.CommandPrefix + "." + verb)
		m.Data = b
		m.Header.Set("Content-Type", "application/json")
		if tok[who] != "" {
			m.Header.Set(engine.AuthHeader, "Bearer "+tok[who])
		}
		res, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var a cmdAnswer
		if err := json.Unmarshal(res.Data, &a); err != nil {
			t.Fatalf("%s: %v", res.Data, err)
		}
		return a
	}
	status := func(a cmdAnswer) int {
		if a.Error == nil {
			return 200
		}
		return a.Error.Status
	}
	sub := map[string]any{"type": "t.x", "payload": map[string]any{}}
	a := send("prodA", "submit", sub)
	if status(a) != 200 || a.Job.Namespace != "acme" {
		t.Fatalf("prodA submit: %+v %+v", a.Job, a.Error)
	}
	jobA := a.Job.ID
	b := send("prodB", "submit", sub)
	if status(b) != 200 || b.Job.Namespace != "other" {
		t.Fatalf("prodB submit: %+v %+v", b.Job, b.Error)
	}
	for _, c := range []struct {
		who, verb string
		body      any
		want      int
	}{
		{"none", "get", map[string]any{"id": jobA}, 401},
		{"revoked", "get", map[string]any{"id": jobA}, 401},
		{"prodA", "get", map[string]any{"id": jobA}, 200},
		{"readA", "get", map[string]any{"id": jobA}, 200},
		{"workA", "get", map[string]any{"id": jobA}, 403},
		{"prodB", "get", map[string]any{"id": jobA}, 404},
		{"admin", "get", map[string]any{"id": jobA}, 200},
		{"readA", "submit", sub, 403},
		{"prodB", "submit", map[string]any{"type": "t.x", "namespace": "acme"}, 403},
		{"prodB", "list", map[string]any{"namespace": "acme"}, 403},
		{"readA", "cancel", map[string]any{"id": jobA}, 403},
		{"prodB", "cancel", map[string]any{"id": jobA}, 404},
		{"prodB", "events", map[string]any{"id": jobA}, 404},
		{"readA", "events", map[string]any{"id": jobA}, 200},
	} {
		if got := send(c.who, c.verb, c.body); status(got) != c.want {
			t.Errorf("%s %s as %s: %d %+v, want %d", c.verb, c.body, c.who, status(got), got.Error, c.want)
		}
	}
	l := send("readA", "list", map[string]any{})
	if status(l) != 200 || len(l.Jobs) != 1 || l.Jobs[0].ID != jobA {
		t.Fatalf("readA lists %+v %+v, want only %s", l.Jobs, l.Error, jobA)
	}
	if c := send("prodA", "cancel", map[string]any{"id": jobA, "reason": "audit"}); status(c) != 200 || c.Job.State != domain.StateCancelled {
		t.Fatalf("prodA cancel: %+v", c)
	}
	// Who a job runs for: the token's name, another only if an admin names
	// it; a producer naming another is refused and writes nothing.
	for _, c := range []struct{ who, asked, want string }{
		{"prodA", "", "prod-a"}, {"prodA", "prod-a", "prod-a"}, {"admin", "", "root"}, {"admin", "alice", "alice"},
	} {
		if r := send(c.who, "submit", map[string]any{"type": "t.u", "user": c.asked}); status(r) != 200 || r.Job.User != c.want {
			t.Errorf("%s submitting as %q: %+v %+v, want user %q", c.who, c.asked, r.Job, r.Error, c.want)
		}
	}
	info, err := st.Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r := send("prodA", "submit", map[string]any{"type": "t.u", "user": "alice"}); status(r) != 403 || r.Error.Type != "user-not-allowed" {
		t.Errorf("prodA submitting as alice: %+v %+v, want 403 user-not-allowed", r.Job, r.Error)
	}
	if again, err := st.Events.Info(ctx); err != nil || again.State.Msgs != info.State.Msgs {
		t.Errorf("a refused submit wrote %d events (%v)", again.State.Msgs-info.State.Msgs, err)
	}
	ev := send("prodA", "events", map[string]any{"id": jobA})
	want := "token:prod-a/" + ids["prodA"]
	if len(ev.Events) != 2 || ev.Events[0].Actor != want || ev.Events[1].Actor != want {
		t.Fatalf("events %+v, want submitted and cancelled by %s", ev.Events, want)
	}
	// get with at folds only the token's namespace's events: another
	// namespace's job is not found, as an id with no event.
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	missingAt := "01M85MKVAX5K4A16TR1GJCD5RN"
	if got := send("readA", "get", map[string]any{"id": jobA, "at": at}); status(got) != 200 || got.Job.ID != jobA {
		t.Errorf("get at of its own namespace's job: %+v", got.Error)
	}
	got, none := send("prodB", "get", map[string]any{"id": jobA, "at": at}), send("prodB", "get", map[string]any{"id": missingAt, "at": at})
	if status(got) != 404 || got.Error.Type != none.Error.Type || got.Error.Detail != strings.ReplaceAll(none.Error.Detail, missingAt, jobA) {
		t.Errorf("get at of another namespace's job: %+v; of a missing one: %+v", got.Error, none.Error)
	}
	// A purged job of another namespace is not found, as a job that never
	// was (its purge, when and why, is for its own namespace).
	if n, err := st.Purge(ctx, jobA, "retention"); err != nil || n != 1 {
		t.Fatalf("purge: %d %v", n, err)
	}
	missing := "01M85MKVAX5K4A16TR1GJCD5RN"
	for _, verb := range []string{"get", "wait", "events", "history", "children", "file.download"} {
		got, none := send("prodB", verb, map[string]any{"id": jobA}), send("prodB", verb, map[string]any{"id": missing})
		if status(got) != 404 || got.Error.Type != none.Error.Type || got.Error.Detail != strings.ReplaceAll(none.Error.Detail, missing, jobA) {
			t.Errorf("%s of another namespace's purged job: %+v; of a missing one: %+v", verb, got.Error, none.Error)
		}
	}
	if got := send("readA", "get", map[string]any{"id": jobA}); status(got) != 410 {
		t.Errorf("get of its own namespace's purged job: %+v, want 410", got.Error)
	}
}

// The workers command shows a namespaced token a worker of its namespace
// without the claims of other namespaces' jobs it runs (a free-form type
// runs every namespace's jobs); a token of every namespace sees them all.
func TestCommandWorkersHideOtherNamespacesClaims(t *testing.T) {
	srv, st := authCommandServer(t)
	ctx := testkit.Ctx(t)
	tok := map[string]string{}
	for who, spec := range map[string]commands.TokenSpec{
		"readA": {Name: "read-a", Namespace: "acme", Role: commands.RoleReader},
		"admin": {Name: "root", Namespace: "*", Role: commands.RoleAdmin},
	} {
		_, tk, err := st.Tokens.Create(ctx, spec, "test")
		if err != nil {
			t.Fatal(err)
		}
		tok[who] = tk
	}
	testkit.HoldingWorker(t, srv, "w-acme", "acme", "t.free")
	var ids []string
	for _, ns := range []string{"acme", "other"} {
		sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "t.free", Namespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sub.Job.ID)
	}
	nc := testkit.Conn(t, srv)
	claims := func(who string) []string {
		t.Helper()
		m := nats.NewMsg(streams.CommandPrefix + ".workers")
		m.Data = []byte(`{}`)
		m.Header.Set("Content-Type", "application/json")
		m.Header.Set(engine.AuthHeader, "Bearer "+tok[who])
		res, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var a struct {
			Workers []struct {
				ID     string
				Claims []string
			}
		}
		if err := json.Unmarshal(res.Data, &a); err != nil {
			t.Fatalf("%s: %v", res.Data, err)
		}
		for _, w := range a.Workers {
			if w.ID == "w-acme" {
				return w.Claims
			}
		}
		t.Fatalf("%s: no worker w-acme: %s", who, res.Data)
		return nil
	}
	testkit.WaitFor(t, 15*time.Second, func() error {
		if got := claims("admin"); len(got) != 2 {
			return fmt.Errorf("claims %v", got)
		}
		return nil
	})
	if got := claims("readA"); len(got) != 1 || got[0] != ids[0] {
		t.Fatalf("a reader of acme sees claims %v, want only %s (not %s)", got, ids[0], ids[1])
	}
}
