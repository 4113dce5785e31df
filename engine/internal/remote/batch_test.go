package remote

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
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
	for ack, stream := range map[string]string{
		"$JS.ACK.JETFLOW_B_gpu.batch_emb~2Ebatch.3.42.40.1732000000000000000.0":                 "JETFLOW_B_gpu",
		"$JS.ACK.hub.ACCHASH.JETFLOW_B_gpu.batch_emb~2Ebatch.3.42.40.1732000000000000000.0.rnd": "JETFLOW_B_gpu",
		// a queue stream made before batch streams holds its batches
		"$JS.ACK.JETFLOW_Q_gpu.batch_emb~2Ebatch.3.42.40.1732000000000000000.0": "JETFLOW_Q_gpu",
	} {
		id := batchID(at, parent, ack)
		if !IsBatchID(id) || len(id) > MaxBatchIDLen || strings.ContainsAny(id, "/+=.") {
			t.Fatalf("id %q", id)
		}
		ref, err := parseBatchID(id)
		if err != nil || !ref.claimed.Equal(at) || ref.parent != parent || ref.stream != stream || ref.seq != 42 || ref.delivered != 3 {
			t.Fatalf("%s: %+v %v", ack, ref, err)
		}
		if BatchParent(id) != parent {
			t.Fatalf("parent of %s", id)
		}
	}
	for _, id := range []string{
		"bt-", "bt-***", domain.NewID(), "bt-" + strings.Repeat("A", 1100),
		batchID(at, parent, "$JS.ACK.KV_jetflow_jobs.batch_x.1.2.3.4.0"),      // not a queue's stream
		batchID(at, parent, "$JS.ACK.JETFLOW_EVENTS.batch_x.1.2.3.4.0"),       // nor this
		batchID(at, parent, "$JS.ACK.JETFLOW_Q_gpu.run_emb.1.2.3.4.0"),        // a job's consumer
		batchID(at, parent, "$JS.ACK.JETFLOW_Q_gpu.batch_emb.0.2.3.4.0"),      // delivered 0
		batchID(at, "not-an-id", "$JS.ACK.JETFLOW_Q_gpu.batch_emb.1.2.3.4.0"), // parent
		batchID(at, parent, "_INBOX.x"),
	} {
		if _, err := parseBatchID(id); !errors.Is(err, commands.ErrNotFound) {
			t.Errorf("%q: %v", id, err)
		}
	}
}

func isQueueStream(s string) bool { _, ok := streams.QueueOfStream(s); return ok }

// FuzzBatchID: a worker's PATCH /batches/{id} names any string; it is a
// batch (of a queue's batch consumer, with a job id as parent) or not
// found, never a crash.
func FuzzBatchID(f *testing.F) {
	at := time.UnixMilli(1_800_000_000_000)
	f.Add(batchID(at, domain.NewID(), "$JS.ACK.JETFLOW_Q_gpu.batch_emb.3.42.40.1732000000000000000.0"))
	f.Add(batchID(at, domain.NewID(), "$JS.ACK.JETFLOW_B_gpu.batch_emb.3.42.40.1732000000000000000.0"))
	f.Add(batchID(at, domain.NewID(), "$JS.ACK.d.h.JETFLOW_Q_gpu.batch_emb.3.42.40.1732000000000000000.0.r"))
	f.Add("bt-")
	f.Add("bt-AAAAAAAAAAAA")
	f.Fuzz(func(t *testing.T, id string) {
		ref, err := parseBatchID(id)
		if err != nil {
			if !errors.Is(err, commands.ErrNotFound) {
				t.Fatalf("%q: %v", id, err)
			}
			return
		}
		if !IsBatchID(id) || !domain.ValidID(ref.parent) || !isQueueStream(ref.stream) || ref.seq == 0 || ref.delivered < 1 {
			t.Fatalf("%q accepted as %+v", id, ref)
		}
	})
}
