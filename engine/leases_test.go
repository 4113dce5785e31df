package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// countEvents counts the events of one type in a job's history.
func countEvents(evs []*domain.Event, typ string) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// deadRuntime starts a runtime of one job type on its own connection whose
// handler blocks, waits until it runs job id, and then cuts its connection:
// a worker process that died (no more renewals, no more heartbeats), with
// no other worker of the type anywhere.
func deadRuntime(h *harness, name, jobType string, id string) {
	h.t.Helper()
	nc := testkit.Conn(h.t, h.srv)
	st := testkit.Store(h.t, nc, name)
	rt, err := engine.NewRuntime(st, engine.RuntimeConfig{WorkerID: name, Lease: time.Second, Concurrency: 1,
		ShutdownGrace: 100 * time.Millisecond, Log: testkit.Logger(h.t),
		Handlers: map[string]engine.Handler{jobType: func(ctx context.Context, _ *engine.Task) ([]byte, error) {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		}}})
	if err != nil {
		h.t.Fatal(err)
	}
	if err := rt.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.waitState(id, domain.StateRunning, 10*time.Second)
	nc.Close()
	h.t.Cleanup(func() { rt.Stop(context.Background()) })
}

// A worker that dies with no other worker of its type left: its job does
// not stay running. The leader's sweeper requeues it within the lease,
// the grace and a sweep interval, and a worker that comes later runs it.
func TestLeaseSweeperRequeuesWithNoWorkerLeft(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.submit(commands.SubmitRequest{Type: "lone"}).Job.ID
	deadRuntime(h, "w-dead", "lone", id)
	died := time.Now()
	j := h.waitState(id, domain.StateQueued, 20*time.Second)
	// lease 1s + grace 2s + sweep interval 3s, and room for a loaded machine.
	if took := time.Since(died); took > 15*time.Second {
		t.Errorf("requeued %s after the worker died", took)
	}
	if j.LeaseRequeues != 1 || j.Worker != "" || j.LeaseItem != 0 {
		t.Fatalf("requeued job %+v", j)
	}
	evs := h.events(id)
	h.wantEvents(id, domain.EvSubmitted, domain.EvStarted, domain.EvLeaseExpiredRequeue)
	if last := evs[len(evs)-1]; last.Actor != "engine" {
		t.Fatalf("lease expiry written by %q, want the engine", last.Actor)
	}
	h.runtime(engine.RuntimeConfig{WorkerID: "w-new", Lease: time.Second,
		Handlers: map[string]engine.Handler{"lone": func(context.Context, *engine.Task) ([]byte, error) { return []byte(`"ok"`), nil }}})
	h.waitState(id, domain.StateSucceeded, 20*time.Second)
	h.wantEvents(id, domain.EvSubmitted, domain.EvStarted, domain.EvLeaseExpiredRequeue, domain.EvStarted, domain.EvSucceeded)
	h.verify()
}

// With its requeue budget spent, a job whose worker died fails
// (job.lease_expired), again with no worker left to claim it.
func TestLeaseExpiredFailsWithNoWorkerLeft(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	id := h.submit(commands.SubmitRequest{Type: "lone2", MaxLeaseRequeues: ptr(0)}).Job.ID
	deadRuntime(h, "w-dead2", "lone2", id)
	j := h.waitState(id, domain.StateFailed, 20*time.Second)
	if j.Error == nil || j.Error.Code != "LEASE_EXPIRED" {
		t.Fatalf("failed job %+v", j)
	}
	h.wantEvents(id, domain.EvSubmitted, domain.EvStarted, domain.EvLeaseExpired)
	h.verify()
}

// A remote claim of a job whose item is delivered again while its holder
// is alive (its heartbeats list the job, as after a server restart) does
// not take the lease: the item goes back to wait. Once the holder stops
// beating, the lease runs out and the next claim takes the job.
func TestRedeliveryOfALiveHoldersJobWaits(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "client")
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, srv), "gw"), time.Second, testkit.Logger(t))
	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "held"})
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Job.ID
	if c, err := rm.Claim(ctx, "alive", nil, []string{"held"}, 5*time.Second, ""); err != nil || c.Job == nil || c.Job.ID != id {
		t.Fatalf("claim: %v %+v", err, c.Job)
	}
	if _, err := rm.Start(ctx, id, "alive"); err != nil {
		t.Fatal(err)
	}
	// "alive" beats, listing the job, but its work item's ack deadline is
	// never extended: the server delivers the item again after a second.
	beat := func() {
		if err := st.Workers.Put(ctx, &domain.WorkerRecord{ID: "alive", Kind: domain.WorkerHTTP, Claims: []string{id}}); err != nil {
			t.Error(err)
		}
	}
	beat()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(300 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				beat()
			}
		}
	}()
	for i := 0; i < 3; i++ {
		if c, err := rm.Claim(ctx, "other", nil, []string{"held"}, 2*time.Second, ""); err != nil || c.Job != nil {
			close(stop)
			t.Fatalf("claim %d while the holder beats: %v %+v", i, err, c.Job)
		}
	}
	close(stop)
	wg.Wait()
	snap, err := st.Record(ctx, id)
	if err != nil || snap.Job.State != domain.StateRunning || snap.Job.Worker != "alive" || snap.Job.LeaseRequeues != 0 {
		t.Fatalf("job while its holder beats: %v %+v", err, snap.Job)
	}
	// The holder is gone now: its lease runs out a second (and the grace)
	// after its last beat.
	var c engine.Snapshot
	testkit.WaitFor(t, 20*time.Second, func() error {
		var err error
		c, err = rm.Claim(ctx, "other", nil, []string{"held"}, time.Second, "")
		if err != nil {
			return err
		}
		if c.Job == nil {
			return fmt.Errorf("not claimed yet")
		}
		return nil
	})
	if c.Job.ID != id || c.Job.Worker != "other" || c.Job.LeaseRequeues != 1 {
		t.Fatalf("claimed after the holder stopped %+v", c.Job)
	}
	var evs []*domain.Event
	if err := st.History(ctx, id, 0, false, func(e *domain.Event) error { evs = append(evs, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(types(evs)); got != fmt.Sprint([]string{domain.EvSubmitted, domain.EvClaimed, domain.EvStarted,
		domain.EvLeaseExpiredRequeue, domain.EvClaimed}) {
		t.Fatalf("events %s", got)
	}
}

// Progress is a sign of life: a holder with no heartbeat record keeps its
// lease while it reports progress, and loses it once it stops.
func TestProgressRenewsTheLease(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "client")
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, srv), "gw"), time.Second, testkit.Logger(t))
	sweeper := maintenance.NewLeaseSweeper(engine.Internal(testkit.Store(t, testkit.Conn(t, srv), "sweeper")), maintenance.LeaseSweeperConfig{Log: testkit.Logger(t)})
	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "prog"})
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Job.ID
	if c, err := rm.Claim(ctx, "quiet", nil, []string{"prog"}, 5*time.Second, ""); err != nil || c.Job == nil {
		t.Fatalf("claim: %v", err)
	}
	if _, err := rm.Start(ctx, id, "quiet"); err != nil {
		t.Fatal(err)
	}
	for i := int64(1); i <= 12; i++ {
		if _, err := rm.Progress(ctx, id, "quiet", domain.Progress{Current: i, Total: 12}); err != nil {
			t.Fatal(err)
		}
		if n, err := sweeper.Sweep(ctx); err != nil || n != 0 {
			t.Fatalf("sweep %d while the holder reports progress: %d %v", i, n, err)
		}
		time.Sleep(400 * time.Millisecond) // the holder's cadence, not a wait for a condition
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		if n, err := sweeper.Sweep(ctx); err != nil || n != 1 {
			return fmt.Errorf("swept %d (%v)", n, err)
		}
		return nil
	})
	snap, err := st.Record(ctx, id)
	if err != nil || snap.Job.State != domain.StateQueued || snap.Job.LeaseRequeues != 1 {
		t.Fatalf("after the holder went quiet: %v %+v", err, snap.Job)
	}
}

// Several sweepers at once (two engines that both believe they lead)
// write off each lapsed lease exactly once: the write is revision-checked.
func TestSweepersRacingWriteOffOnce(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "client")
	rm := engine.NewRemote(testkit.Store(t, testkit.Conn(t, srv), "gw"), time.Second, testkit.Logger(t))
	const n = 20
	ids := map[string]bool{}
	for i := 0; i < n; i++ {
		sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "race"})
		if err != nil {
			t.Fatal(err)
		}
		ids[sub.Job.ID] = true
	}
	for i := 0; i < n; i++ {
		c, err := rm.Claim(ctx, fmt.Sprintf("gone-%d", i), nil, []string{"race"}, 5*time.Second, "")
		if err != nil || c.Job == nil {
			t.Fatalf("claim %d: %v", i, err)
		}
	}
	// No heartbeat ever: every lease runs out a second (and the grace)
	// after its claim, all at about the same moment.
	sweepers := []*maintenance.LeaseSweeper{
		maintenance.NewLeaseSweeper(engine.Internal(testkit.Store(t, testkit.Conn(t, srv), "e1")), maintenance.LeaseSweeperConfig{Log: testkit.Logger(t)}),
		maintenance.NewLeaseSweeper(engine.Internal(testkit.Store(t, testkit.Conn(t, srv), "e2")), maintenance.LeaseSweeperConfig{Log: testkit.Logger(t)}),
		maintenance.NewLeaseSweeper(engine.Internal(testkit.Store(t, testkit.Conn(t, srv), "e3")), maintenance.LeaseSweeperConfig{Log: testkit.Logger(t)}),
	}
	total := 0
	testkit.WaitFor(t, 20*time.Second, func() error {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, s := range sweepers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k, err := s.Sweep(ctx)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				total += k
				mu.Unlock()
			}()
		}
		wg.Wait()
		if total < n {
			return fmt.Errorf("%d of %d written off", total, n)
		}
		return nil
	})
	if total != n {
		t.Fatalf("%d write-offs for %d lapsed leases", total, n)
	}
	for id := range ids {
		var evs []*domain.Event
		if err := st.History(ctx, id, 0, false, func(e *domain.Event) error { evs = append(evs, e); return nil }); err != nil {
			t.Fatal(err)
		}
		if c := countEvents(evs, domain.EvLeaseExpiredRequeue); c != 1 {
			t.Fatalf("job %s: %d lease expiries: %v", id, c, types(evs))
		}
	}
}

// A work item stored at or below its consumer's ack floor (a consumer that
// counts it as acked: seen after unclean restarts of nats-server) is never
// delivered again; the sweeper puts it back once it has seen it so twice.
// Made here with a consumer that starts past the item.
func TestOrphanedItemIsPutBack(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "client")
	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "orph", Queue: "oq"})
	if err != nil {
		t.Fatal(err)
	}
	qs, err := st.JS.Stream(ctx, streams.QueueStream("oq"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := qs.Info(ctx)
	if err != nil || info.State.Msgs != 1 {
		t.Fatalf("queue %+v %v", info, err)
	}
	item := info.State.LastSeq
	cons, err := engine.Internal(st).EnsureRunConsumer(ctx, "oq", "orph", time.Second, 100)
	if err != nil {
		t.Fatal(err)
	}
	resetPast(t, st, streams.QueueStream("oq"), engine.ConsumerName("orph"), item)
	if batch, err := cons.FetchNoWait(1); err != nil || len(collect(batch.Messages())) != 0 {
		t.Fatalf("the orphan was delivered: %v", err)
	}
	rescueOne(t, srv)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	msgs := collect(batch.Messages())
	if len(msgs) != 1 {
		t.Fatalf("fetched %d after the rescue", len(msgs))
	}
	wi, err := streams.DecodeWorkItem(msgs[0].Data())
	if err != nil || wi.Job.ID != sub.Job.ID {
		t.Fatalf("put back %v %v", wi, err)
	}
	if _, err := qs.GetMsg(ctx, item); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the orphan is still stored: %v", err)
	}
}

// A fired schedule stranded below the promoter's ack floor (as after an
// unclean restart: a long sync-always soak left 63 such) is put back as a
// worker's item is, so that the promoter takes it: its job would otherwise
// stay scheduled for good.
func TestStrandedDueItemIsPutBack(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	st := testkit.Store(t, testkit.Conn(t, srv), "client")
	const q = "dq"
	runAt := time.Now().Add(time.Second)
	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "later", Queue: q, RunAt: &runAt})
	if err != nil || sub.Job.State != domain.StateScheduled {
		t.Fatalf("submit: %v %+v", err, sub.Job)
	}
	qs, err := st.JS.Stream(ctx, streams.QueueStream(q))
	if err != nil {
		t.Fatal(err)
	}
	// The promoter's consumer, with no promoter behind it: the schedule
	// fires onto the due subject and stays there.
	cons, err := st.JS.CreateOrUpdateConsumer(ctx, streams.QueueStream(q), jetstream.ConsumerConfig{
		Durable: maintenance.PromoterConsumer, FilterSubject: streams.DueSubject(q), AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	var due uint64
	testkit.WaitFor(t, 20*time.Second, func() error {
		m, err := qs.GetLastMsgForSubject(ctx, streams.DueSubject(q))
		if err != nil {
			return testkit.Errorf("no fired schedule yet: %v", err)
		}
		due = m.Sequence
		return nil
	})
	resetPast(t, st, streams.QueueStream(q), maintenance.PromoterConsumer, due)
	rescueOne(t, srv)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	msgs := collect(batch.Messages())
	if len(msgs) != 1 || msgs[0].Subject() != streams.DueSubject(q) {
		t.Fatalf("fetched %d after the rescue", len(msgs))
	}
	if wi, err := streams.DecodeWorkItem(msgs[0].Data()); err != nil || wi.Job.ID != sub.Job.ID {
		t.Fatalf("put back %v %v", wi, err)
	}
}

// resetPast moves a consumer past the item at seq, as if it had been
// acked: the item is stranded below its ack floor.
func resetPast(t *testing.T, st *engine.Store, stream, consumer string, seq uint64) {
	t.Helper()
	reply, err := st.NC.Request(fmt.Sprintf("$JS.API.CONSUMER.RESET.%s.%s", stream, consumer),
		fmt.Appendf(nil, `{"seq":%d}`, seq+1), 5*time.Second)
	if err != nil || !strings.Contains(string(reply.Data), `"reset_seq"`) {
		t.Fatalf("reset the consumer: %v %s", err, reply.Data)
	}
}

// rescueOne sweeps, as the leader's lease sweeper does, until it has put
// back a stranded item (it does so once it has seen it twice), and fails
// unless exactly one was.
func rescueOne(t *testing.T, srv *server.Server) {
	t.Helper()
	ctx := testkit.Ctx(t)
	sweeper := maintenance.NewLeaseSweeper(engine.Internal(testkit.Store(t, testkit.Conn(t, srv), "sweeper")), maintenance.LeaseSweeperConfig{Log: testkit.Logger(t)})
	for i := 0; i < 10 && sweeper.Rescued() == 0; i++ {
		if _, err := sweeper.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if sweeper.Rescued() != 1 {
		t.Fatalf("rescued %d", sweeper.Rescued())
	}
}

func collect(ch <-chan jetstream.Msg) []jetstream.Msg {
	var out []jetstream.Msg
	for m := range ch {
		out = append(out, m)
	}
	return out
}
