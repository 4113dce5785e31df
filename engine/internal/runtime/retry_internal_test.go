package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// An outcome whose write failed is written again five times in about 3 s
// whatever the error, then once a second for as long as a lease while the
// server or its stream does not answer, and not once the runtime stops.
func TestRetryOutcome(t *testing.T) {
	unavailable := fmt.Errorf("complete job X: append job.succeeded: %w", jetstream.ErrNoStreamResponse)
	refused := errors.New("complete job X: some refusal")
	for _, tc := range []struct {
		name     string
		try      int
		failed   time.Duration // the first failure, this long ago
		err      error
		stopping bool
		wait     time.Duration
		ok       bool
	}{
		{"first failure", 0, 0, refused, false, 100 * time.Millisecond, true},
		{"fifth failure", 4, 0, refused, false, 1600 * time.Millisecond, true},
		{"sixth failure, not for want of an answer", 5, 3 * time.Second, refused, false, 0, false},
		{"sixth failure, no stream answered", 5, 3 * time.Second, unavailable, false, time.Second, true},
		{"disconnected, 20 s in", 20, 20 * time.Second, fmt.Errorf("w: %w", nats.ErrDisconnected), false, time.Second, true},
		{"a publish's acknowledgement timed out", 8, 5 * time.Second, jetstream.ErrAsyncPublishTimeout, false, time.Second, true},
		{"a read's own deadline passed", 6, 4 * time.Second, fmt.Errorf("current: %w", context.DeadlineExceeded), false, time.Second, true},
		{"JetStream answered 503", 6, 4 * time.Second, &jetstream.APIError{Code: 503, Description: "JetStream system temporarily unavailable"}, false, time.Second, true},
		{"JetStream refused the request (400)", 6, 4 * time.Second, &jetstream.APIError{Code: 400, Description: "bad request"}, false, 0, false},
		{"no answer for a lease", 31, 30 * time.Second, unavailable, false, 0, false},
		{"no answer, the runtime stopping", 5, 3 * time.Second, unavailable, true, 0, false},
		{"the runtime stopping, the first failures", 1, 0, unavailable, true, 200 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Runtime{cfg: Config{Lease: 30 * time.Second}, stopping: make(chan struct{})}
			if tc.stopping {
				close(r.stopping)
			}
			wait, ok := r.retryOutcome(tc.try, time.Now().Add(-tc.failed), tc.err)
			if wait != tc.wait || ok != tc.ok {
				t.Fatalf("retryOutcome = %v, %v; want %v, %v", wait, ok, tc.wait, tc.ok)
			}
		})
	}
}
