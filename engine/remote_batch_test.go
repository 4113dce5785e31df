package engine_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// A batch id carries its claim time, its parent and its item's ack
// subject, and names nothing else: an ack subject of another stream or
// consumer than a queue's batch consumer, or anything that does not
// decode, is no batch.
func TestBatchIDs(t *testing.T) {
	parent := domain.NewID()
	at := time.UnixMilli(time.Now().UnixMilli())
	for _, ack := range []string{
		"$JS.ACK.JETFLOW_Q_gpu.batch_emb~2Ebatch.3.42.40.1732000000000000000.0",
		"$JS.ACK.hub.ACCHASH.JETFLOW_Q_gpu.batch_emb~2Ebatch.3.42.40.1732000000000000000.0.rnd",
	} {
		id := engine.MakeBatchID(at, parent, ack)
		if !engine.IsBatchID(id) || len(id) > engine.MaxBatchIDLen || strings.ContainsAny(id, "/+=.") {
			t.Fatalf("id %q", id)
		}
		claimed, p, stream, seq, n, err := engine.ParseBatchID(id)
		if err != nil || !claimed.Equal(at) || p != parent || stream != "JETFLOW_Q_gpu" || seq != 42 || n != 3 {
			t.Fatalf("%s: %v %s %s %d %d %v", ack, claimed, p, stream, seq, n, err)
		}
		if engine.BatchParent(id) != parent {
			t.Fatalf("parent of %s", id)
		}
	}
	for _, id := range []string{
		"bt-", "bt-***", domain.NewID(), "bt-" + strings.Repeat("A", 1100),
		engine.MakeBatchID(at, parent, "$JS.ACK.KV_jetflow_jobs.batch_x.1.2.3.4.0"),      // not a queue's stream
		engine.MakeBatchID(at, parent, "$JS.ACK.JETFLOW_Q_gpu.run_emb.1.2.3.4.0"),        // a job's consumer
		engine.MakeBatchID(at, parent, "$JS.ACK.JETFLOW_Q_gpu.batch_emb.0.2.3.4.0"),      // delivered 0
		engine.MakeBatchID(at, "not-an-id", "$JS.ACK.JETFLOW_Q_gpu.batch_emb.1.2.3.4.0"), // parent
		engine.MakeBatchID(at, parent, "_INBOX.x"),
	} {
		if _, _, _, _, _, err := engine.ParseBatchID(id); !errors.Is(err, commands.ErrNotFound) {
			t.Errorf("%q: %v", id, err)
		}
	}
}

// FuzzBatchID: a worker's PATCH /batches/{id} names any string; it is a
// batch (of a queue's batch consumer, with a job id as parent) or not
// found, never a crash.
func FuzzBatchID(f *testing.F) {
	at := time.UnixMilli(1_800_000_000_000)
	f.Add(engine.MakeBatchID(at, domain.NewID(), "$JS.ACK.JETFLOW_Q_gpu.batch_emb.3.42.40.1732000000000000000.0"))
	f.Add(engine.MakeBatchID(at, domain.NewID(), "$JS.ACK.d.h.JETFLOW_Q_gpu.batch_emb.3.42.40.1732000000000000000.0.r"))
	f.Add("bt-")
	f.Add("bt-AAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, id string) {
		_, parent, stream, seq, n, err := engine.ParseBatchID(id)
		if err != nil {
			if !errors.Is(err, commands.ErrNotFound) {
				t.Fatalf("%q: %v", id, err)
			}
			return
		}
		if !engine.IsBatchID(id) || !domain.ValidID(parent) || !strings.HasPrefix(stream, streams.QueueStreamPfx) || seq == 0 || n < 1 {
			t.Fatalf("%q accepted as %s %s %d %d", id, parent, stream, seq, n)
		}
	})
}

// FuzzCommandBodies: the bodies of wait, history and list, JSON or
// msgpack, decode or are refused with a client's problem.
func FuzzCommandBodies(f *testing.F) {
	for _, s := range []string{`{"id":"01ARZ3NDEKTSV4RRFFQ69G5FAV","timeout":"5s"}`, `{"id":"x","after":3,"limit":10}`,
		`{"state":"queued","limit":2,"cursor":"AQ"}`, `{"timeout":-1}`, `{"after":-1}`, `{"cursor":5}`, `[]`, ``} {
		f.Add([]byte(s), true, uint8(0))
		f.Add([]byte(s), false, uint8(1))
	}
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool, which uint8) {
		verb := []string{"wait", "history", "list"}[int(which)%3]
		_, err := engine.DecodeCommandBody(verb, body, asJSON)
		var p *engine.Problem
		if err != nil && !errors.As(err, &p) && !errors.Is(err, commands.ErrInvalidInput) {
			t.Fatalf("%s %q: %v", verb, body, err)
		}
		if p != nil && p.Status != 400 {
			t.Fatalf("%s %q: %+v", verb, body, p)
		}
	})
}
