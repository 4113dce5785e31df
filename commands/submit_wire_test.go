package commands_test

import (
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/streams"
)

// run_at over msgpack is a timestamp or an RFC 3339 string, as in JSON;
// every other field decodes as before, strictly.
func TestSubmitRunAtOverMsgpack(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, v := range []any{at, "2030-01-02T03:04:05Z", "2030-01-02T04:04:05+01:00"} {
		b, _ := msgpack.Marshal(map[string]any{"type": "x", "run_at": v, "max_retries": 2, "queue": "q"})
		var req commands.SubmitRequest
		if err := streams.UnmarshalStrict(b, &req); err != nil {
			t.Fatalf("%v: %v", v, err)
		}
		if req.RunAt == nil || !req.RunAt.Equal(at) || req.Type != "x" || *req.MaxRetries != 2 || req.Queue != "q" {
			t.Fatalf("%v: %+v", v, req)
		}
	}
	for _, body := range []map[string]any{
		{"type": "x", "run_at": "tomorrow"},
		{"type": "x", "run_at": 5},
		{"type": "x", "unknown": 1},
		{"type": "x", "max_retries": "three"},
	} {
		b, _ := msgpack.Marshal(body)
		var req commands.SubmitRequest
		if err := streams.UnmarshalStrict(b, &req); err == nil {
			t.Fatalf("%v decoded: %+v", body, req)
		}
	}
	b, _ := msgpack.Marshal(map[string]any{"type": "x"})
	var req commands.SubmitRequest
	if err := streams.UnmarshalStrict(b, &req); err != nil || req.RunAt != nil {
		t.Fatalf("no run_at: %+v %v", req, err)
	}
}
