package audit_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jetflow/jetflow/engine/internal/audit"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// auditScaleEvents is the log TestAuditVerifyMemoryBound verifies:
// JETFLOW_AUDIT_SCALE_EVENTS, or 150,000 (a test run's size; docs/audit.md
// has the figure for 10,000,000).
func auditScaleEvents(t *testing.T) int {
	v := os.Getenv("JETFLOW_AUDIT_SCALE_EVENTS")
	if v == "" {
		return 150_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 3 {
		t.Fatalf("JETFLOW_AUDIT_SCALE_EVENTS=%q: want a number of events, at least 3", v)
	}
	return n
}

// A log of jobs of three events each (submitted, started, succeeded, as a
// bench leaves it) with a signed checkpoint every 500,000 events, as the
// checkpointer writes them, is verified by `jetflow audit verify` (its own
// process, against a real NATS server) in under 1 GiB of memory: no
// finding, every event and checkpoint counted, the events after the last
// checkpoint uncovered.
func TestAuditVerifyMemoryBound(t *testing.T) {
	n := auditScaleEvents(t)
	bin := testkit.BuildBinary(t, "github.com/jetflow/jetflow/cmd/jetflow")
	s := testkit.Server(t, "127.0.0.1:-1")
	nc := testkit.Conn(t, s)
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, streams.Topology{}.EventsConfig()); err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateServer()
	if err != nil {
		t.Fatal(err)
	}
	const every = 500_000 // the checkpointer's most events a checkpoint
	var (
		seq      uint64
		from     uint64 // the last checkpoint's UpTo
		ckPrev   []byte
		heads    = map[string]audit.Head{}
		ckpts    int
		payload  = []byte(`{"input":"s3://bucket/some/object/key.parquet","rows":125000,"model":"resnet-50"}`)
		started  = time.Now()
		at       = time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
		pubAsync = func(subject string, ev *domain.Event) []byte {
			t.Helper()
			m, err := streams.EventMsg(subject, ev)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := js.PublishMsgAsync(m, jetstream.WithStallWait(time.Minute)); err != nil {
				t.Fatal(err)
			}
			seq++
			return ev.Hash
		}
	)
	checkpoint := func() {
		t.Helper()
		<-js.PublishAsyncComplete()
		sorted := make([]audit.Head, 0, len(heads))
		for _, h := range heads {
			sorted = append(sorted, h)
		}
		audit.SortHeads(sorted)
		ck := &domain.Checkpoint{From: from, UpTo: seq, Count: len(sorted), Root: audit.Root(sorted)}
		if err := audit.Sign(kp, ck, ckPrev); err != nil {
			t.Fatal(err)
		}
		ev := &domain.Event{V: domain.EnvelopeVersion, Type: domain.EvCheckpoint, JobID: "checkpoint", Time: at, Actor: "engine",
			Prev: ckPrev, Checkpoint: ck}
		ckPrev = pubAsync(streams.CheckpointSubject, ev)
		from, heads = ck.UpTo, map[string]audit.Head{}
		ckpts++
	}
	jobs := n / 3
	for j := range jobs {
		id := fmt.Sprintf("01JSCALE%018d", j)
		subject := streams.EventSubject(domain.DefaultNS, "default", "scale.job", id)
		var prev []byte
		for k, ev := range []*domain.Event{
			{Type: domain.EvSubmitted, From: domain.StateNew, To: domain.StateQueued,
				Spec: &domain.Spec{Namespace: domain.DefaultNS, Type: "scale.job", Queue: "default", Payload: payload}},
			{Type: domain.EvStarted, From: domain.StateQueued, To: domain.StateRunning, Attempt: 1, Message: "claimed by w-1"},
			{Type: domain.EvSucceeded, From: domain.StateRunning, To: domain.StateSucceeded, Attempt: 1, Result: []byte(`{"ok":true}`)},
		} {
			ev.V, ev.JobID, ev.Time, ev.Actor, ev.Prev = domain.EnvelopeVersion, id, at.Add(time.Duration(j*3+k)*time.Millisecond), "engine", prev
			prev = pubAsync(subject, ev)
			heads[subject] = audit.Head{Subject: subject, Seq: seq, Hash: prev}
		}
		if int(seq-from) >= every-3 {
			checkpoint()
		}
	}
	<-js.PublishAsyncComplete()
	uncovered := int(seq - from) // after the last checkpoint (not counted itself)
	if ckpts > 0 {
		uncovered--
	}
	wrote := time.Since(started)

	cmd := exec.Command(bin, "audit", "verify", "--nats", s.ClientURL(), "--pubkey", audit.PublicKey(kp), "--json")
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("audit verify: %v\n%s%s", err, out.String(), stderr.String())
	}
	took := time.Since(t0)
	var rep audit.Report
	if err := json.Unmarshal([]byte(out.String()), &rep); err != nil {
		t.Fatalf("audit verify --json: %v\n%s", err, out.String())
	}
	rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss * 1024 // Linux: KiB
	t.Logf("audit verify of %d events (%d jobs, %d checkpoints; written in %s): %s, %.0f events/s, max RSS %d MiB",
		seq, jobs, ckpts, wrote.Round(time.Millisecond), took.Round(time.Millisecond), float64(seq)/took.Seconds(), rss>>20)
	if !rep.OK() || rep.Events != int(seq) || rep.Checkpoints != ckpts || rep.Subjects != jobs+min(ckpts, 1) ||
		rep.Uncovered != uncovered || rep.Key != audit.PublicKey(kp) || !rep.KeyPinned {
		t.Fatalf("report %+v; want %d events, %d checkpoints, %d subjects, %d uncovered, no finding", rep, seq, ckpts, jobs+min(ckpts, 1), uncovered)
	}
	if rss >= 1<<30 {
		t.Fatalf("audit verify of %d events used %d MiB, more than 1 GiB", seq, rss>>20)
	}
}
