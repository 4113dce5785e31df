package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkRawJobLoop is the limit jetflow's hot path is measured against:
// the fewest JetStream writes a job with a log, a projection and a work
// queue can make, with nothing of jetflow's around them. Per job, as the
// engine writes them (docs/architecture.md, "Data flow of one job"):
//
//	submit: its first event (expected last subject sequence 0), its record
//	        created (a KV put expecting none), its work item;
//	work:   fetch the item, claim the record (expected revision), the
//	        started and succeeded events, the record's last update, ack.
//
// That is 7 stored writes and an ack. 16 submitters each submit 64 jobs at
// a time, 16 workers each take up to 64 at a time, concurrently (at most
// 2x16x64 jobs submitted and not done), each step's writes pipelined. The
// log's appends of a step go one by one (plain) or as one atomic batch
// (atomic: the group commit of `--sync always`, GroupCommit.atomic), under
// the server's fsync every second or before every acknowledgement (the
// records' bucket then persisting asynchronously, as jetflow's does). (The
// work step's two events go without an expected sequence.)
//
//	go test -run '^$' -bench RawJobLoop -benchtime 20000x ./streams/
//
// jetflow bench's processed jobs/s over this benchmark's jobs/s, same mode
// and sitting, is what the engine keeps of the limit.
func BenchmarkRawJobLoop(b *testing.B) {
	for _, always := range []bool{false, true} {
		for _, batched := range []bool{false, true} {
			name := map[bool]string{false: "sync1s", true: "syncalways"}[always] + "/" + map[bool]string{false: "plain", true: "atomic"}[batched]
			b.Run(name, func(b *testing.B) { rawJobLoop(b, always, batched) })
		}
	}
}

const (
	rawWorkers = 16
	rawBatch   = 64
)

// rawServer starts an in-process server with file storage, fsyncing
// before every acknowledgement (always) or every second, shut down when
// the benchmark ends.
func rawServer(b *testing.B, always bool) *server.Server {
	srv, err := server.NewServer(&server.Options{JetStream: true, StoreDir: b.TempDir(), DontListen: true,
		SyncAlways: always, SyncInterval: time.Second, NoLog: true, NoSigs: true})
	if err != nil {
		b.Fatal(err)
	}
	srv.Start()
	b.Cleanup(srv.Shutdown)
	if !srv.ReadyForConnections(10 * time.Second) {
		b.Fatal("server not ready")
	}
	return srv
}

func rawJobLoop(b *testing.B, always, batched bool) {
	srv := rawServer(b, always)
	conn := func() (*nats.Conn, jetstream.JetStream) {
		nc, err := nats.Connect("", nats.InProcessServer(srv))
		if err != nil {
			b.Fatal(err)
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
		if err != nil {
			b.Fatal(err)
		}
		return nc, js
	}
	subNC, subJS := conn()
	defer subNC.Close()
	workNC, workJS := conn()
	defer workNC.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: "RAWEV", Subjects: []string{"rawev.>"}, Storage: jetstream.FileStorage, AllowDirect: true, AllowAtomicPublish: true},
		{Name: "RAWWQ", Subjects: []string{"rawwq"}, Storage: jetstream.FileStorage, Retention: jetstream.WorkQueuePolicy},
	} {
		if _, err := subJS.CreateStream(ctx, cfg); err != nil {
			b.Fatal(err)
		}
	}
	// The records' bucket, as jetflow keeps it: under sync always it
	// persists asynchronously (rebuilt from the log after a crash:
	// Topology.ensureJobsBucket).
	kv := jetstream.StreamConfig{Name: "KV_rawjobs", Subjects: []string{"$KV.rawjobs.>"}, Storage: jetstream.FileStorage,
		MaxMsgsPerSubject: 1, AllowDirect: true, AllowRollup: true, DenyDelete: true, Discard: jetstream.DiscardNew}
	if always {
		kv.PersistMode = jetstream.AsyncPersistMode
	}
	if _, err := subJS.CreateStream(ctx, kv); err != nil {
		b.Fatal(err)
	}
	cons, err := workJS.CreateOrUpdateConsumer(ctx, "RAWWQ", jetstream.ConsumerConfig{Durable: "raw",
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 100000})
	if err != nil {
		b.Fatal(err)
	}
	r := &rawRun{n: int64(b.N), batched: batched, event: make([]byte, 300), record: make([]byte, 600),
		backlog: make(chan struct{}, 2*rawWorkers*rawBatch)}
	var wg sync.WaitGroup
	errs := make(chan error, 2*rawWorkers)
	fail := func(err error) {
		if err != nil && ctx.Err() == nil {
			errs <- err
			cancel()
		}
	}
	b.ResetTimer()
	start := time.Now()
	for w := range rawWorkers {
		wg.Go(func() { fail(r.submitter(ctx, w, subNC, subJS)) })
		wg.Go(func() { fail(r.worker(ctx, workNC, workJS, cons)) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	b.ReportMetric(float64(r.done.Load())/elapsed.Seconds(), "jobs/s")
}

type rawRun struct {
	n             int64
	batched       bool
	submitted     atomic.Int64
	done          atomic.Int64
	event, record []byte
	backlog       chan struct{} // a slot per job submitted and not done
}

func (r *rawRun) submitter(ctx context.Context, w int, nc *nats.Conn, js jetstream.JetStream) error {
	for next := 0; ctx.Err() == nil; {
		k := min(int64(rawBatch), r.n-r.submitted.Add(rawBatch)+rawBatch)
		if k <= 0 {
			return nil
		}
		ids := make([]string, k)
		for i := range ids {
			select {
			case r.backlog <- struct{}{}:
			case <-ctx.Done():
				return ctx.Err()
			}
			ids[i] = fmt.Sprintf("w%d-%d", w, next)
			next++
		}
		if err := r.submit(nc, js, ids); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (r *rawRun) worker(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, cons jetstream.Consumer) error {
	for r.done.Load() < r.n && ctx.Err() == nil {
		if err := r.work(nc, js, cons); err != nil {
			return err
		}
	}
	return nil
}

// appends writes the log's appends of one step: each with its expected
// subject sequence, one by one or as one atomic batch.
func (r *rawRun) appends(nc *nats.Conn, js jetstream.JetStream, msgs []*nats.Msg) error {
	if r.batched {
		g := &GroupCommit{js: js, nc: nc}
		group := make([]*groupMsg, len(msgs))
		for i, m := range msgs {
			group[i] = &groupMsg{m: m, done: make(chan struct{})}
		}
		return g.atomic(group)
	}
	return publishAll(js, msgs, nil)
}

// step sends a step's log appends (appends) and its other writes (others,
// their sequences in seqs if not nil) at once, and waits for both.
func (r *rawRun) step(nc *nats.Conn, js jetstream.JetStream, appends, others []*nats.Msg, seqs []uint64) error {
	var appendErr error
	done := make(chan struct{})
	go func() { defer close(done); appendErr = r.appends(nc, js, appends) }()
	err := publishAll(js, others, seqs)
	<-done
	return errors.Join(err, appendErr)
}

// publishAll publishes msgs pipelined and waits for every acknowledgement;
// it returns the sequence of each in seqs, if not nil.
func publishAll(js jetstream.JetStream, msgs []*nats.Msg, seqs []uint64) error {
	futs := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			return err
		}
		futs[i] = f
	}
	for i, f := range futs {
		select {
		case ack := <-f.Ok():
			if seqs != nil {
				seqs[i] = ack.Sequence
			}
		case err := <-f.Err():
			return err
		}
	}
	return nil
}

func (r *rawRun) submit(nc *nats.Conn, js jetstream.JetStream, ids []string) error {
	events := make([]*nats.Msg, len(ids))
	creates := make([]*nats.Msg, len(ids))
	for i, id := range ids {
		events[i] = expectMsg("rawev."+id, r.event, 0, "")
		creates[i] = expectMsg("$KV.rawjobs."+id, r.record, 0, "")
	}
	revs := make([]uint64, len(ids))
	if err := r.step(nc, js, events, creates, revs); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	items := make([]*nats.Msg, len(ids))
	for i, id := range ids {
		items[i] = &nats.Msg{Subject: "rawwq", Data: []byte(id + " " + strconv.FormatUint(revs[i], 10))}
	}
	return publishAll(js, items, nil)
}

func (r *rawRun) work(nc *nats.Conn, js jetstream.JetStream, cons jetstream.Consumer) error {
	// What is there, at once; when nothing is, wait for one.
	batch, err := cons.FetchNoWait(rawBatch)
	if err != nil {
		return err
	}
	var got []jetstream.Msg
	for m := range batch.Messages() {
		got = append(got, m)
	}
	if len(got) == 0 {
		one, err := cons.Fetch(1, jetstream.FetchMaxWait(100*time.Millisecond))
		if err != nil {
			return err
		}
		for m := range one.Messages() {
			got = append(got, m)
		}
	}
	var msgs []jetstream.Msg
	var ids []string
	var revs []uint64
	for _, m := range got {
		var id string
		var rev uint64
		if _, err := fmt.Sscan(string(m.Data()), &id, &rev); err != nil {
			return err
		}
		msgs, ids, revs = append(msgs, m), append(ids, id), append(revs, rev)
	}
	if len(msgs) == 0 {
		return nil
	}
	claims := make([]*nats.Msg, len(ids))
	for i, id := range ids {
		claims[i] = expectMsg("$KV.rawjobs."+id, r.record, revs[i], "")
	}
	claimed := make([]uint64, len(ids))
	if err := publishAll(js, claims, claimed); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	events := make([]*nats.Msg, 0, 2*len(ids))
	finals := make([]*nats.Msg, len(ids))
	for i, id := range ids {
		events = append(events, &nats.Msg{Subject: "rawev." + id, Data: r.event},
			&nats.Msg{Subject: "rawev." + id, Data: r.event})
		finals[i] = expectMsg("$KV.rawjobs."+id, r.record, claimed[i], "")
	}
	for _, m := range events {
		m.Header = nats.Header{}
	}
	if err := r.step(nc, js, events, finals, nil); err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	for _, m := range msgs {
		if err := m.Ack(); err != nil {
			return err
		}
	}
	r.done.Add(int64(len(msgs)))
	for range msgs {
		<-r.backlog
	}
	return nil
}

// BenchmarkRawAppendRoundTrip is the floor under a job's submit->start
// latency: one append to a file stream and its acknowledgement, nothing
// else in flight, under fsync every second and before every
// acknowledgement, back to back and paced at 200 a second (as jetflow
// bench's latency phase: the disk and the CPUs idle between two). It
// reports the round trip's p50 and p99. Under sync always a job's start
// follows at least one such write (its job.submitted is fsynced before its
// work item, which carries the event's sequence, goes out), so its
// submit->start p50 cannot be below the paced p50.
//
//	go test -run '^$' -bench RawAppendRoundTrip -benchtime 400x ./streams/
func BenchmarkRawAppendRoundTrip(b *testing.B) {
	for _, always := range []bool{false, true} {
		for _, pace := range []time.Duration{0, 5 * time.Millisecond} {
			name := map[bool]string{false: "sync1s", true: "syncalways"}[always] + "/" + map[bool]string{false: "backtoback", true: "paced200"}[pace > 0]
			b.Run(name, func(b *testing.B) { rawRoundTrips(b, always, pace) })
		}
	}
}

func rawRoundTrips(b *testing.B, always bool, pace time.Duration) {
	srv := rawServer(b, always)
	nc, err := nats.Connect("", nats.InProcessServer(srv))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "RTT", Subjects: []string{"rtt.>"}, Storage: jetstream.FileStorage}); err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 300)
	var rtts []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if pace > 0 {
			time.Sleep(pace)
		}
		t := time.Now()
		if _, err := js.Publish(ctx, "rtt."+strconv.Itoa(i), data, jetstream.WithExpectLastSequencePerSubject(0)); err != nil {
			b.Fatal(err)
		}
		rtts = append(rtts, time.Since(t))
	}
	slices.Sort(rtts)
	b.ReportMetric(float64(rtts[len(rtts)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(rtts[len(rtts)*99/100].Microseconds()), "p99-µs")
}
