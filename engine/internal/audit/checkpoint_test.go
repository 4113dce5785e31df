package audit_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine/internal/audit"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// Checkpoints commit to every chain head: a subject purged after its
// checkpoint, and an event appended after it with a forged hash, are
// found; a checkpoint is checked against the trusted key.
func TestAuditCheckpoints(t *testing.T) {
	env, js, ids := logOf(t, 4)
	ctx := context.Background()
	kp, created, err := audit.LoadKey(t.TempDir())
	if err != nil || !created {
		t.Fatal(created, err)
	}
	pub := audit.PublicKey(kp)
	cp := maintenance.NewCheckpointer(storetest.Open(t, env.Client.Conn(), "checkpointer"), maintenance.CheckpointerConfig{Key: kp})
	env.Engine.Stop(ctx) // nothing else writes from here
	ck, err := cp.Checkpoint(ctx)
	if err != nil || ck == nil || ck.Checkpoint.From != 0 || ck.Checkpoint.Count < 4 {
		t.Fatalf("checkpoint %+v: %v", ck, err)
	}
	if again, err := cp.Checkpoint(ctx); err != nil || again != nil {
		t.Fatalf("a second checkpoint with nothing new: %+v %v", again, err)
	}
	r := verify(t, js, audit.Scope{}, pub)
	if !r.OK() || r.Checkpoints != 1 || r.Covered != ck.Checkpoint.UpTo || r.Uncovered != 0 || !r.KeyPinned {
		t.Fatalf("report %+v", r)
	}
	// Another key: every checkpoint is refused.
	other, _, err := audit.LoadKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r = verify(t, js, audit.Scope{}, audit.PublicKey(other))
	if got := findings(r); len(got) != 1 || got[0] != fmt.Sprintf("checkpoint %d ", ck.Seq) || !strings.Contains(r.Findings[0].What, "not by the trusted key") {
		t.Fatalf("findings with another key %v", r.Findings)
	}

	// A whole job purged: its chain is gone, the checkpoint's root names
	// the range it was in.
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	a := msgs(t, js, ids[0])
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(a[0].Subject)); err != nil {
		t.Fatal(err)
	}
	// An event appended after the checkpoint, chained, with a forged hash.
	b := msgs(t, js, ids[1])
	head, err := streams.DecodeEvent(b[len(b)-1].Data)
	if err != nil {
		t.Fatal(err)
	}
	m, err := streams.EventMsg(b[0].Subject, &domain.Event{Type: domain.EvCancelled, JobID: ids[1], Time: time.Now(), Prev: head.Hash})
	if err != nil {
		t.Fatal(err)
	}
	m.Header.Set(streams.HashHeader, strings.Repeat("cd", streams.HashSize))
	ack, err := js.PublishMsg(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	r = verify(t, js, audit.Scope{}, pub)
	want := []string{fmt.Sprintf("checkpoint %d ", ck.Seq), fmt.Sprintf("edited %d %s", ack.Sequence, ids[1])}
	if got := findings(r); strings.Join(got, ",") != strings.Join(want, ",") || r.Uncovered != 1 {
		t.Fatalf("findings %v, want %v; uncovered %d\n%v", got, want, r.Uncovered, r.Findings)
	}
	if w := r.Findings[0].What; !strings.Contains(w, fmt.Sprintf("(0, %d]", ck.Checkpoint.UpTo)) {
		t.Fatalf("checkpoint finding %q", w)
	}
	for _, f := range r.Findings {
		t.Log(f)
	}
}

// A scope's verification recomputes each checkpoint's root from its
// range's heads: a job's events purged and its first two appended again
// (a chain that holds, cut short) are found in a scope of that job, and
// of any other job, as in the whole log; before, every scope verifies.
func TestAuditScopedVerifyRecomputesCheckpoints(t *testing.T) {
	env, js, ids := logOf(t, 3)
	ctx := context.Background()
	kp, pub := testKey(t)
	cp := maintenance.NewCheckpointer(storetest.Open(t, env.Client.Conn(), "checkpointer"), maintenance.CheckpointerConfig{Key: kp})
	env.Engine.Stop(ctx)
	ck, err := cp.Checkpoint(ctx)
	if err != nil || ck == nil {
		t.Fatalf("checkpoint %+v: %v", ck, err)
	}
	for _, sc := range []audit.Scope{{Job: ids[0]}, {Job: ids[1]}, {Namespace: domain.DefaultNS}, {Type: "audit.ok"}} {
		if r := verify(t, js, sc, pub); !r.OK() || r.Checkpoints != 1 || r.Covered != ck.Checkpoint.UpTo || r.Uncovered != 0 {
			t.Fatalf("scope %+v before: %+v", sc, r)
		}
	}
	a := msgs(t, js, ids[0])
	if len(a) < 3 {
		t.Fatalf("job %s has %d events", ids[0], len(a))
	}
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(a[0].Subject)); err != nil {
		t.Fatal(err)
	}
	for _, m := range a[:2] {
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Data: m.Data,
			Header: nats.Header{streams.HashHeader: m.Header.Values(streams.HashHeader)}}); err != nil {
			t.Fatal(err)
		}
	}
	want := fmt.Sprintf("checkpoint %d ", ck.Seq)
	for _, sc := range []audit.Scope{{Job: ids[0]}, {Job: ids[1]}, {}} {
		r := verify(t, js, sc, pub)
		if got := findings(r); len(got) != 1 || got[0] != want || !strings.Contains(r.Findings[0].What, "removed, edited or added") {
			t.Fatalf("scope %+v after: findings %v, want [%s]\n%v", sc, got, want, r.Findings)
		}
		if wantUncovered := map[bool]int{true: 2, false: 0}[sc.Job != ids[1]]; r.Uncovered != wantUncovered {
			t.Fatalf("scope %+v: %d uncovered, want %d", sc, r.Uncovered, wantUncovered)
		}
	}
}

// Two checkpointers at once (a leader and the one it lost its lease to,
// for a moment), both signing with the key, while jobs are submitted: each
// checkpoint starts where the one before it ended (an append that lost the
// race for the checkpoint subject writes nothing), and the log verifies
// with every event covered.
func TestAuditTwoCheckpointersAtOnce(t *testing.T) {
	env, js, _ := logOf(t, 2)
	ctx := context.Background()
	kp, pub := testKey(t)
	cps := []*maintenance.Checkpointer{
		maintenance.NewCheckpointer(storetest.Open(t, env.Client.Conn(), "first"), maintenance.CheckpointerConfig{Key: kp}),
		maintenance.NewCheckpointer(storetest.Open(t, env.Client.Conn(), "second"), maintenance.CheckpointerConfig{Key: kp}),
	}
	done := make(chan error, len(cps))
	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() {
		stopOnce.Do(func() { close(stop) })
		for range cps {
			if err := <-done; err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(func() { stopOnce.Do(func() { close(stop) }) }) // a test that fails early
	for _, cp := range cps {
		go func() {
			for {
				select {
				case <-stop:
					done <- nil
					return
				default:
				}
				if _, err := cp.Checkpoint(ctx); err != nil {
					done <- err
					return
				}
			}
		}()
	}
	// Jobs submitted until each of the two has written a checkpoint (each
	// round gives both something to commit to).
	i := 0
	testkit.WaitFor(t, 20*time.Second, func() error {
		for range 20 {
			if _, err := env.Client.Submit(ctx, "audit.idle", i, jetflow.Queue("nobody")); err != nil {
				return err
			}
			i++
		}
		if cps[0].Written() == 0 || cps[1].Written() == 0 {
			return fmt.Errorf("written: %d and %d", cps[0].Written(), cps[1].Written())
		}
		return nil
	})
	halt()
	if t.Failed() {
		t.FailNow()
	}
	// Nothing else writes from here; the last events covered too.
	env.Engine.Stop(ctx)
	if _, err := cps[0].Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	r := verify(t, js, audit.Scope{}, pub)
	if !r.OK() || r.Uncovered != 0 || r.Checkpoints != cps[0].Written()+cps[1].Written() {
		t.Fatalf("report %+v, written %d + %d; findings %v", r, cps[0].Written(), cps[1].Written(), findings(r))
	}
	// Each checkpoint starts where the one before it ended.
	var upTo uint64
	_, err := audit.Read(ctx, js, []string{streams.CheckpointSubject}, func(seq uint64, _ string, _, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return err
		}
		if ev.Checkpoint.From != upTo {
			return fmt.Errorf("checkpoint %d covers %d..%d, the one before ended at %d", seq, ev.Checkpoint.From, ev.Checkpoint.UpTo, upTo)
		}
		upTo = ev.Checkpoint.UpTo
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testKey makes a checkpoint signing key for a test: the pair and its
// public half.
func testKey(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	kp, _, err := audit.LoadKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return kp, audit.PublicKey(kp)
}
