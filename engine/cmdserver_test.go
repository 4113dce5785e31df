package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/cmdservice"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

var verbs = []string{"submit", "get", "cancel", "list", "events", "wait", "history",
	"submit_workflow", "get_workflow", "retry_workflow",
	"schedule.create", "schedule.list", "schedule.get", "schedule.update", "schedule.pause", "schedule.resume", "schedule.delete",
	"audit_export", "audit_pubkey", "audit_verify", "children", "file.download", "file.input", "file.put", "file.result", "file.submit", "list_at", "namespace.set", "purge", "purge_job",
	"queue.limits", "queue.pause", "queue.resume", "queues", "replay", "reprioritize", "retry", "tail", "token.create", "token.revoke",
	"tokens", "type.get", "type.register", "types", "verify", "workers"}

// commandServer starts a command server on its own connection.
func commandServer(t *testing.T, st *engine.Store) *cmdservice.CommandServer {
	t.Helper()
	cs := cmdservice.New(engine.Internal(st), cmdservice.Config{Log: testkit.Logger(t)})
	if err := cs.Start(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Stop(context.Background()) })
	return cs
}

// gather sends a request on subject and returns the n first replies (of
// every instance of the service, for $SRV subjects).
func gather(t *testing.T, nc *nats.Conn, subject string, n int) [][]byte {
	t.Helper()
	inbox := nats.NewInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for range n {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("%s: reply %d of %d: %v", subject, len(out)+1, n, err)
		}
		out = append(out, m.Data)
	}
	return out
}

// serviceStats is $SRV.STATS of the command service, with each endpoint's
// own data.
type serviceStats struct {
	micro.Stats
	Endpoints []struct {
		micro.EndpointStats
		Data cmdservice.VerbStats `json:"data"`
	} `json:"endpoints"`
}

func (s serviceStats) endpoint(t *testing.T, name string) (micro.EndpointStats, cmdservice.VerbStats) {
	t.Helper()
	for _, e := range s.Endpoints {
		if e.Name == name {
			return e.EndpointStats, e.Data
		}
	}
	t.Fatalf("no endpoint %s in %+v", name, s)
	return micro.EndpointStats{}, cmdservice.VerbStats{}
}

// statsOf returns the STATS of every one of n instances, by service id.
func statsOf(t *testing.T, nc *nats.Conn, n int) map[string]serviceStats {
	t.Helper()
	out := map[string]serviceStats{}
	for _, b := range gather(t, nc, "$SRV.STATS."+cmdservice.CommandService, n) {
		var s serviceStats
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("stats %s: %v", b, err)
		}
		out[s.ID] = s
	}
	if len(out) != n {
		t.Fatalf("stats of %d instances, want %d", len(out), n)
	}
	return out
}

// The command server is a micro service: PING, INFO and STATS answer,
// with one endpoint per verb on jetflow.cmd.<verb> in the engines' queue
// group, and STATS counts each endpoint's commands and errors.
func TestCommandServiceDiscovery(t *testing.T) {
	srv := testkit.Server(t)
	commandServer(t, testkit.Store(t, testkit.Conn(t, srv), "engine-a"))
	nc := testkit.Conn(t, srv)

	var ping micro.Ping
	if err := json.Unmarshal(gather(t, nc, "$SRV.PING."+cmdservice.CommandService, 1)[0], &ping); err != nil {
		t.Fatal(err)
	}
	if ping.Name != "jetflow" || ping.Version != cmdservice.CommandServiceVersion || ping.Type != micro.PingResponseType {
		t.Fatalf("ping %+v", ping)
	}
	var info micro.Info
	if err := json.Unmarshal(gather(t, nc, "$SRV.INFO", 1)[0], &info); err != nil {
		t.Fatal(err)
	}
	if info.Name != "jetflow" || info.ID != ping.ID || info.Metadata["engine"] != "engine-a" {
		t.Fatalf("info %+v", info)
	}
	var names []string
	for _, e := range info.Endpoints {
		verb := strings.TrimPrefix(e.Subject, streams.CommandPrefix+".")
		names = append(names, verb)
		// An endpoint's name allows no dots: queue.pause is queue-pause.
		if e.Name != strings.ReplaceAll(verb, ".", "-") || e.QueueGroup != "jetflow-engine" {
			t.Errorf("endpoint %+v", e)
		}
	}
	if !slices.Equal(names, verbs) {
		t.Fatalf("endpoints %v, want %v", names, verbs)
	}

	st := testkit.Store(t, nc, "client")
	res, err := st.Submit(testkit.Ctx(t), &commands.SubmitRequest{Type: "demo.x"})
	if err != nil {
		t.Fatal(err)
	}
	if r := askCommand(t, nc, "get", `{"id":"`+res.Job.ID+`"}`); r.Error != nil {
		t.Fatalf("get: %+v", r.Error)
	}
	missing := domain.NewID()
	m := nats.NewMsg(streams.CommandPrefix + ".get")
	m.Header.Set("Content-Type", "application/json")
	m.Data = []byte(`{"id":"` + missing + `"}`)
	resp, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// an error is in the body, as documented, and in micro's headers
	var body cmdReply
	if err := json.Unmarshal(resp.Data, &body); err != nil || body.Error == nil || body.Error.Type != engine.ProblemNotFound || body.Error.JobID != missing {
		t.Fatalf("get of a missing job: %s (%v)", resp.Data, err)
	}
	if code, desc := resp.Header.Get(micro.ErrorCodeHeader), resp.Header.Get(micro.ErrorHeader); code != "404" || !strings.HasPrefix(desc, "not-found: ") {
		t.Fatalf("error headers %q %q", code, desc)
	}

	// micro counts a request when its handler returns, which may be after
	// the reply: wait for it.
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, s := range statsOf(t, nc, 1) {
			ep, data := s.endpoint(t, "get")
			if ep.NumRequests != 2 || data.NumAnswered != 2 || data.NumErrors != 1 || !strings.HasPrefix(data.LastError, "not-found") {
				return fmt.Errorf("get stats %+v %+v", ep, data)
			}
			if ep, _ := s.endpoint(t, "submit"); ep.NumRequests != 0 {
				return fmt.Errorf("submit stats %+v", ep)
			}
		}
		return nil
	})
}

// Two engines share the commands: each command, known or not, is
// answered exactly once, and both answer some.
func TestCommandServersShareRequests(t *testing.T) {
	srv := testkit.Server(t)
	a := testkit.Store(t, testkit.Conn(t, srv), "engine-a")
	b := testkit.Store(t, testkit.Conn(t, srv), "engine-b")
	servers := []*cmdservice.CommandServer{commandServer(t, a), commandServer(t, b)}
	nc := testkit.Conn(t, srv)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, nc, "client")
	res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "demo.x"})
	if err != nil {
		t.Fatal(err)
	}

	const gets, unknowns = 200, 40
	prefix := nats.NewInbox()
	replies, err := nc.SubscribeSync(prefix + ".>")
	if err != nil {
		t.Fatal(err)
	}
	for i := range gets + unknowns {
		m := nats.NewMsg(streams.CommandPrefix + ".get")
		m.Data = []byte(`{"id":"` + res.Job.ID + `"}`)
		if i >= gets {
			m.Subject = streams.CommandPrefix + ".explode"
			m.Data = []byte(`{}`)
		}
		m.Header.Set("Content-Type", "application/json")
		m.Reply = fmt.Sprintf("%s.%d", prefix, i)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]int{}
	count := func(m *nats.Msg) {
		t.Helper()
		seen[m.Subject]++
		var r cmdReply
		if err := json.Unmarshal(m.Data, &r); err != nil {
			t.Fatalf("reply %s: %v", m.Data, err)
		}
		var i int
		fmt.Sscanf(strings.TrimPrefix(m.Subject, prefix+"."), "%d", &i)
		if i < gets && (r.Error != nil || r.Job["id"] != res.Job.ID) {
			t.Errorf("get %d: %s", i, m.Data)
		}
		if i >= gets && (r.Error == nil || r.Error.Type != problems.UnknownCommand) {
			t.Errorf("unknown %d: %s", i, m.Data)
		}
	}
	for range gets + unknowns {
		m, err := replies.NextMsg(30 * time.Second)
		if err != nil {
			t.Fatalf("%d replies of %d: %v", len(seen), gets+unknowns, err)
		}
		count(m)
	}

	answered := 0
	for id, s := range statsOf(t, nc, 2) {
		_, data := s.endpoint(t, "get")
		if data.NumAnswered == 0 {
			t.Errorf("engine %s (%s) answered no get of %d", s.Metadata["engine"], id, gets)
		}
		answered += data.NumAnswered
	}
	if answered != gets {
		t.Errorf("the endpoints answered %d gets, want %d", answered, gets)
	}

	// Stopped, the servers have answered all they ever will; once their
	// connections and ours are flushed, every reply is here.
	for i, s := range servers {
		s.Stop(ctx)
		if err := []*engine.Store{a, b}[i].NC.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := replies.NextMsg(0)
		if err != nil {
			break
		}
		count(m)
	}
	if len(seen) != gets+unknowns {
		t.Errorf("%d commands answered, want %d", len(seen), gets+unknowns)
	}
	for subj, n := range seen {
		if n != 1 {
			t.Errorf("%s answered %d times", subj, n)
		}
	}
}

// A stopped server answers nothing: a command gets no responders, known
// or not, and the service is gone from discovery. Stop twice is a no-op;
// the server starts again.
func TestCommandServerStop(t *testing.T) {
	srv := testkit.Server(t)
	cs := commandServer(t, testkit.Store(t, testkit.Conn(t, srv), "engine-a"))
	nc := testkit.Conn(t, srv)
	ctx := testkit.Ctx(t)
	ask := func(subject string) error {
		m := nats.NewMsg(subject)
		m.Data = []byte(`{"state":"queued"}`)
		m.Header.Set("Content-Type", "application/json")
		_, err := nc.RequestMsg(m, 10*time.Second)
		return err
	}
	for _, subject := range []string{streams.CommandPrefix + ".list", streams.CommandPrefix + ".explode", "$SRV.PING.jetflow"} {
		if err := ask(subject); err != nil {
			t.Fatalf("%s while running: %v", subject, err)
		}
	}
	if err := cs.Start(ctx); err != nil { // started: a no-op
		t.Fatal(err)
	}
	cs.Stop(ctx)
	cs.Stop(ctx)
	for _, subject := range []string{streams.CommandPrefix + ".list", streams.CommandPrefix + ".explode", "$SRV.PING.jetflow"} {
		if err := ask(subject); !errors.Is(err, nats.ErrNoResponders) {
			t.Fatalf("%s after stop: %v, want no responders", subject, err)
		}
	}
	if err := cs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ask(streams.CommandPrefix + ".list"); err != nil {
		t.Fatalf("list after a restart: %v", err)
	}
}
