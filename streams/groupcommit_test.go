package streams_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// groupWriter starts a server that fsyncs before every acknowledgement,
// provisions the topology of that mode, and returns a Writer whose appends
// go through a group commit.
func groupWriter(t *testing.T) (streams.Writer, jetstream.JetStream) {
	t.Helper()
	srv, err := engine.StartServer(engine.ServerConfig{Dir: t.TempDir(), Name: "test", SyncAlways: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	js, err := jetstream.New(testkit.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Ctx(t)
	if err := (streams.Topology{Sync: streams.SyncAlways}).Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; !cfg.AllowAtomicPublish || cfg.Metadata[streams.SyncMetadata] != streams.SyncAlways {
		t.Fatalf("events stream: atomic %v, metadata %v", cfg.AllowAtomicPublish, cfg.Metadata)
	}
	return streams.Writer{JS: js, Group: streams.NewGroupCommit(js)}, js
}

// wantStored fails unless the event log holds data on subject at seq.
func wantStored(t *testing.T, js jetstream.JetStream, seq uint64, subject string, data []byte) {
	t.Helper()
	ctx := testkit.Ctx(t)
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(ctx, seq)
	if err != nil {
		t.Fatalf("seq %d: %v", seq, err)
	}
	if m.Subject != subject || string(m.Data) != string(data) {
		t.Fatalf("seq %d holds %s %q, want %s %q", seq, m.Subject, m.Data, subject, data)
	}
}

// Appends sent at once go as atomic batches, each resolved with the
// sequence it is stored at; a batch in which one expected-sequence check
// fails is refused by the server as a whole, and its other appends are
// sent again alone and land: only the loser is refused.
func TestGroupCommitOnlyTheLoserIsRefused(t *testing.T) {
	w, js := groupWriter(t)
	ctx := testkit.Ctx(t)
	taken := streams.EventsPrefix + ".taken"
	if _, err := w.AppendDataAsync(taken, []byte("first"), 0, "").Wait(ctx); err != nil {
		t.Fatal(err)
	}
	before := w.Group.Stats()

	const n = 300
	subjects := make([]string, n)
	data := make([][]byte, n)
	seqs := map[uint64]bool{}
	// Two bursts: the first all new subjects, the second with the loser.
	for _, burst := range [][2]int{{0, n / 2}, {n / 2, n}} {
		futs := make([]streams.Future, n)
		for i := burst[0]; i < burst[1]; i++ {
			subjects[i] = fmt.Sprintf("%s.g.%d", streams.EventsPrefix, i)
			data[i] = fmt.Appendf(nil, "event %d", i)
			switch {
			case i == 200: // the loser: its subject has an event already
				subjects[i], data[i] = taken, []byte("second")
				futs[i] = w.AppendDataAsync(subjects[i], data[i], 0, "")
			case i%10 == 0: // a derived id: new on every subject of its filter
				futs[i] = w.AppendDataAsync(subjects[i], data[i], 0, fmt.Sprintf("%s.*.%d", streams.EventsPrefix, i))
			default:
				futs[i] = w.AppendDataAsync(subjects[i], data[i], 0, "")
			}
		}
		for i := burst[0]; i < burst[1]; i++ {
			seq, err := futs[i].Wait(ctx)
			if i == 200 {
				if !errors.Is(err, domain.ErrConflict) || seq != 0 {
					t.Fatalf("the loser: seq %d, err %v, want a conflict", seq, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
			if seqs[seq] {
				t.Fatalf("append %d: seq %d given twice", i, seq)
			}
			seqs[seq] = true
			wantStored(t, js, seq, subjects[i], data[i])
		}
		st := w.Group.Stats()
		if burst[0] == 0 && st.Batches == before.Batches {
			t.Fatalf("no atomic batch in %d appends sent at once: %+v", n/2, st)
		}
		if burst[0] > 0 && st.Resent == before.Resent {
			t.Fatalf("the batch with the loser was not sent again: %+v", st)
		}
	}
	if got := logMsgs(t, js); got != n { // the first on taken, and every append but the loser
		t.Fatalf("the log holds %d events, want %d", got, n)
	}
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	// Every later append checks the sequence its writer was given.
	for _, i := range []int{1, 149, 199, 201, 299} {
		var last uint64
		for seq := range seqs {
			if m, err := s.GetMsg(ctx, seq); err == nil && m.Subject == subjects[i] {
				last = seq
			}
		}
		if _, err := w.AppendDataAsync(subjects[i], []byte("next"), last, "").Wait(ctx); err != nil {
			t.Fatalf("append after %d at %d: %v", i, last, err)
		}
		if _, err := w.AppendDataAsync(subjects[i], []byte("stale"), last, "").Wait(ctx); !errors.Is(err, domain.ErrConflict) {
			t.Fatalf("a stale append after %d: %v, want a conflict", i, err)
		}
	}
}

// Under sync always the jobs bucket and the queue streams are created with
// the async persist mode (the log fsyncs each write, and what they hold is
// derived from it), a queue's batch stream is not; in the default mode none
// is; a process not told the mode takes the log's.
func TestSyncAlwaysTopology(t *testing.T) {
	ctx := testkit.Ctx(t)
	for _, tc := range []struct {
		sync string
		want jetstream.PersistModeType
	}{{streams.SyncAlways, jetstream.AsyncPersistMode}, {streams.SyncInterval, jetstream.DefaultPersistMode}} {
		js, err := jetstream.New(testkit.Conn(t, testkit.Server(t)))
		if err != nil {
			t.Fatal(err)
		}
		topo := streams.Topology{Sync: tc.sync}
		if err := topo.Ensure(ctx, js); err != nil {
			t.Fatal(err)
		}
		if err := streams.NewQueues(js, topo).Ensure(ctx, "q"); err != nil {
			t.Fatal(err)
		}
		kv, err := js.Stream(ctx, "KV_"+streams.JobsBucket)
		if err != nil {
			t.Fatal(err)
		}
		q, err := js.Stream(ctx, streams.QueueStream("q"))
		if err != nil {
			t.Fatal(err)
		}
		if got := kv.CachedInfo().Config.PersistMode; got != tc.want {
			t.Fatalf("sync %s: jobs bucket persist mode %v, want %v", tc.sync, got, tc.want)
		}
		if got := q.CachedInfo().Config.PersistMode; got != tc.want {
			t.Fatalf("sync %s: queue stream persist mode %v, want %v", tc.sync, got, tc.want)
		}
		b, err := js.Stream(ctx, streams.BatchStream("q"))
		if err != nil {
			t.Fatal(err)
		}
		if got := b.CachedInfo().Config.PersistMode; got != jetstream.DefaultPersistMode {
			t.Fatalf("sync %s: batch stream persist mode %v", tc.sync, got)
		}
		if got := (streams.Topology{}).ResolveSync(ctx, js).Sync; got != tc.sync {
			t.Fatalf("sync %s: a process not told resolves %q", tc.sync, got)
		}
		// Ensure by a process not told leaves the recorded mode as it is.
		if err := (streams.Topology{}).Ensure(ctx, js); err != nil {
			t.Fatal(err)
		}
		if got := (streams.Topology{}).ResolveSync(ctx, js).Sync; got != tc.sync {
			t.Fatalf("sync %s: after another process's Ensure: %q", tc.sync, got)
		}
	}
}

// Stored tells a publish that stored its message from one the stream
// dropped as a duplicate of its message id (what the Projector's repairs
// go by: only what they stored must wait for the next sync).
func TestFutureStored(t *testing.T) {
	js, err := jetstream.New(testkit.Conn(t, testkit.Server(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Ctx(t)
	if err := (streams.Topology{}).Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	if err := streams.NewQueues(js, streams.Topology{}).Ensure(ctx, "q"); err != nil {
		t.Fatal(err)
	}
	w := streams.Writer{JS: js}
	m := func() *nats.Msg {
		return &nats.Msg{Subject: streams.RunSubject("q", "t"), Data: []byte("x"), Header: nats.Header{}}
	}
	for i, want := range []bool{true, false} {
		stored, err := w.PublishAsync(m(), jetstream.WithMsgID("one")).Stored(ctx)
		if err != nil || stored != want {
			t.Fatalf("publish %d: stored %v (%v), want %v", i+1, stored, err, want)
		}
	}
	if _, err := w.PublishAsync(&nats.Msg{Subject: "nowhere.at.all", Data: []byte("x")}).Stored(ctx); err == nil {
		t.Fatal("a publish no stream takes: stored")
	}
}

// Piece events (no expected sequence, a message id each) go through the
// group commit too, sharing its atomic batches with the appends; a batch
// holding a message id seen before (or twice) is refused whole, sent again
// alone, and the duplicate is dropped: each message id is stored once, and
// its every publish answers with that one's sequence.
func TestGroupCommitPieceEventsOncePerMsgID(t *testing.T) {
	w, js := groupWriter(t)
	ctx := testkit.Ctx(t)
	piece := func(id string) *nats.Msg {
		return &nats.Msg{Subject: streams.PiecesPrefix + ".parent", Data: []byte(id), Header: nats.Header{}}
	}
	first, err := w.PublishEventAsync(piece("seen"), "seen").Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stored := 1

	// A burst of distinct pieces and appends: batched, every one stored.
	before := w.Group.Stats()
	const n = 200
	futs := make([]streams.Future, n)
	for i := range n {
		if i%2 == 0 {
			futs[i] = w.PublishEventAsync(piece(fmt.Sprint("p", i)), fmt.Sprint("p", i))
		} else {
			futs[i] = w.AppendDataAsync(fmt.Sprintf("%s.a.%d", streams.EventsPrefix, i), []byte("a"), 0, "")
		}
	}
	seqs := map[uint64]bool{}
	for i, f := range futs {
		seq, err := f.Wait(ctx)
		if err != nil || seqs[seq] {
			t.Fatalf("message %d: seq %d (given before: %v), err %v", i, seq, seqs[seq], err)
		}
		seqs[seq] = true
	}
	stored += n
	st := w.Group.Stats()
	if st.Batches == before.Batches || st.Batched+st.Alone-before.Batched-before.Alone != n || st.Resent != before.Resent {
		t.Fatalf("a burst of %d: before %+v, after %+v: want atomic batches, nothing sent again", n, before, st)
	}

	// A burst with a message id seen before and one sent twice.
	before = st
	futs = futs[:0]
	for i := range n {
		id := fmt.Sprint("q", i)
		switch i {
		case 50:
			id = "seen"
		case 120, 121:
			id = "twice"
		}
		futs = append(futs, w.PublishEventAsync(piece(id), id))
	}
	seqs = map[uint64]bool{}
	for i, f := range futs {
		if stored, err := f.Stored(ctx); err != nil || stored != (i != 50 && i != 121) {
			t.Fatalf("piece %d: stored %v, err %v", i, stored, err)
		}
		seq, err := f.Wait(ctx)
		switch {
		case err != nil:
			t.Fatalf("piece %d: %v", i, err)
		case i == 50 && seq != first:
			t.Fatalf("the piece seen before answered seq %d, want %d", seq, first)
		case i == 121 && !seqs[seq]:
			t.Fatalf("the second of twice answered seq %d, not the first's", seq)
		case i != 50 && i != 121 && seqs[seq]:
			t.Fatalf("piece %d: seq %d given twice", i, seq)
		}
		seqs[seq] = true
	}
	stored += n - 2
	if st := w.Group.Stats(); st.Resent == before.Resent {
		t.Fatalf("no batch was sent again: before %+v, after %+v", before, st)
	}
	if got := logMsgs(t, js); got != uint64(stored) {
		t.Fatalf("the log holds %d messages, want %d", got, stored)
	}
}

// logMsgs is how many messages the event log holds.
func logMsgs(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx := testkit.Ctx(t)
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// An append whose writer stopped waiting before it was sent (queued behind
// a batch on its way) is never sent: it does not land later, unknown to
// its writer. The others go on.
func TestGroupCommitAbandonedNeverSent(t *testing.T) {
	w, js := groupWriter(t)
	ctx := testkit.Ctx(t)
	release := w.Group.Hold()
	gone := w.AppendDataAsync(streams.EventsPrefix+".gone", []byte("gone"), 0, "")
	kept := w.AppendDataAsync(streams.EventsPrefix+".kept", []byte("kept"), 0, "")
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := gone.Wait(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("the abandoned wait: %v", err)
	}
	release()
	seq, err := kept.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantStored(t, js, seq, streams.EventsPrefix+".kept", []byte("kept"))
	if _, err := gone.Wait(ctx); !errors.Is(err, streams.ErrAbandoned) {
		t.Fatalf("the abandoned append, waited again: %v", err)
	}
	if got := logMsgs(t, js); got != 1 {
		t.Fatalf("the log holds %d messages, want 1", got)
	}
}
