package gateway

import (
	"testing"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

func FuzzDecodeBatchPatch(f *testing.F) {
	for _, s := range []string{`{"worker_id":"w","state":"succeeded"}`, `{"worker_id":"w","state":"failed","error":{"message":"m"},"retryable":false}`,
		`{"worker_id":"w","state":"retry_later","delay":0}`, `{"worker_id":"w","state":"queued"}`, `{"worker_id":"w","state":"succeeded","result":1}`,
		`{"state":"succeeded"}`, `{"worker_id":"w","state":"failed"}`, `{}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		b, err := decodeBatchPatch(body)
		checkDecodeError(t, err)
		if err != nil {
			return
		}
		switch {
		case b.WorkerID == "":
			t.Fatalf("accepted a report without a worker: %+v", b)
		case b.State != domain.StateSucceeded && b.State != domain.StateFailed && b.State != commands.StateRetryLater:
			t.Fatalf("accepted state %q", b.State)
		case b.State == domain.StateFailed && (b.Error == nil || b.Error.Message == ""):
			t.Fatalf("accepted a failure without a message: %+v", b)
		}
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"wait":10}`, `{"wait":"10s"}`, `{"wait":-1}`, `{"wait":1e300}`, `{"wait":null}`, `{"x":1}`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		h, err := decodeHeartbeat(body)
		checkDecodeError(t, err)
		if err == nil && h.Wait != nil && *h.Wait < 0 {
			t.Fatalf("accepted a negative wait: %+v", h)
		}
	})
}
