package audit_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine/internal/audit"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/jetflowtest"
	"github.com/jetflow/jetflow/streams"
)

// logOf runs n jobs to completion on a real engine and returns the
// environment and its JetStream.
func logOf(t *testing.T, n int) (*jetflowtest.Env, jetstream.JetStream, []string) {
	t.Helper()
	env := jetflowtest.New(t)
	jetflow.Register(env.Worker, "audit.ok", func(ctx context.Context, job *jetflow.Job[int]) (int, error) {
		return job.Payload * 2, nil
	})
	if err := env.Start(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range n {
		j, err := env.Client.Submit(context.Background(), "audit.ok", i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	for _, id := range ids {
		done, err := env.Wait(id, 30*time.Second)
		if err != nil || done.State != jetflow.Succeeded {
			t.Fatalf("job %s: %v %+v", id, err, done)
		}
	}
	js, err := jetstream.New(env.Client.Conn())
	if err != nil {
		t.Fatal(err)
	}
	return env, js, ids
}

// msgs are the stored messages of a job's subject, in order.
func msgs(t *testing.T, js jetstream.JetStream, id string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	if _, err := audit.Read(ctx, js, []string{streams.EventFilter(id)}, func(seq uint64, _ string, _, _ []byte) error {
		m, err := s.GetMsg(ctx, seq)
		out = append(out, m)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func findings(r *audit.Report) []string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, fmt.Sprintf("%s %d %s", f.Kind, f.Seq, f.Job))
	}
	sort.Strings(out)
	return out
}

func verify(t *testing.T, js jetstream.JetStream, scope audit.Scope, pub string) *audit.Report {
	t.Helper()
	r, err := audit.VerifyLog(context.Background(), js, scope, pub)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A log written by the engine verifies: every event of every subject is
// chained.
func TestAuditChainVerifies(t *testing.T) {
	_, js, ids := logOf(t, 5)
	r := verify(t, js, audit.Scope{}, "")
	if !r.OK() || r.Events != 5*3 || r.Subjects < 5 {
		t.Fatalf("report %+v", r)
	}
	// Every job event after the first names the hash of the one before it.
	ms := msgs(t, js, ids[0])
	var prev []byte
	for i, m := range ms {
		ev, err := streams.DecodeEvent(m.Data)
		if err != nil {
			t.Fatal(err)
		}
		if string(ev.Prev) != string(prev) || hex.EncodeToString(ev.Hash) != m.Header.Get(streams.HashHeader) {
			t.Fatalf("event %d (%s): prev %x want %x, hash %x header %s", i, ev.Type, ev.Prev, prev, ev.Hash, m.Header.Get(streams.HashHeader))
		}
		prev = ev.Hash
	}
	if len(ms) != 3 { // submitted, started, succeeded
		t.Fatalf("job events: %d", len(ms))
	}
	r = verify(t, js, audit.Scope{Job: ids[0]}, "")
	if !r.OK() || r.Events != len(ms) || r.Subjects != 1 {
		t.Fatalf("scoped report %+v, want %d events", r, len(ms))
	}
}

// Tampering through JetStream's own APIs, as an operator with full NATS
// access can: each way is named, at its event.
func TestAuditVerifyNamesTampering(t *testing.T) {
	env, js, ids := logOf(t, 6)
	ctx := context.Background()
	env.Engine.Stop(ctx) // nothing else writes while the log is tampered with
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	// The stream denies deleting a message (DenyDelete, which cannot be
	// lifted); an operator can still purge a subject, or its first events,
	// and publish on it.
	purgeBefore := func(subject string, seq uint64) {
		t.Helper()
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(seq)); err != nil {
			t.Fatal(err)
		}
	}
	pub := func(m *nats.Msg) uint64 {
		t.Helper()
		ack, err := js.PublishMsg(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	copyOf := func(m *jetstream.RawStreamMsg, data []byte) *nats.Msg {
		h := nats.Header{streams.HashHeader: m.Header.Values(streams.HashHeader)}
		return &nats.Msg{Subject: m.Subject, Data: data, Header: h}
	}
	var want []string
	// 1. removed: a job's first two events purged; the one left names the gap.
	a := msgs(t, js, ids[0])
	purgeBefore(a[0].Subject, a[2].Sequence)
	want = append(want, fmt.Sprintf("removed %d %s", a[2].Sequence, ids[0]))
	// 2. edited: an edited copy of the last event, with its hash, appended:
	// its bytes do not match, and it branches off the chain.
	b := msgs(t, js, ids[1])
	last := b[len(b)-1]
	ev, err := streams.DecodeEvent(last.Data)
	if err != nil {
		t.Fatal(err)
	}
	ev.Result = []byte(`"edited"`)
	data, err := streams.EncodeEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	seq := pub(copyOf(last, data))
	want = append(want, fmt.Sprintf("edited %d %s", seq, ids[1]), fmt.Sprintf("inserted %d %s", seq, ids[1]))
	// 3. reordered: the first two events purged and appended again as they
	// were, after the third.
	c := msgs(t, js, ids[2])
	purgeBefore(c[0].Subject, c[2].Sequence)
	want = append(want, fmt.Sprintf("reordered %d %s", c[2].Sequence, ids[2]),
		fmt.Sprintf("reordered %d %s", pub(copyOf(c[0], c[0].Data)), ids[2]))
	pub(copyOf(c[1], c[1].Data))
	// 4. inserted: a copy of a middle event appended, the original kept.
	d := msgs(t, js, ids[3])
	want = append(want, fmt.Sprintf("inserted %d %s", pub(copyOf(d[1], d[1].Data)), ids[3]))
	// 5. forged: an event appended by hand, without the chain.
	e := msgs(t, js, ids[4])
	forged, err := streams.EncodeEvent(&domain.Event{Type: domain.EvCancelled, JobID: ids[4], Time: time.Now(), Actor: "engine"})
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, fmt.Sprintf("forged %d %s", pub(&nats.Msg{Subject: e[0].Subject, Data: forged}), ids[4]))
	// 6. forged with a hash: chained to the head, but its hash header is
	// not the hash of its bytes.
	f := msgs(t, js, ids[5])
	head, err := streams.DecodeEvent(f[len(f)-1].Data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := streams.EventMsg(f[0].Subject, &domain.Event{Type: domain.EvCancelled, JobID: ids[5], Time: time.Now(), Prev: head.Hash})
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(streams.HashHeader, strings.Repeat("ab", streams.HashSize))
	want = append(want, fmt.Sprintf("edited %d %s", pub(m), ids[5]))

	sort.Strings(want)
	r := verify(t, js, audit.Scope{}, "")
	if got := findings(r); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("findings:\n%s\nwant:\n%s\n%+v", strings.Join(got, "\n"), strings.Join(want, "\n"), r.Findings)
	}
	for _, f := range r.Findings {
		t.Log(f)
	}
	// Scoped to one job, only its findings.
	r = verify(t, js, audit.Scope{Job: ids[2]}, "")
	if got := findings(r); len(got) != 2 || !strings.HasPrefix(got[0], "reordered") || !strings.HasPrefix(got[1], "reordered") {
		t.Fatalf("scoped findings %v", got)
	}
}
