package audit

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// A verifier keeps at most maxPending changes between two checkpoints: a
// log without checkpoints for longer counts the ones it let go as not
// covered, a checkpoint whose range reaches before what it kept is a
// finding (its root cannot be recomputed), and one within what it kept is
// checked as any other.
func TestVerifierBoundsPendingChanges(t *testing.T) {
	kp, err := nkeys.CreateServer()
	if err != nil {
		t.Fatal(err)
	}
	pub := PublicKey(kp)
	const keep = 2 * chunkLen
	type stored struct {
		subject string
		hash    []byte
	}
	var log []stored // by sequence - 1
	var ckPrev []byte
	newVerifierAt := func() *Verifier {
		v := NewVerifier(pub, true)
		v.maxPending = keep
		return v
	}
	event := func(v *Verifier, subject, job string) {
		t.Helper()
		ev := &domain.Event{V: domain.EnvelopeVersion, Type: domain.EvSubmitted, JobID: job, Time: time.Unix(1_800_000_000, 0)}
		data, err := streams.EncodeEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		h := streams.ChainHash(nil, data)
		log = append(log, stored{subject, h})
		v.Add(uint64(len(log)), subject, h, data)
	}
	// checkpoint appends a signed checkpoint of (from, upTo] as the
	// checkpointer makes it, from the log's heads.
	checkpoint := func(v *Verifier, from, upTo uint64) {
		t.Helper()
		heads := map[string]Head{}
		for i := from; i < upTo; i++ {
			if log[i].subject == streams.CheckpointSubject {
				continue
			}
			heads[log[i].subject] = Head{Subject: log[i].subject, Seq: i + 1, Hash: log[i].hash}
		}
		var sorted []Head
		for _, h := range heads {
			sorted = append(sorted, h)
		}
		SortHeads(sorted)
		ck := &domain.Checkpoint{From: from, UpTo: upTo, Count: len(sorted), Root: Root(sorted)}
		if err := Sign(kp, ck, ckPrev); err != nil {
			t.Fatal(err)
		}
		ev := &domain.Event{V: domain.EnvelopeVersion, Type: domain.EvCheckpoint, JobID: "checkpoint", Time: time.Unix(1_800_000_000, 0),
			Prev: ckPrev, Checkpoint: ck}
		data, err := streams.EncodeEvent(ev)
		if err != nil {
			t.Fatal(err)
		}
		h := streams.ChainHash(ckPrev, data)
		ckPrev = h
		log = append(log, stored{streams.CheckpointSubject, h})
		v.Add(uint64(len(log)), streams.CheckpointSubject, h, data)
	}
	job := func(v *Verifier, i int) {
		t.Helper()
		id := fmt.Sprintf("job-%d", i)
		event(v, "jetflow.ev.default.default.t."+id, id)
	}

	// Within the bound: a checkpoint is checked, the changes after it are
	// the uncovered ones.
	v := newVerifierAt()
	for i := range keep - 10 {
		job(v, i)
	}
	checkpoint(v, 0, uint64(len(log)))
	for i := range 5 {
		job(v, keep+i)
	}
	if r := v.Finish(); !r.OK() || r.Checkpoints != 1 || r.Uncovered != 5 || r.Covered != uint64(keep-10) {
		t.Fatalf("within the bound: %+v", r)
	}

	// Past it: the changes let go still count as uncovered.
	log, ckPrev = nil, nil
	v = newVerifierAt()
	for i := range keep + keep/2 {
		job(v, i)
	}
	if r := v.Finish(); !r.OK() || r.Uncovered != keep+keep/2 || r.Checkpoints != 0 {
		t.Fatalf("past the bound, no checkpoint: %+v", r)
	}
	// A checkpoint from the start reaches before what the verifier kept.
	checkpoint(v, 0, uint64(len(log)))
	r := v.Finish()
	if len(r.Findings) != 1 || r.Findings[0].Kind != Checkpoint || !strings.Contains(r.Findings[0].What, "not recomputed") ||
		r.Covered != uint64(keep+keep/2) || r.Uncovered != 0 {
		t.Fatalf("a checkpoint wider than what is kept: %+v", r)
	}
	// The next one, within the bound, is checked again.
	for i := range 100 {
		job(v, 2*keep+i)
	}
	checkpoint(v, uint64(keep+keep/2), uint64(len(log)))
	if r := v.Finish(); len(r.Findings) != 1 || r.Checkpoints != 2 || r.Uncovered != 0 {
		t.Fatalf("after it: %+v", r)
	}
}
