package jetflow_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// authSystem is an embedded server that requires credentials, listening on
// loopback, and an engine connected to it as the engine user over TCP.
type authSystem struct {
	srv    *server.Server
	url    string
	users  jetflow.NATSUsers
	client *jetflow.Client // as the engine
	js     jetstream.JetStream
}

func startAuthSystem(t *testing.T, workerNamespaces ...string) *authSystem {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, jetflow.NATSUsersFile)
	users, created, err := jetflow.LoadOrCreateNATSUsers(path)
	if err != nil || !created {
		t.Fatalf("users: created %v, %v", created, err)
	}
	if users, _, err = jetflow.AddNATSWorkers(path, users, workerNamespaces); err != nil {
		t.Fatal(err)
	}
	srv, err := jetflow.StartServer(jetflow.ServerConfig{Dir: dir, Listen: "127.0.0.1:-1", Name: "auth", Users: users})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	sys := &authSystem{srv: srv, url: srv.ClientURL(), users: users}
	sys.client = sys.connect(t, jetflow.NATSRoleEngine, nil)
	sys.js, err = jetstream.New(sys.client.Conn())
	if err != nil {
		t.Fatal(err)
	}
	eng := jetflow.NewEngine(sys.client, jetflow.EngineConfig{ProjectorLag: 100 * time.Millisecond, Logger: testkit.Logger(t)})
	if err := eng.Start(testkit.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	return sys
}

// connect connects a Client over TCP as the user of role, its permission
// violations recorded in v.
func (s *authSystem) connect(t *testing.T, role string, v *violations) *jetflow.Client {
	t.Helper()
	u, ok := s.users.Role(role)
	if !ok {
		t.Fatalf("no user of role %s", role)
	}
	return s.connectAs(t, u, v)
}

// connectAs connects a Client over TCP as user u.
func (s *authSystem) connectAs(t *testing.T, u jetflow.NATSUser, v *violations) *jetflow.Client {
	t.Helper()
	role := u.Role
	prefix := jetflow.NATSInboxPrefix(role)
	if u.Namespace != "" {
		prefix = jetflow.NATSWorkerInboxPrefix(u.Namespace)
	}
	opts := []nats.Option{nats.UserInfo(u.User, u.Password), nats.CustomInboxPrefix(prefix)}
	if v != nil {
		opts = append(opts, nats.ErrorHandler(v.record))
	}
	c, err := jetflow.Connect(testkit.Ctx(t), s.url, jetflow.ClientOptions{Name: role, Logger: testkit.Logger(t), NATSOptions: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// dial connects a bare connection over TCP as the user of role.
func (s *authSystem) dial(t *testing.T, role string, v *violations) *nats.Conn {
	t.Helper()
	u, _ := s.users.Role(role)
	nc, err := nats.Connect(s.url, nats.UserInfo(u.User, u.Password), nats.CustomInboxPrefix(jetflow.NATSInboxPrefix(role)),
		nats.ErrorHandler(v.record))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// violations are the permission violations the server reported to a
// connection.
type violations struct {
	mu   sync.Mutex
	errs []string
}

func (v *violations) record(_ *nats.Conn, _ *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		v.mu.Lock()
		v.errs = append(v.errs, err.Error())
		v.mu.Unlock()
	}
}

func (v *violations) all() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.errs...)
}

// wait waits until the server refused what (`Publish to "subject"` or
// `Subscription to "subject"`).
func (v *violations) wait(t *testing.T, what string) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, e := range v.all() {
			if strings.Contains(e, what) {
				return nil
			}
		}
		return fmt.Errorf("no violation %s among %q", what, v.all())
	})
}

// command sends a command of the command protocol as JSON and decodes its
// reply into out; a reply with an error fails the test.
func command(t *testing.T, nc *nats.Conn, verb string, req, out any) {
	t.Helper()
	body, _ := json.Marshal(req)
	m := nats.NewMsg(streams.CommandPrefix + "." + verb)
	m.Header.Set("Content-Type", "application/json")
	m.Data = body
	reply, err := nc.RequestMsg(m, 30*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", verb, err)
	}
	var e struct {
		Error *struct{ Type, Detail string } `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &e); err != nil || e.Error != nil {
		t.Fatalf("%s: %s", verb, reply.Data)
	}
	if err := json.Unmarshal(reply.Data, out); err != nil {
		t.Fatalf("%s: %v: %s", verb, err, reply.Data)
	}
}

type jobReply struct {
	Job struct {
		ID, State, Namespace, Type string
	} `json:"job"`
}

// The client role uses the command protocol and follows the event log; the
// server refuses its writes to the log, the job bucket and the work
// queues, and its reads of the buckets.
func TestNATSClientRole(t *testing.T) {
	t.Parallel()
	sys := startAuthSystem(t)
	var v violations
	nc := sys.dial(t, jetflow.NATSRoleClient, &v)

	// Its own job, end to end: follow the log, submit, get.
	evs, err := nc.SubscribeSync(streams.EventsPrefix + ".>")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var sub jobReply
	command(t, nc, "submit", map[string]any{"type": "auth.echo", "payload": map[string]int{"n": 1}}, &sub)
	if sub.Job.ID == "" || sub.Job.State != "queued" || sub.Job.Namespace != "default" {
		t.Fatalf("submitted %+v", sub.Job)
	}
	var got jobReply
	command(t, nc, "get", map[string]string{"id": sub.Job.ID}, &got)
	if got.Job != sub.Job {
		t.Fatalf("got %+v, submitted %+v", got.Job, sub.Job)
	}
	m, err := evs.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := streams.EventSubject("default", "default", "auth.echo", sub.Job.ID); m.Subject != want {
		t.Fatalf("event on %s, want %s", m.Subject, want)
	}
	// Its history, read directly from the log.
	h, err := nc.Request("$JS.API.DIRECT.GET."+streams.EventsStream+"."+streams.EventFilter(sub.Job.ID), nil, 30*time.Second)
	if err != nil || h.Header.Get("Nats-Subject") != m.Subject || h.Header.Get("Nats-Sequence") != "1" {
		t.Fatalf("direct get: %v %v", err, h.Header)
	}
	// The Go client as a token client needs no more than this role.
	tc, err := jetflow.NewClient(testkit.Ctx(t), nc, jetflow.ClientOptions{Token: "jft_unchecked"})
	if err != nil {
		t.Fatal(err)
	}
	viaClient, err := tc.Submit(testkit.Ctx(t), "auth.echo", map[string]int{"n": 2})
	if err != nil {
		t.Fatalf("a token client over the client role: %v", err)
	}
	if back, err := tc.Get(testkit.Ctx(t), viaClient.ID); err != nil || back.ID != viaClient.ID {
		t.Fatalf("get through a token client: %+v %v", back, err)
	}
	// Waiting for a job's end and reading its history are commands too:
	// the role needs no read of the jobs bucket for them.
	waited := make(chan struct {
		Job      struct{ ID, State string } `json:"job"`
		TimedOut bool                       `json:"timed_out"`
	}, 1)
	go func() {
		var w struct {
			Job      struct{ ID, State string } `json:"job"`
			TimedOut bool                       `json:"timed_out"`
		}
		command(t, nc, "wait", map[string]any{"id": sub.Job.ID, "timeout": 20}, &w)
		waited <- w
	}()
	command(t, nc, "cancel", map[string]string{"id": sub.Job.ID}, &got)
	select {
	case w := <-waited:
		if w.Job.ID != sub.Job.ID || w.Job.State != "cancelled" || w.TimedOut {
			t.Fatalf("wait %+v", w)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the wait did not answer the cancel")
	}
	var hist struct {
		Events []struct {
			Seq  uint64
			Type string
		} `json:"events"`
		Next uint64 `json:"next"`
		More bool   `json:"more"`
	}
	command(t, nc, "history", map[string]any{"id": sub.Job.ID, "limit": 1}, &hist)
	if len(hist.Events) != 1 || hist.Events[0].Type != "job.submitted" || !hist.More || hist.Next != hist.Events[0].Seq {
		t.Fatalf("history %+v", hist)
	}
	command(t, nc, "history", map[string]any{"id": sub.Job.ID, "after": hist.Next}, &hist)
	if len(hist.Events) != 1 || hist.Events[0].Type != "job.cancelled" || hist.More {
		t.Fatalf("history page 2 %+v", hist)
	}
	// An export, in chunks it acknowledges: the one answer the role may
	// give to each request it receives.
	var exp bytes.Buffer
	if st, err := tc.AuditExport(testkit.Ctx(t), jetflow.AuditExportScope{}, &exp); err != nil || st.Events == 0 || int64(exp.Len()) != st.Bytes {
		t.Fatalf("an export over the client role: %v %+v", err, st)
	}
	if len(v.all()) != 0 {
		t.Fatalf("violations while doing its job: %q", v.all())
	}

	// A command whose reply subject is the event log (the engine, which may
	// publish anywhere, would append its answer there): not run, not
	// answered. The next submit on the same endpoint is answered, so the
	// first was handled before it.
	target := domain.NewID()
	bad := nats.NewMsg(streams.CommandPrefix + ".submit")
	bad.Header.Set("Content-Type", "application/json")
	bad.Reply = streams.EventSubject("other", "default", "auth.echo", target)
	bad.Data = []byte(`{"type":"auth.echo","idempotency_key":"reply-guard"}`)
	if err := nc.PublishMsg(bad); err != nil {
		t.Fatal(err)
	}
	var first struct {
		Job     struct{ ID string } `json:"job"`
		Created *bool               `json:"created"`
	}
	command(t, nc, "submit", map[string]any{"type": "auth.echo", "idempotency_key": "reply-guard"}, &first)
	if first.Created == nil || !*first.Created {
		t.Fatalf("the command with the log as its reply subject was run: %+v", first)
	}

	// Forgeries: each refused by the server, and nothing stored.
	forged := domain.NewID()
	for _, subj := range []string{
		streams.EventSubject("default", "default", "auth.echo", forged), // the event log
		streams.KVSubject(forged),                      // the job bucket
		streams.RunSubject("default", "auth.forged"),   // a work queue
		"$JS.API.STREAM.PURGE." + streams.EventsStream, // the JetStream API
	} {
		if err := nc.Publish(subj, []byte("forged")); err != nil {
			t.Fatal(err)
		}
		v.wait(t, fmt.Sprintf("Publish to %q", subj))
	}
	// Nor may it read the buckets (every namespace's records), or the
	// replies to others: the engine's reads of them.
	for _, subj := range []string{"$KV." + streams.JobsBucket + ".>", "_INBOX.>", "_INBOX_worker.>"} {
		if _, err := nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		v.wait(t, fmt.Sprintf("Subscription to %q", subj))
	}

	ctx := testkit.Ctx(t)
	events, err := sys.js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := events.GetLastMsgForSubject(ctx, streams.EventFilter(forged)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("forged event: %v", err)
	}
	if _, err := events.GetLastMsgForSubject(ctx, streams.EventFilter(target)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("an answer in the event log: %v", err)
	}
	if _, err := sys.client.Get(ctx, forged); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("forged record: %v", err)
	}
	q, err := sys.js.Stream(ctx, streams.QueueStream("default"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.GetLastMsgForSubject(ctx, streams.RunSubject("default", "auth.forged")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("forged work item: %v", err)
	}
	if info, err := events.Info(ctx); err != nil || info.State.Msgs != 4 {
		t.Fatalf("event log: %v, %+v (want the three submits and the cancel)", err, info.State)
	}
}

// A worker user bound to a namespace (serve --nats-worker-namespaces) runs
// that namespace's jobs end to end without a violation; the server refuses
// its events, type registrations and type records in another namespace,
// and nothing of them is stored.
func TestNATSWorkerRoleNamespace(t *testing.T) {
	t.Parallel()
	sys := startAuthSystem(t, "auth")
	ctx := testkit.Ctx(t)
	var bound jetflow.NATSUser
	for _, u := range sys.users {
		if u.Namespace == "auth" {
			bound = u
		}
	}
	if bound.User != "worker-auth" || bound.Role != jetflow.NATSRoleWorker {
		t.Fatalf("the namespace's worker user: %+v", bound)
	}
	var v violations
	wc := sys.connectAs(t, bound, &v)
	w := jetflow.NewWorker(wc, jetflow.WorkerConfig{Logger: testkit.Logger(t), Lease: time.Second, Namespace: "auth"})
	jetflow.Register(w, "auth:greet", func(_ context.Context, job *jetflow.Job[map[string]string]) (string, error) {
		if job.Attempt == 1 && job.Payload["name"] == "Bo" {
			return "", errors.New("first attempt fails")
		}
		return "hello " + job.Payload["name"], nil
	})
	jetflow.Register(w, "auth:parent", func(_ context.Context, job *jetflow.Job[any]) (any, error) {
		kids, err := jetflow.Children("auth:greet", []any{map[string]string{"name": "Cy"}, map[string]string{"name": "Di"}})
		if err != nil {
			return nil, err
		}
		return nil, jetflow.FanOut(jetflow.FanOutSpec{Children: kids})
	})
	// The queue exists before the worker starts (a worker may not create
	// a queue's stream), and so do the types (the engine user registers
	// them as the worker would).
	first, err := sys.client.Submit(ctx, "auth.warmup", nil, jetflow.Namespace("auth"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sys.client.Cancel(ctx, first.ID, "only for the queue"); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	var ids []string
	for _, s := range []struct {
		typ     string
		payload any
	}{{"auth:greet", map[string]string{"name": "Ada"}}, {"auth:greet", map[string]string{"name": "Bo"}}, {"auth:parent", nil}} {
		j, err := sys.client.Submit(ctx, s.typ, s.payload, jetflow.Namespace("auth"), jetflow.Backoff(10*time.Millisecond), jetflow.Jitter(0))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	for _, id := range ids {
		if j := testkit.WaitTerminal(t, sys.client, id, time.Minute); j.State != jetflow.Succeeded {
			t.Fatalf("%s %s: %s %+v", j.Type, id, j.State, j.Error)
		}
	}
	w.Stop(ctx)
	if len(v.all()) != 0 {
		t.Fatalf("violations while doing its namespace's jobs: %q", v.all())
	}

	// Nor may it read the replies to another namespace's workers, or to
	// the workers of every namespace: its inboxes are its namespace's.
	nc := wc.Conn()
	for _, subj := range []string{jetflow.NATSInboxPrefix(jetflow.NATSRoleWorker) + ".>", jetflow.NATSWorkerInboxPrefix("other") + ".>"} {
		if _, err := nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		v.wait(t, fmt.Sprintf("Subscription to %q", subj))
	}

	// Another namespace's subjects: refused, nothing stored.
	wjs, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	forged := []string{
		streams.EventSubject("default", "default", "auth.echo", "01JFORGED0000000000000000"),
		streams.TypeSubject("default", "forged", "type"),
		"$KV." + streams.TypesBucket + "." + streams.TypeKey("default", "forged", "type"),
	}
	var wg sync.WaitGroup
	for _, subj := range forged {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if _, err := wjs.Publish(ctx, subj, []byte("forged")); err == nil {
				t.Errorf("%s: stored", subj)
			}
		})
	}
	wg.Wait()
	for _, subj := range forged {
		v.wait(t, fmt.Sprintf("Publish to %q", subj))
	}
	for _, c := range []struct{ stream, subject string }{
		{streams.EventsStream, forged[0]}, {streams.EventsStream, forged[1]}, {"KV_" + streams.TypesBucket, forged[2]},
	} {
		st, err := sys.js.Stream(ctx, c.stream)
		if err != nil {
			t.Fatal(err)
		}
		if m, err := st.GetLastMsgForSubject(ctx, c.subject); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("%s on %s: %+v, %v", c.subject, c.stream, m, err)
		}
	}
}

// The worker role runs jobs of every kind end to end without a single
// permission violation; the server refuses its stream and consumer
// management.
func TestNATSWorkerRole(t *testing.T) {
	t.Parallel()
	sys := startAuthSystem(t)
	ctx := testkit.Ctx(t)
	// The queue exists before the worker starts: a worker may not create
	// a queue's stream.
	first, err := sys.client.Submit(ctx, "auth.echo", map[string]int{"n": 0})
	if err != nil {
		t.Fatal(err)
	}

	var v violations
	wc := sys.connect(t, jetflow.NATSRoleWorker, &v)
	w := jetflow.NewWorker(wc, jetflow.WorkerConfig{Logger: testkit.Logger(t), Lease: time.Second})
	jetflow.Register(w, "auth.echo", func(ctx context.Context, job *jetflow.Job[map[string]int]) (map[string]int, error) {
		if err := job.Progress(1, 2, "half"); err != nil {
			return nil, err
		}
		if err := job.Emit(ctx, "auth.note", "info", "a note", map[string]any{"n": job.Payload["n"]}); err != nil {
			return nil, err
		}
		return job.Payload, nil
	})
	jetflow.Register(w, "auth.flaky", func(_ context.Context, job *jetflow.Job[any]) (int, error) {
		if job.Attempt == 1 {
			return 0, errors.New("first attempt fails")
		}
		return job.Attempt, nil
	})
	jetflow.Register(w, "auth:greet", func(_ context.Context, job *jetflow.Job[struct {
		Name string `json:"name"`
	}]) (string, error) {
		return "hello " + job.Payload.Name, nil
	})
	jetflow.Register(w, "auth.parent", func(_ context.Context, job *jetflow.Job[string]) (any, error) {
		if job.Payload == "batches" {
			return nil, jetflow.FanOut(jetflow.FanOutSpec{BatchType: "auth.batch", Batches: []any{1, 2, 3}})
		}
		kids, err := jetflow.Children("auth.echo", []any{map[string]int{"n": 1}, map[string]int{"n": 2}})
		if err != nil {
			return nil, err
		}
		return nil, jetflow.FanOut(jetflow.FanOutSpec{Children: kids})
	})
	jetflow.Register(w, "auth.later", func(_ context.Context, job *jetflow.Job[any]) (int, error) {
		if job.Attempt == 1 {
			return 0, jetflow.RetryLater(10*time.Millisecond, "not yet")
		}
		return job.Attempt, nil
	})
	started := make(chan string, 1)
	jetflow.Register(w, "auth.block", func(ctx context.Context, job *jetflow.Job[any]) (any, error) {
		started <- job.ID
		<-ctx.Done() // until cancelled
		return nil, context.Cause(ctx)
	})
	jetflow.RegisterBatch(w, "auth.batch", func(context.Context, *jetflow.Batch[int]) error { return nil })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })

	ids := []string{first.ID}
	for _, s := range []struct {
		typ     string
		payload any
		opts    []jetflow.SubmitOption
	}{
		{"auth.flaky", nil, []jetflow.SubmitOption{jetflow.Backoff(10 * time.Millisecond), jetflow.Jitter(0)}},
		{"auth:greet", map[string]string{"name": "Ada"}, nil},
		{"auth.later", nil, nil},
		{"auth.parent", "children", nil},
		{"auth.parent", "batches", nil},
		{"auth.echo", map[string]int{"n": 3}, []jetflow.SubmitOption{jetflow.Delay(50 * time.Millisecond)}},
	} {
		j, err := sys.client.Submit(ctx, s.typ, s.payload, s.opts...)
		if err != nil {
			t.Fatalf("%s: %v", s.typ, err)
		}
		ids = append(ids, j.ID)
	}
	for _, id := range ids {
		if j := testkit.WaitTerminal(t, sys.client, id, time.Minute); j.State != jetflow.Succeeded {
			t.Fatalf("%s %s: %s %+v", j.Type, id, j.State, j.Error)
		}
	}
	// A running job that is cancelled: the worker hears of it and stops.
	blocked, err := sys.client.Submit(ctx, "auth.block", nil)
	if err != nil {
		t.Fatal(err)
	}
	if id := <-started; id != blocked.ID {
		t.Fatalf("started %s, want %s", id, blocked.ID)
	}
	if _, err := sys.client.Cancel(ctx, blocked.ID, "test"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, time.Minute, func() error {
		if n := w.Running(); n != 0 {
			return fmt.Errorf("%d handlers running", n)
		}
		return nil
	})
	if j := testkit.WaitTerminal(t, sys.client, blocked.ID, time.Minute); j.State != jetflow.Cancelled {
		t.Fatalf("cancelled job is %s", j.State)
	}
	w.Stop(ctx) // a clean stop too
	if len(v.all()) != 0 {
		t.Fatalf("violations while doing its job: %q", v.all())
	}

	// Stream and consumer management, and the buckets it does not write:
	// each refused by the server (the request gets no answer), and
	// nothing changed.
	wjs, err := jetstream.New(wc.Conn())
	if err != nil {
		t.Fatal(err)
	}
	// A work item nobody takes, for the purge to find.
	if _, err := sys.client.Submit(ctx, "auth.nobody", nil); err != nil {
		t.Fatal(err)
	}
	queue := streams.QueueStream("default")
	run := "run_" + streams.Token("auth.echo")
	qs, err := sys.js.Stream(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	nobody := streams.RunSubject("default", "auth.nobody")
	var item *jetstream.RawStreamMsg
	testkit.WaitFor(t, 30*time.Second, func() (err error) {
		item, err = qs.GetLastMsgForSubject(ctx, nobody)
		return err
	})
	refused := []struct {
		subject string
		call    func(context.Context) error
	}{
		{"$JS.API.STREAM.CREATE.FORGED", func(ctx context.Context) error {
			_, err := wjs.CreateStream(ctx, jetstream.StreamConfig{Name: "FORGED", Subjects: []string{"forged.>"}})
			return err
		}},
		{"$JS.API.STREAM.UPDATE." + streams.EventsStream, func(ctx context.Context) error {
			_, err := wjs.UpdateStream(ctx, jetstream.StreamConfig{Name: streams.EventsStream, Subjects: []string{"forged.>"}})
			return err
		}},
		{"$JS.API.STREAM.DELETE." + streams.EventsStream, func(ctx context.Context) error {
			return wjs.DeleteStream(ctx, streams.EventsStream)
		}},
		{"$JS.API.STREAM.PURGE." + queue, func(ctx context.Context) error {
			s, err := wjs.Stream(ctx, queue)
			if err != nil {
				return err
			}
			return s.Purge(ctx)
		}},
		{"$JS.API.CONSUMER.CREATE." + streams.EventsStream + ".forged", func(ctx context.Context) error {
			_, err := wjs.CreateOrUpdateConsumer(ctx, streams.EventsStream, jetstream.ConsumerConfig{Durable: "forged"})
			return err
		}},
		{"$JS.API.CONSUMER.DELETE." + queue + "." + run, func(ctx context.Context) error {
			return wjs.DeleteConsumer(ctx, queue, run)
		}},
		{"$KV." + streams.QueuesBucket + ".default", func(ctx context.Context) error {
			kv, err := wjs.KeyValue(ctx, streams.QueuesBucket)
			if err != nil {
				return err
			}
			_, err = kv.Put(ctx, "default", []byte("forged"))
			return err
		}},
		{"$KV." + streams.NamespacesBucket + ".forged", func(ctx context.Context) error {
			kv, err := wjs.KeyValue(ctx, streams.NamespacesBucket)
			if err != nil {
				return err
			}
			_, err = kv.Put(ctx, "forged", []byte("forged"))
			return err
		}},
	}
	var wg sync.WaitGroup
	for _, r := range refused {
		wg.Go(func() {
			// The server answers nothing: the call ends at its deadline.
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			if err := r.call(ctx); err == nil {
				t.Errorf("%s: no error", r.subject)
			}
		})
	}
	wg.Wait()
	for _, r := range refused {
		v.wait(t, fmt.Sprintf("Publish to %q", r.subject))
	}
	if _, err := sys.js.Stream(ctx, "FORGED"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("forged stream: %v", err)
	}
	if _, err := sys.js.Consumer(ctx, streams.EventsStream, "forged"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("forged consumer: %v", err)
	}
	if _, err := sys.js.Consumer(ctx, queue, run); err != nil {
		t.Fatalf("run consumer: %v", err)
	}
	events, err := sys.js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if subj := events.CachedInfo().Config.Subjects; len(subj) != 3 || events.CachedInfo().State.Msgs == 0 {
		t.Fatalf("event log: %q, %+v", subj, events.CachedInfo().State)
	}
	if still, err := qs.GetLastMsgForSubject(ctx, nobody); err != nil || still.Sequence != item.Sequence {
		t.Fatalf("the work item at %d after the purge: %+v, %v", item.Sequence, still, err)
	}
	rec, err := testkit.StoreOf(t, sys.client).Queue(ctx, "default")
	if err != nil || rec.Name != "default" {
		t.Fatalf("queue record: %+v, %v", rec, err)
	}
	nss, err := sys.js.KeyValue(ctx, streams.NamespacesBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nss.Get(ctx, "forged"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("forged namespace: %v", err)
	}
}

// The configuration in docs/security.md is the permissions the embedded
// server gives, as nats-server reads it.
func TestSecurityDocMatchesPermissions(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(doc), "```conf\n")
	block, _, ok2 := strings.Cut(block, "```")
	if !ok || !ok2 {
		t.Fatal("no ```conf block in docs/security.md")
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(opts.Users) != 3 {
		t.Fatalf("%d users", len(opts.Users))
	}
	for _, u := range opts.Users {
		want := jetflow.NATSPermissions(u.Username)
		if want == nil {
			t.Fatalf("user %s: no such role", u.Username)
		}
		if d := cmp.Diff(want, u.Permissions); d != "" {
			t.Errorf("user %s (-code +doc):\n%s", u.Username, d)
		}
	}
}

// AddNATSWorkers adds a namespace's worker user once, keeps it in the
// file (owner only), and refuses a name that is not a namespace's.
func TestAddNATSWorkers(t *testing.T) {
	path := filepath.Join(t.TempDir(), jetflow.NATSUsersFile)
	users, _, err := jetflow.LoadOrCreateNATSUsers(path)
	if err != nil {
		t.Fatal(err)
	}
	users, added, err := jetflow.AddNATSWorkers(path, users, []string{"billing", "ops"})
	if err != nil || strings.Join(added, ",") != "worker-billing,worker-ops" || len(users) != 5 {
		t.Fatalf("added %v, users %d: %v", added, len(users), err)
	}
	again, _, err := jetflow.LoadOrCreateNATSUsers(path)
	if err != nil || len(again) != 5 || again[3].Namespace != "billing" || again[3].Password != users[3].Password || again[3].Role != jetflow.NATSRoleWorker {
		t.Fatalf("read again: %+v, %v", again, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("file mode: %v, %v", fi.Mode(), err)
	}
	if _, added, err := jetflow.AddNATSWorkers(path, again, []string{"ops", "billing"}); err != nil || len(added) != 0 {
		t.Fatalf("added again: %v, %v", added, err)
	}
	if _, _, err := jetflow.AddNATSWorkers(path, again, []string{"no way"}); err == nil || !strings.Contains(err.Error(), `"no way" is not a namespace name`) {
		t.Fatalf("a bad namespace: %v", err)
	}
}
