package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/projections"
)

// Defaults of a fan-out of batches.
const (
	defaultBatchMaxRetries = 3
	defaultBatchBackoff    = time.Second
)

// FanOut is what a coordinator defers its outcome to: N child jobs (full
// jobs with their own state, events and retries, linked by parent) or N
// batches (work items with no job record, for very high counts). The job
// goes to waiting; the fan-in counter completes it when the pieces are
// done, under the failure policy. A Go coordinator handler returns it as
// its error (the worker runtime's FanOut); an HTTP one reports it (PATCH
// with state waiting). Both have their pieces made by MakePieces.
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
	p := f.Plan(&domain.Job{Spec: domain.Spec{Queue: domain.DefaultQueue}})
	return commands.CheckPlan(&p)
}

// Plan is the fan-out's plan for parent j.
func (f *FanOut) Plan(j *domain.Job) domain.FanoutPlan {
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

// MakePieces creates the pieces of fan-out f of parent, before the parent
// records that it waits for them: a crash between leaves them to a new
// attempt, which finds the same children (their ids are derived) and sends
// batches again (the counter takes each piece once); the other order could
// leave a parent waiting for pieces that were never made. Go coordinators
// (FanOut returned by a handler) and HTTP ones (PATCH with state waiting)
// both come here. An error matching commands.ErrInvalidInput can never
// succeed.
func (s *Store) MakePieces(ctx context.Context, parent *domain.Job, f *FanOut) (plan domain.FanoutPlan, err error) {
	plan = f.Plan(parent)
	if err := commands.CheckPlan(&plan); err != nil {
		return plan, err
	}
	if tr := tracing.Tracer(); tr != nil {
		var span trace.Span
		ctx, span = tracing.StartFanOut(ctx, tr, parent, &plan)
		defer func() { tracing.End(span, err) }()
	}
	carried, err := s.carryPieces(ctx, parent, plan)
	if err != nil {
		return plan, err
	}
	if plan.Kind != domain.FanoutChildren {
		return plan, s.sendBatches(ctx, parent, plan, f, carried)
	}
	// Said before the first child exists: a cascade of the parent that
	// ends before it waits (its worker dies after this) then finds the
	// children by number, as it would with a plan.
	if err := s.making(ctx, parent, plan); err != nil {
		return plan, fmt.Errorf("fan-out: %w", err)
	}
	reqs := childRequests(parent, f.Children)
	if len(carried) > 0 {
		left := reqs[:0]
		for _, r := range reqs {
			if !carried[r.Piece] {
				left = append(left, r)
			}
		}
		reqs = left
	}
	const chunk = 500
	for i := 0; i < len(reqs); i += chunk {
		if i > 0 {
			// A parent cancelled meanwhile: its attempt is discarded and
			// the children made so far cancelled (CancelMadeChildren);
			// making the rest would be work for nothing.
			if cur, err := s.Record(ctx, parent.ID); err == nil && cur.Job.State.Terminal() {
				return plan, fmt.Errorf("fan-out: parent %s is %s after %d of %d children: %w",
					parent.ID, cur.Job.State, i, len(reqs), commands.ErrTerminal)
			}
		}
		for _, res := range s.SubmitBatch(ctx, reqs[i:min(i+chunk, len(reqs))]) {
			if res.Err != nil {
				return plan, fmt.Errorf("fan-out child: %w", res.Err)
			}
		}
	}
	return plan, nil
}

// making writes that parent's attempt makes the children of plan
// (piece.making), once per attempt, and waits for it.
func (s *Store) making(ctx context.Context, parent *domain.Job, plan domain.FanoutPlan) error {
	ev := &domain.Event{Type: domain.PcMaking, JobID: parent.ID, Time: time.Now().UTC(),
		Fields: map[string]any{"total": plan.Total}, Plan: &plan, Prev: parent.LastHash}
	s.stamp(ctx, ev)
	_, err := s.PublishPiece(ev, parent.ID+"-making-"+strconv.FormatUint(parent.Seq, 10)).Wait(ctx)
	return err
}

// childRequests are the submits of the children of parent's fan-out: in
// the parent's namespace, linked to it by parent and piece, with ids
// derived from the parent's (ChildID), in the parent's queue unless they
// name one. A child's idempotency key is dropped: its id is the key; and
// so are its unique options (a child is one of its parent's pieces).
func childRequests(parent *domain.Job, children []*commands.SubmitRequest) []*commands.SubmitRequest {
	reqs := make([]*commands.SubmitRequest, len(children))
	for i, c := range children {
		req := *c
		req.Namespace = parent.Spec.Namespace
		req.Parent = parent.ID
		req.Piece = i + 1
		req.ID = ChildID(parent.Spec.Namespace, parent.ID, i+1)
		req.IdempotencyKey = ""
		req.UniqueKey, req.UniqueFields, req.UniqueFor, req.UniqueWhile = "", nil, nil, ""
		if req.Queue == "" {
			req.Queue = parent.Spec.Queue
		}
		reqs[i] = &req
	}
	return reqs
}

// carryPieces, for a run of a fan-out that retries only the failed
// pieces of the run it retries (Spec.FailedPieces), writes a piece.succeeded
// for each piece that succeeded there (projections.Pieces.Carried), with
// carried_from naming that run, and returns them: those are not made
// again. None when the two plans differ (every piece is made). A crash
// after it is harmless: the next attempt writes the same events again
// (one message id each; the fan-in counter takes a piece once anyway).
func (s *Store) carryPieces(ctx context.Context, parent *domain.Job, plan domain.FanoutPlan) (map[int]bool, error) {
	if !parent.Spec.FailedPieces || parent.Spec.RetryOf == "" {
		return nil, nil
	}
	earlier := projections.NewPieces()
	if err := readPieces(ctx, s.nc, parent.Spec.RetryOf, earlier, 0); err != nil {
		return nil, fmt.Errorf("fan-out: pieces of %s, which this job retries: %w", parent.Spec.RetryOf, err)
	}
	carried := earlier.Carried(plan)
	p := newPipeline(ctx, "fan-out: carry a piece over")
	now := time.Now().UTC()
	for n := 1; n <= plan.Total; n++ {
		if !carried[n] {
			continue
		}
		ev := &domain.Event{Type: domain.PcSucceeded, JobID: parent.ID, Time: now, Piece: n,
			Fields: map[string]any{"carried_from": parent.Spec.RetryOf}}
		s.stamp(ctx, ev)
		if err := p.add(s.PublishPiece(ev, parent.ID+"-p"+strconv.Itoa(n)+"-carried")); err != nil {
			return nil, err
		}
	}
	return carried, p.wait()
}

// sendBatches publishes the batch work items of f (SendBatches) but the
// carried ones.
func (s *Store) sendBatches(ctx context.Context, parent *domain.Job, plan domain.FanoutPlan, f *FanOut, carried map[int]bool) error {
	if err := s.queues.Ensure(ctx, plan.BatchQueue); err != nil {
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
	// Each batch continues the trace of the fan-out that made it.
	tp := tracing.TraceParent(trace.SpanContextFromContext(ctx))
	return s.SendBatches(ctx, len(f.Batches), func(i int) (*domain.BatchItem, error) {
		if carried[i+1] {
			return nil, nil
		}
		body, err := commands.CompactJSON(f.Batches[i])
		if err != nil {
			return nil, fmt.Errorf("batch %d payload: %w", i+1, err)
		}
		return &domain.BatchItem{Parent: parent.ID, Piece: i + 1, Type: plan.BatchType,
			Queue: plan.BatchQueue, Payload: body, MaxRetries: maxRetries, Backoff: backoff, Timeout: timeout, Trace: tp}, nil
	})
}

// CheckPieces checks the pieces of f of parent as making them would,
// writing nothing: each child's submit (commands.SubmitRequest.Spec, its
// type resolved and its payload validated against the type's schema),
// each batch's payload. A refusal names the piece:
// fanout.children[3].max_retries, fanout.batches.items[7].
func (s *Store) CheckPieces(ctx context.Context, parent *domain.Job, f *FanOut, now time.Time) error {
	for i, req := range childRequests(parent, f.Children) {
		spec, err := req.Spec(now)
		if err == nil && s.types != nil {
			_, err = s.types.Resolve(ctx, spec.Namespace, spec.Type, spec.Payload)
		}
		if err != nil {
			return pieceError(fmt.Sprintf("fanout.children[%d]", i), err)
		}
	}
	for i, b := range f.Batches {
		if _, err := commands.CompactJSON(b); err != nil {
			return &commands.InputError{Field: fmt.Sprintf("fanout.batches.items[%d]", i), Reason: err.Error()}
		}
	}
	if f.BatchMaxRetries != nil && (*f.BatchMaxRetries < 0 || *f.BatchMaxRetries > commands.MaxRetriesLimit) {
		return &commands.InputError{Field: "fanout.batches.max_retries", Value: fmt.Sprint(*f.BatchMaxRetries),
			Reason: fmt.Sprintf("must be 0-%d", commands.MaxRetriesLimit)}
	}
	return nil
}

// pieceError names the piece of an input error, and says which piece any
// other refusal is about.
func pieceError(piece string, err error) error {
	var in *commands.InputError
	if errors.As(err, &in) {
		named := *in
		named.Field = piece + "." + in.Field
		if in.Field == "" {
			named.Field = piece
		}
		return &named
	}
	return fmt.Errorf("%s: %w", piece, err)
}
