package jetflow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
)

// Failure policies of a fan-out.
const (
	// AllMustSucceed (the default): the parent fails once every piece
	// finished and any did not succeed.
	AllMustSucceed = domain.PolicyAll
	// FailFast: the first piece that fails fails the parent and cancels the
	// rest.
	FailFast = domain.PolicyFailFast
	// Tolerate: the parent fails once more than MaxFailureRatio of its
	// pieces failed, and succeeds otherwise.
	Tolerate = domain.PolicyTolerate
)

// FanOutSpec is what a coordinator defers its outcome to: Children (full
// jobs of their own, with parent_id set) or Batches (pieces of work with no
// job record, for very high counts, run by batch handlers, see
// RegisterBatch).
type FanOutSpec struct {
	Children []*SubmitRequest // see NewRequest

	BatchType       string
	BatchQueue      string // default: the coordinator's queue
	Batches         []any  // payloads, marshalled as JSON
	BatchMaxRetries *int   // retries of a failed batch (default 3)
	BatchBackoff    time.Duration
	BatchTimeout    time.Duration

	Policy          string // AllMustSucceed (default), FailFast, Tolerate
	MaxFailureRatio float64
	StallTimeout    time.Duration // fail the parent if no piece finishes for this long (default 1h)
}

// FanOut is returned by a coordinator handler, as its error, to defer the
// job's outcome to pieces. The job goes to waiting; its record counts the
// pieces as they finish; it succeeds (with a summary as result) or fails,
// under the policy, exactly once when they are done. Pieces are made before
// the job starts waiting: a handler that runs again after a crash must fan
// out the same pieces (children are keyed by their position).
func FanOut(spec FanOutSpec) error {
	f := &engine.FanOut{BatchType: spec.BatchType, BatchQueue: spec.BatchQueue,
		BatchMaxRetries: spec.BatchMaxRetries, BatchBackoff: spec.BatchBackoff, BatchTimeout: spec.BatchTimeout,
		Policy: spec.Policy, MaxFailureRatio: spec.MaxFailureRatio, StallTimeout: spec.StallTimeout}
	for _, c := range spec.Children {
		f.Children = append(f.Children, c.command())
	}
	for i, p := range spec.Batches {
		b, err := marshalPayload(p)
		if err != nil {
			return Permanent(fmt.Errorf("batch %d: %w", i+1, err))
		}
		f.Batches = append(f.Batches, b)
	}
	return f
}

// Batch is one batch of a fan-out, as its handler sees it.
type Batch[T any] struct {
	ParentID string
	Piece    int // 1-based position among the parent's batches
	Attempt  int
	Payload  T
}

// RegisterBatch registers a handler for batches of batchType. Its error
// decides: nil succeeded; Permanent failed at once; RetryLater again after
// the delay; any other error again with backoff while the fan-out's batch
// retries last.
func RegisterBatch[T any](w *Worker, batchType string, fn func(ctx context.Context, b *Batch[T]) error, opts ...HandlerOption) {
	o := handlerOpts{queue: everyQueue}
	for _, opt := range opts {
		opt(&o)
	}
	h := func(ctx context.Context, t *engine.BatchTask) error {
		b := &Batch[T]{ParentID: t.Parent, Piece: t.Piece, Attempt: t.Attempt}
		if len(t.Payload) > 0 && string(t.Payload) != "null" {
			if err := json.Unmarshal(t.Payload, &b.Payload); err != nil {
				return Permanent(WithCode("BAD_PAYLOAD", fmt.Errorf("batch payload does not decode into %T: %w", b.Payload, err)))
			}
		}
		return fn(ctx, b)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.batches[o.queue] == nil {
		w.batches[o.queue] = map[string]engine.BatchHandler{}
	}
	w.batches[o.queue][batchType] = h
}

// Children builds the SubmitRequests of a fan-out's children from a type
// and payloads, with options applied to each.
func Children(jobType string, payloads []any, opts ...SubmitOption) ([]*SubmitRequest, error) {
	out := make([]*SubmitRequest, len(payloads))
	for i, p := range payloads {
		req, err := NewRequest(jobType, p, opts...)
		if err != nil {
			return nil, err
		}
		out[i] = req
	}
	return out, nil
}
