package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Defaults of a fan-out of batches.
const (
	DefaultBatchMaxRetries = 3
	DefaultBatchBackoff    = time.Second
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

// Check refuses a fan-out whose plan can never be made
// (commands.CheckPlan: its kind, count, batch type and queue, policy), as
// making its pieces would, before anything is written. A batch queue left
// out is the parent's, which is a queue.
func (f *FanOut) Check() error {
	p := f.plan(&domain.Job{Spec: domain.Spec{Queue: domain.DefaultQueue}})
	return commands.CheckPlan(&p)
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

// fanOut creates the pieces of a coordinator's attempt (Store.makePieces);
// a fan-out that can never be made (a bad plan, child or payload) fails the
// attempt for good.
func (r *Runtime) fanOut(ctx context.Context, rn *run, f *FanOut) (domain.FanoutPlan, error) {
	plan, err := r.store.makePieces(ctx, rn.snap.Job, f)
	if errors.Is(err, commands.ErrInvalidInput) {
		return plan, &PermanentError{Err: fmt.Errorf("fan-out: %w", err)}
	}
	return plan, err
}

// makePieces creates the pieces of fan-out f of parent, before the parent
// records that it waits for them: a crash between leaves them to a new
// attempt, which finds the same children (their ids are derived) and sends
// batches again (the counter takes each piece once); the other order could
// leave a parent waiting for pieces that were never made. Go coordinators
// (FanOut returned by a handler) and HTTP ones (PATCH with state waiting)
// both come here. An error matching commands.ErrInvalidInput can never
// succeed.
func (s *Store) makePieces(ctx context.Context, parent *domain.Job, f *FanOut) (domain.FanoutPlan, error) {
	plan := f.plan(parent)
	if err := commands.CheckPlan(&plan); err != nil {
		return plan, err
	}
	if plan.Kind != domain.FanoutChildren {
		return plan, s.sendBatches(ctx, parent, plan, f)
	}
	reqs := childRequests(parent, f.Children)
	for i := 0; i < len(reqs); i += 1000 {
		for _, res := range s.SubmitBatch(ctx, reqs[i:min(i+1000, len(reqs))]) {
			if res.Err != nil {
				return plan, fmt.Errorf("fan-out child: %w", res.Err)
			}
		}
	}
	return plan, nil
}

// orphans cancels the children a coordinator's attempt made when its job
// ended without waiting for them (Runtime.orphans).
func (s *Store) orphans(ctx context.Context, j *domain.Job, children int, log *slog.Logger) {
	if children == 0 || j == nil || !j.State.Terminal() || j.Fanout != nil {
		return
	}
	if err := s.cancelChildren(ctx, j.Spec.Namespace, j.ID, children, "parent job is "+string(j.State)); err != nil {
		log.Warn("cancel the children of an ended coordinator", "job", j.ID, "err", err)
	}
}

// childRequests are the submits of the children of parent's fan-out: in
// the parent's namespace, linked to it by parent and piece, with ids
// derived from the parent's (ChildID), in the parent's queue unless they
// name one. A child's idempotency key is dropped: its id is the key.
func childRequests(parent *domain.Job, children []*commands.SubmitRequest) []*commands.SubmitRequest {
	reqs := make([]*commands.SubmitRequest, len(children))
	for i, c := range children {
		req := *c
		req.Namespace = parent.Spec.Namespace
		req.Parent = parent.ID
		req.Piece = i + 1
		req.ID = ChildID(parent.Spec.Namespace, parent.ID, i+1)
		req.IdempotencyKey = ""
		if req.Queue == "" {
			req.Queue = parent.Spec.Queue
		}
		reqs[i] = &req
	}
	return reqs
}

// sendBatches publishes the batch work items, pipelined; their message ids
// make a repeat within the duplicate window a no-op.
func (s *Store) sendBatches(ctx context.Context, parent *domain.Job, plan domain.FanoutPlan, f *FanOut) error {
	if err := s.Queues.Ensure(ctx, plan.BatchQueue); err != nil {
		return err
	}
	maxRetries := DefaultBatchMaxRetries
	if f.BatchMaxRetries != nil {
		maxRetries = *f.BatchMaxRetries
	}
	backoff := f.BatchBackoff
	if backoff <= 0 {
		backoff = DefaultBatchBackoff
	}
	timeout := f.BatchTimeout
	if timeout <= 0 {
		timeout = parent.Spec.Timeout
	}
	subject := streams.BatchSubject(plan.BatchQueue, plan.BatchType, parent.ID)
	const window = 2048
	futs := make([]streams.Future, 0, window)
	flush := func() error {
		for _, fut := range futs {
			if _, err := fut.Wait(ctx); err != nil {
				return fmt.Errorf("send batch: %w", err)
			}
		}
		futs = futs[:0]
		return nil
	}
	for i, payload := range f.Batches {
		body, err := commands.CompactJSON(payload)
		if err != nil {
			return fmt.Errorf("batch %d payload: %w", i+1, err)
		}
		data, err := streams.Marshal(&domain.BatchItem{Parent: parent.ID, Piece: i + 1, Type: plan.BatchType,
			Queue: plan.BatchQueue, Payload: body, MaxRetries: maxRetries, Backoff: backoff, Timeout: timeout})
		if err != nil {
			return err
		}
		futs = append(futs, s.W.PublishAsync(&nats.Msg{Subject: subject, Data: data, Header: nats.Header{}},
			jetstream.WithMsgID(parent.ID+"-b"+strconv.Itoa(i+1))))
		if len(futs) == window {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
