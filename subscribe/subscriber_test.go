package subscribe_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
	"github.com/jetflow/jetflow/subscribe"
)

// env is a server with jetflow's streams, a client, and a worker that runs
// "ok" (succeeds) and any other type (fails for good when the payload says
// so).
type env struct {
	t      *testing.T
	ctx    context.Context
	nc     *nats.Conn
	js     jetstream.JetStream
	client *jetflow.Client
}

type work struct {
	Fail bool `json:"fail"`
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := testkit.Server(t)
	nc := testkit.Conn(t, srv)
	ctx := testkit.Ctx(t)
	client, err := jetflow.NewClient(ctx, nc, jetflow.ClientOptions{Name: "test", Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, nc: nc, js: js, client: client}
}

// startWorker runs jobs of the given types: they fail for good when their
// payload says so, else succeed.
func (e *env) startWorker(types ...string) {
	w := jetflow.NewWorker(e.client, jetflow.WorkerConfig{Concurrency: 8, Logger: testkit.Logger(e.t)})
	for _, typ := range types {
		jetflow.Register(w, typ, func(ctx context.Context, job *jetflow.Job[work]) (string, error) {
			if job.Payload.Fail {
				return "", jetflow.Permanent(errors.New("boom"))
			}
			return "done", nil
		})
	}
	if err := w.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { w.Stop(context.Background()) })
}

func (e *env) submit(typ string, fail bool, opts ...jetflow.SubmitOption) *jetflow.JobInfo {
	e.t.Helper()
	j, err := e.client.Submit(e.ctx, typ, work{Fail: fail}, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// waitEnded waits for every job to end and returns them as they ended.
func (e *env) waitEnded(jobs []*jetflow.JobInfo) []*jetflow.JobInfo {
	e.t.Helper()
	out := make([]*jetflow.JobInfo, len(jobs))
	for i, j := range jobs {
		ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
		done, err := e.client.Wait(ctx, j.ID)
		cancel()
		if err != nil {
			e.t.Fatalf("job %s: %v", j.ID, err)
		}
		out[i] = done
	}
	return out
}

// settled reports whether a durable has nothing left to deliver and nothing
// delivered that is not acked: no event can come to it any more.
func (e *env) settled(durable string) error {
	cons, err := e.js.Consumer(e.ctx, streams.EventsStream, subscribe.ConsumerName(durable))
	if err != nil {
		return err
	}
	info, err := cons.Info(e.ctx)
	if err != nil {
		return err
	}
	if info.NumPending != 0 || info.NumAckPending != 0 {
		return fmt.Errorf("durable %s: %d pending, %d delivered and not acked", durable, info.NumPending, info.NumAckPending)
	}
	return nil
}

// recorder counts the events a handler accepted (returned nil for, which
// the subscriber acks), by stream sequence.
type recorder struct {
	mu   sync.Mutex
	seen map[uint64]int
	msgs map[uint64]*message.Message
	errs []error
}

func newRecorder() *recorder {
	return &recorder{seen: map[uint64]int{}, msgs: map[uint64]*message.Message{}}
}

func (r *recorder) add(msg *message.Message) (seq uint64, n int) {
	ev, err := subscribe.Event(msg)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs = append(r.errs, err)
		return 0, len(r.seen)
	}
	r.seen[ev.Seq]++
	r.msgs[ev.Seq] = msg
	return ev.Seq, len(r.seen)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *recorder) snapshot() map[uint64]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) > 0 {
		panic(fmt.Sprint("events that did not decode: ", r.errs))
	}
	out := make(map[uint64]int, len(r.seen))
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}

// runRouter runs a watermill router with one handler on sub until the test
// ends or it is closed; ctx ends its Run.
type running struct {
	router *message.Router
	done   chan error
}

func runRouter(t *testing.T, ctx context.Context, handlers map[string]message.Subscriber, fn func(name string) message.NoPublishHandlerFunc) *running {
	t.Helper()
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: time.Minute}, watermill.NopLogger{})
	if err != nil {
		t.Fatal(err)
	}
	for name, sub := range handlers {
		router.AddConsumerHandler(name, subscribe.Topic, sub, fn(name))
	}
	r := &running{router: router, done: make(chan error, 1)}
	go func() { r.done <- router.Run(ctx) }()
	t.Cleanup(func() { router.Close(); <-r.done })
	select {
	case <-router.Running():
	case err := <-r.done:
		t.Fatalf("router: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("router did not start")
	}
	return r
}

func (r *running) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("router: %v", err)
		}
		r.done <- nil
	case <-time.After(2 * time.Minute):
		t.Fatal("router did not stop")
	}
}

// closeSignal tells when its router starts closing: a router closes its
// subscribers first.
type closeSignal struct {
	*subscribe.Subscriber
	called chan struct{}
	once   sync.Once
}

func (c *closeSignal) Close() error {
	c.once.Do(func() { close(c.called) })
	return c.Subscriber.Close()
}

func newSubscriber(t *testing.T, nc *nats.Conn, cfg subscribe.Config) *subscribe.Subscriber {
	t.Helper()
	sub, err := subscribe.NewSubscriber(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	return sub
}

// A durable subscriber is stopped twice while events are appended: once by
// closing its router while a handler holds an event and the client holds
// more, once by cancelling its router's context. Its successors, on the
// same durable, get the rest: at the end every event of the log was
// accepted by exactly one handler, once. The AckWait is long, so the test
// also shows that the events held by a stopped subscriber came back at
// once (nacked), not after AckWait.
func TestResumesWithoutLossOrRepeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("ok", "bad")
	const durable, jobs = "audit", 120
	const stop1, stop2 = 60, 180 // events accepted when each subscriber is stopped
	cfg := subscribe.Config{Durable: durable, AckWait: 2 * time.Minute}

	var submitted []*jetflow.JobInfo
	for i := range jobs / 2 { // the rest are submitted while the first subscriber runs
		submitted = append(submitted, e.submit([]string{"ok", "bad"}[i%2], i%2 == 1))
	}

	// 1: closed while its handler holds event number stop1.
	first := newRecorder()
	held, release := make(chan struct{}), make(chan struct{})
	sub1 := newSubscriber(t, e.nc, cfg)
	closing := &closeSignal{Subscriber: sub1, called: make(chan struct{})}
	r1 := runRouter(t, context.Background(), map[string]message.Subscriber{"audit": closing}, func(string) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error {
			if _, n := first.add(msg); n == stop1 {
				close(held)
				<-release
			}
			return nil
		}
	})
	for i := jobs / 2; i < jobs; i++ {
		submitted = append(submitted, e.submit([]string{"ok", "bad"}[i%2], i%2 == 1))
	}
	<-held
	// Events wait in the client's buffer behind the one in hand.
	testkit.WaitFor(t, 30*time.Second, func() error {
		cons, err := e.js.Consumer(e.ctx, streams.EventsStream, subscribe.ConsumerName(durable))
		if err != nil {
			return err
		}
		info, err := cons.Info(e.ctx)
		if err != nil {
			return err
		}
		if info.NumAckPending < 2 {
			return fmt.Errorf("%d delivered and not acked", info.NumAckPending)
		}
		return nil
	})
	closed := make(chan error, 1)
	go func() { closed <- r1.router.Close() }()
	<-closing.called
	close(release) // the handler returns while its router closes: its ack must still be sent
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	r1.wait(t)
	if err := sub1.Close(); err != nil {
		t.Fatal(err)
	}
	if !e.nc.IsConnected() {
		t.Fatal("closing the subscriber closed the connection")
	}
	if n := first.count(); n != stop1 {
		t.Fatalf("first subscriber accepted %d events after it stopped at %d", n, stop1)
	}

	// 2: stopped by cancelling its router's context, on the same connection.
	second := newRecorder()
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	reached := make(chan struct{})
	var once sync.Once
	sub2 := newSubscriber(t, e.nc, cfg)
	r2 := runRouter(t, ctx2, map[string]message.Subscriber{"audit": sub2}, func(string) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error {
			if _, n := second.add(msg); n >= stop2-stop1 {
				once.Do(func() { close(reached) })
			}
			return nil
		}
	})
	select {
	case <-reached:
	case <-time.After(60 * time.Second):
		t.Fatalf("second subscriber accepted only %d events", second.count())
	}
	cancel2()
	r2.wait(t)
	if err := sub2.Close(); err != nil {
		t.Fatal(err)
	}

	// 3: the rest.
	third := newRecorder()
	sub3 := newSubscriber(t, e.nc, cfg)
	r3 := runRouter(t, context.Background(), map[string]message.Subscriber{"audit": sub3}, func(string) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error { third.add(msg); return nil }
	})
	e.waitEnded(submitted)
	stream, err := e.js.Stream(e.ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := info.State.LastSeq
	if info.State.FirstSeq != 1 || info.State.Msgs != last || last < 3*jobs {
		t.Fatalf("stream state %+v: want events 1..n, at least %d", info.State, 3*jobs)
	}
	testkit.WaitFor(t, 60*time.Second, func() error {
		if n := first.count() + second.count() + third.count(); uint64(n) < last {
			return fmt.Errorf("%d of %d events accepted", n, last)
		}
		return e.settled(durable)
	})
	if err := r3.router.Close(); err != nil {
		t.Fatal(err)
	}
	r3.wait(t)

	counts := map[uint64]int{}
	for i, rec := range []*recorder{first, second, third} {
		for seq, n := range rec.snapshot() {
			if n != 1 {
				t.Errorf("subscriber %d accepted event %d %d times", i+1, seq, n)
			}
			counts[seq] += n
		}
	}
	for seq := uint64(1); seq <= last; seq++ {
		if counts[seq] != 1 {
			t.Errorf("event %d accepted %d times", seq, counts[seq])
		}
	}
	if uint64(len(counts)) != last {
		t.Errorf("%d events accepted, the log has %d", len(counts), last)
	}
	t.Logf("events: %d (%d, %d, %d by the three subscribers)", last, first.count(), second.count(), third.count())
}

// Each filter field, alone and together, against what the log says: a
// subscriber gets exactly the events its filter selects, with their job's
// namespace, queue and type as metadata.
func TestFilter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("x.one", "y")

	type spec struct {
		typ, ns, queue string
		fail           bool
	}
	var specs []spec
	for _, typ := range []string{"x.one", "y"} {
		for _, ns := range []string{"a", "b"} {
			for _, q := range []string{"default", "q2"} {
				for _, fail := range []bool{false, true} {
					specs = append(specs, spec{typ, ns, q, fail})
				}
			}
		}
	}
	var jobs []*jetflow.JobInfo
	for _, s := range specs {
		jobs = append(jobs, e.submit(s.typ, s.fail, jetflow.Namespace(s.ns), jetflow.Queue(s.queue)))
	}
	one := jobs[5]

	filters := map[string]subscribe.Filter{
		"all":        {},
		"ns":         {Namespace: "a"},
		"queue":      {Queue: "q2"},
		"type":       {Type: "x.one"},
		"job":        {JobID: one.ID},
		"events":     {Events: []string{"job.submitted", "job.succeeded"}},
		"failed-a-x": {Namespace: "a", Type: "x.one", Events: []string{"job.failed"}},
	}
	subs := map[string]message.Subscriber{}
	recs := map[string]*recorder{}
	for name, f := range filters {
		subs[name] = newSubscriber(t, e.nc, subscribe.Config{Durable: name, Filter: f})
		recs[name] = newRecorder()
	}
	r := runRouter(t, context.Background(), subs, func(name string) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error { recs[name].add(msg); return nil }
	})

	ended := e.waitEnded(jobs)
	type event struct {
		job *jetflow.JobInfo
		ev  *jetflow.EventInfo
	}
	var log []event
	for _, j := range ended {
		evs, err := e.client.Events(e.ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			log = append(log, event{j, ev})
		}
	}
	matches := func(f subscribe.Filter, x event) bool {
		return (f.Namespace == "" || f.Namespace == x.job.Namespace) && (f.Queue == "" || f.Queue == x.job.Queue) &&
			(f.Type == "" || f.Type == x.job.Type) && (f.JobID == "" || f.JobID == x.job.ID) &&
			(len(f.Events) == 0 || slices.Contains(f.Events, x.ev.Type))
	}
	for name, f := range filters {
		want := map[uint64]event{}
		for _, x := range log {
			if matches(f, x) {
				want[x.ev.Seq] = x
			}
		}
		if len(want) == 0 {
			t.Fatalf("%s: the test selects no event", name)
		}
		testkit.WaitFor(t, 60*time.Second, func() error {
			if n := recs[name].count(); n < len(want) {
				return fmt.Errorf("%s: %d of %d events", name, n, len(want))
			}
			return e.settled(name)
		})
		got := recs[name].snapshot()
		var extra []uint64
		for seq, n := range got {
			if _, ok := want[seq]; !ok {
				extra = append(extra, seq)
			} else if n != 1 {
				t.Errorf("%s: event %d delivered %d times", name, seq, n)
			}
		}
		sort.Slice(extra, func(i, j int) bool { return extra[i] < extra[j] })
		if len(extra) > 0 || len(got) != len(want) {
			t.Errorf("%s: got %d events, want %d; not selected: %v", name, len(got), len(want), extra)
		}
		// What a handler sees is what the SDK returns for the event, and the job's place.
		for seq, x := range want {
			msg := recs[name].msgs[seq]
			if msg == nil {
				continue
			}
			ev, err := subscribe.Event(msg)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(x.ev, ev); d != "" {
				t.Errorf("%s: event %d differs from Client.Events's (-want +got):\n%s", name, seq, d)
			}
			md := msg.Metadata
			if md.Get(subscribe.NamespaceKey) != x.job.Namespace || md.Get(subscribe.QueueKey) != x.job.Queue ||
				md.Get(subscribe.JobTypeKey) != x.job.Type || msg.UUID != fmt.Sprint(seq) {
				t.Errorf("%s: event %d: uuid %s, metadata %v; want job %s/%s/%s", name, seq, msg.UUID, md, x.job.Namespace, x.job.Queue, x.job.Type)
			}
		}
	}
	// The failures in namespace a of type x.one: one per queue, as job.failed with the handler's error.
	for _, msg := range recs["failed-a-x"].msgs {
		ev, _ := subscribe.Event(msg)
		if ev.Type != "job.failed" || ev.To != jetflow.Failed || ev.Error == nil || !strings.Contains(ev.Error.Message, "boom") {
			t.Errorf("failed-a-x: %+v", *ev)
		}
	}
	if n := len(recs["failed-a-x"].msgs); n != 2 {
		t.Errorf("failed-a-x: %d failures, want 2", n)
	}
	if err := r.router.Close(); err != nil {
		t.Fatal(err)
	}
}

// A new durable with DeliverNew starts after the events already in the log;
// one made before keeps its start when a later run asks for DeliverNew.
func TestDeliverNew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("ok")
	old := e.waitEnded([]*jetflow.JobInfo{e.submit("ok", false)})[0]

	recNew, recAll := newRecorder(), newRecorder()
	subNew := newSubscriber(t, e.nc, subscribe.Config{Durable: "new", DeliverNew: true})
	subAll := newSubscriber(t, e.nc, subscribe.Config{Durable: "all"})
	r := runRouter(t, context.Background(), map[string]message.Subscriber{"new": subNew, "all": subAll}, func(name string) message.NoPublishHandlerFunc {
		return func(msg *message.Message) error {
			map[string]*recorder{"new": recNew, "all": recAll}[name].add(msg)
			return nil
		}
	})
	later := e.waitEnded([]*jetflow.JobInfo{e.submit("ok", false)})[0]
	testkit.WaitFor(t, 30*time.Second, func() error {
		if n, want := recAll.count(), old.Events+later.Events; n < want {
			return fmt.Errorf("all: %d of %d events", n, want)
		}
		if n := recNew.count(); n < later.Events {
			return fmt.Errorf("new: %d of %d events", n, later.Events)
		}
		return errors.Join(e.settled("all"), e.settled("new"))
	})
	for seq := range recNew.snapshot() {
		if seq <= old.Seq {
			t.Errorf("DeliverNew delivered event %d, from before it was made", seq)
		}
	}
	if n := recNew.count(); n != later.Events {
		t.Errorf("DeliverNew: %d events, want %d", n, later.Events)
	}
	if err := r.router.Close(); err != nil {
		t.Fatal(err)
	}
	// A restart of "all" that asks for DeliverNew keeps its place (nothing more to deliver) instead of failing.
	again := newSubscriber(t, e.nc, subscribe.Config{Durable: "all", DeliverNew: true})
	ch, err := again.Subscribe(e.ctx, subscribe.Topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
	for msg := range ch {
		t.Errorf("event %s delivered again", msg.UUID)
	}
}

// The subscriber reads jetflow's stream; it never makes it.
func TestNeverCreatesTheStream(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	nc := testkit.Conn(t, srv)
	sub := newSubscriber(t, nc, subscribe.Config{Durable: "early"})
	if _, err := sub.Subscribe(testkit.Ctx(t), subscribe.Topic); err == nil {
		t.Fatal("subscribed without jetflow's event stream")
	}
	js, _ := jetstream.New(nc)
	if _, err := js.Stream(testkit.Ctx(t), streams.EventsStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatalf("stream lookup: %v; want not found", err)
	}
}

func TestConfigRefused(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	nc := testkit.Conn(t, srv)
	for _, c := range []struct {
		name string
		cfg  subscribe.Config
		want string
	}{
		{"no durable", subscribe.Config{}, "durable"},
		{"dotted durable", subscribe.Config{Durable: "a.b"}, "durable"},
		{"long durable", subscribe.Config{Durable: strings.Repeat("d", 65)}, "durable"},
		{"negative ack wait", subscribe.Config{Durable: "d", AckWait: -time.Second}, "AckWait"},
		{"namespace", subscribe.Config{Durable: "d", Filter: subscribe.Filter{Namespace: "a.b"}}, "namespace"},
		{"queue", subscribe.Config{Durable: "d", Filter: subscribe.Filter{Queue: "q*"}}, "queue"},
		{"type", subscribe.Config{Durable: "d", Filter: subscribe.Filter{Type: "a>b"}}, "job type"},
		{"job id", subscribe.Config{Durable: "d", Filter: subscribe.Filter{JobID: "nope"}}, "job id"},
		{"event type", subscribe.Config{Durable: "d", Filter: subscribe.Filter{Events: []string{"failed"}}}, "event type"},
	} {
		if _, err := subscribe.NewSubscriber(nc, c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.want)
		}
	}
	sub := newSubscriber(t, nc, subscribe.Config{Durable: "d"})
	if _, err := sub.Subscribe(testkit.Ctx(t), "jetflow.ev.>"); err == nil {
		t.Error("subscribed to a topic other than subscribe.Topic")
	}
	sub.Close()
	if _, err := sub.Subscribe(testkit.Ctx(t), subscribe.Topic); !errors.Is(err, subscribe.ErrClosed) {
		t.Errorf("subscribe after close: %v", err)
	}
}

func TestFilterSubject(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		f    subscribe.Filter
		want string
	}{
		{subscribe.Filter{}, "jetflow.ev.*.*.*.*"},
		{subscribe.Filter{Namespace: "billing", Events: []string{"job.failed"}}, "jetflow.ev.billing.*.*.*"},
		{subscribe.Filter{Namespace: "@global", Queue: "q", Type: "demo.echo"}, "jetflow.ev.~40global.q.demo~2Eecho.*"},
		{subscribe.Filter{JobID: "01JC0000000000000000000000"}, "jetflow.ev.*.*.*.01JC0000000000000000000000"},
	} {
		if got := c.f.Subject(); got != c.want {
			t.Errorf("%+v: %s, want %s", c.f, got, c.want)
		}
	}
	// A subject a job's events are appended to matches the filter of its own coordinates.
	subj := streams.EventSubject("@global", "q", "demo.echo", "01JC0000000000000000000000")
	f := subscribe.Filter{Namespace: "@global", Queue: "q", Type: "demo.echo", JobID: "01JC0000000000000000000000"}
	if f.Subject() != subj {
		t.Errorf("filter %s, event subject %s", f.Subject(), subj)
	}
}

func TestEventRefusesWhatIsNotAnEvent(t *testing.T) {
	t.Parallel()
	if _, err := subscribe.Event(message.NewMessage("7", []byte("not msgpack"))); !errors.Is(err, streams.ErrBadRecord) {
		t.Errorf("bad payload: %v", err)
	}
	data, _ := streams.EncodeEvent(&domain.Event{Type: domain.EvFailed, JobID: "01JC0000000000000000000000", Time: time.Now()})
	if _, err := subscribe.Event(message.NewMessage("a-uuid", data)); err == nil {
		t.Error("a UUID that is no sequence was taken")
	}
	ev, err := subscribe.Event(message.NewMessage("7", data))
	if err != nil || ev.Seq != 7 || ev.Type != "job.failed" {
		t.Errorf("Event: %+v, %v", ev, err)
	}
}
