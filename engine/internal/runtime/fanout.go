package runtime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
)

// Defaults of a fan-out of batches.
const (
	defaultBatchMaxRetries = 3
	defaultBatchBackoff    = time.Second
)

// FanOut is what a coordinator handler returns, as its error, to defer its
// outcome to pieces: N child jobs (full jobs with their own state, events and
// retries, linked by parent) or N batches (work items with no job record,
// for very high counts). The job goes to waiting; the fan-in counter
// completes it when the pieces are done, under the failure policy.
type FanOut struct {
	Children []*commands.SubmitRequest

	BatchType       string
	BatchQueue      string   // default: the coordinator's queue
	Batches         [][]byte // JSON payloads
	BatchMaxRetries *int
	BatchBackoff    time.Duration
	BatchTimeout    time.Duration

	Policy          string // streams.PolicyAll (default), PolicyFailFast, PolicyTolerate
	MaxFailureRatio float64
	StallTimeout    time.Duration // fail the parent if no piece finishes for this long (0: the reaper's default)
}

func (f *FanOut) Error() string {
	if len(f.Children) > 0 {
		return fmt.Sprintf("fan out to %d children", len(f.Children))
	}
	return fmt.Sprintf("fan out to %d batches of %s", len(f.Batches), f.BatchType)
}

// plan is the fan-out's plan for parent j.
func (f *FanOut) plan(j *domain.Job) domain.FanoutPlan {
	p := domain.FanoutPlan{Policy: f.Policy, MaxFailureRatio: f.MaxFailureRatio, StallTimeout: f.StallTimeout}
	if len(f.Children) > 0 {
		p.Kind, p.Total = domain.FanoutChildren, len(f.Children)
	} else {
		p.Kind, p.Total = domain.FanoutBatches, len(f.Batches)
		p.BatchType, p.BatchQueue = f.BatchType, f.BatchQueue
		if p.BatchQueue == "" {
			p.BatchQueue = j.Spec.Queue
		}
	}
	if len(f.Children) > 0 && len(f.Batches) > 0 {
		p.Kind = "" // both: refused by CheckPlan
	}
	return p
}

// fanOut creates the pieces of a coordinator's attempt, then records that
// it waits for them. Pieces first: a crash between leaves them to a new
// attempt, which finds the same children (their ids are derived) and sends
// batches again (the counter takes each piece once); the other order could
// leave a parent waiting for pieces that were never made.
func (r *Runtime) fanOut(ctx context.Context, rn *run, f *FanOut) (domain.FanoutPlan, error) {
	parent := rn.snap.Job
	plan := f.plan(parent)
	if err := commands.CheckPlan(&plan); err != nil {
		return plan, &PermanentError{Err: fmt.Errorf("fan-out: %w", err)}
	}
	if plan.Kind == domain.FanoutChildren {
		reqs := make([]*commands.SubmitRequest, len(f.Children))
		for i, c := range f.Children {
			req := *c
			req.Namespace = parent.Spec.Namespace
			req.Parent = parent.ID
			req.Piece = i + 1
			req.ID = store.ChildID(parent.Spec.Namespace, parent.ID, i+1)
			req.IdempotencyKey = ""
			if req.Queue == "" {
				req.Queue = parent.Spec.Queue
			}
			reqs[i] = &req
		}
		for i := 0; i < len(reqs); i += 1000 {
			for _, res := range r.store.SubmitBatch(ctx, reqs[i:min(i+1000, len(reqs))]) {
				if res.Err != nil {
					if errors.Is(res.Err, commands.ErrInvalidInput) {
						return plan, &PermanentError{Err: fmt.Errorf("fan-out child: %w", res.Err)}
					}
					return plan, fmt.Errorf("fan-out child: %w", res.Err)
				}
			}
		}
	} else if err := r.sendBatches(ctx, parent, plan, f); err != nil {
		return plan, err
	}
	return plan, nil
}

// sendBatches publishes the batch work items, pipelined; their message ids
// make a repeat within the duplicate window a no-op.
func (r *Runtime) sendBatches(ctx context.Context, parent *domain.Job, plan domain.FanoutPlan, f *FanOut) error {
	if err := r.store.Queues().Ensure(ctx, plan.BatchQueue); err != nil {
		return err
	}
	maxRetries := defaultBatchMaxRetries
	if f.BatchMaxRetries != nil {
		maxRetries = *f.BatchMaxRetries
	}
	backoff := f.BatchBackoff
	if backoff <= 0 {
		backoff = defaultBatchBackoff
	}
	timeout := f.BatchTimeout
	if timeout <= 0 {
		timeout = parent.Spec.Timeout
	}
	return r.store.SendBatches(ctx, len(f.Batches), func(i int) (*domain.BatchItem, error) {
		body, err := commands.CompactJSON(f.Batches[i])
		if err != nil {
			return nil, &PermanentError{Err: fmt.Errorf("batch %d payload: %w", i+1, err)}
		}
		return &domain.BatchItem{Parent: parent.ID, Piece: i + 1, Type: plan.BatchType,
			Queue: plan.BatchQueue, Payload: body, MaxRetries: maxRetries, Backoff: backoff, Timeout: timeout}, nil
	})
}
