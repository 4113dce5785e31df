package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
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

// plan is the fan-out's plan for parent j.
func (f *FanOut) plan(j *streams.Job) streams.FanoutPlan {
	p := streams.FanoutPlan{Policy: f.Policy, MaxFailureRatio: f.MaxFailureRatio, StallTimeout: f.StallTimeout}
	if len(f.Children) > 0 {
		p.Kind, p.Total = streams.FanoutChildren, len(f.Children)
	} else {
		p.Kind, p.Total = streams.FanoutBatches, len(f.Batches)
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
func (r *Runtime) fanOut(ctx context.Context, rn *run, f *FanOut) (decide func(*streams.Job, time.Time) (*streams.Event, error), err error) {
	parent := rn.snap.Job
	plan := f.plan(parent)
	if err := commands.CheckPlan(&plan); err != nil {
		return nil, &PermanentError{Err: fmt.Errorf("fan-out: %w", err)}
	}
	if plan.Kind == streams.FanoutChildren {
		reqs := make([]*commands.SubmitRequest, len(f.Children))
		for i, c := range f.Children {
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
		for i := 0; i < len(reqs); i += 1000 {
			for _, res := range r.store.SubmitBatch(ctx, reqs[i:min(i+1000, len(reqs))]) {
				if res.Err != nil {
					if errors.Is(res.Err, commands.ErrInvalidInput) {
						return nil, &PermanentError{Err: fmt.Errorf("fan-out child: %w", res.Err)}
					}
					return nil, fmt.Errorf("fan-out child: %w", res.Err)
				}
			}
		}
	} else if err := r.sendBatches(ctx, parent, plan, f); err != nil {
		return nil, err
	}
	worker := r.cfg.WorkerID
	return func(j *streams.Job, now time.Time) (*streams.Event, error) {
		return commands.Wait(j, plan, worker, now)
	}, nil
}

// sendBatches publishes the batch work items, pipelined; their message ids
// make a repeat within the duplicate window a no-op.
func (r *Runtime) sendBatches(ctx context.Context, parent *streams.Job, plan streams.FanoutPlan, f *FanOut) error {
	if err := r.store.Queues.Ensure(ctx, plan.BatchQueue); err != nil {
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
			return &PermanentError{Err: fmt.Errorf("batch %d payload: %w", i+1, err)}
		}
		data, err := streams.Marshal(&streams.BatchItem{Parent: parent.ID, Piece: i + 1, Type: plan.BatchType,
			Queue: plan.BatchQueue, Payload: body, MaxRetries: maxRetries, Backoff: backoff, Timeout: timeout})
		if err != nil {
			return err
		}
		futs = append(futs, r.store.W.PublishAsync(&nats.Msg{Subject: subject, Data: data, Header: nats.Header{}},
			jetstream.WithMsgID(parent.ID+"-b"+strconv.Itoa(i+1))))
		if len(futs) == window {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// BatchHandler runs one batch of a fan-out. Its error decides: nil
// succeeded; *PermanentError failed at once; *RetryLaterError again after
// the delay; any other error again with backoff while retries are left.
type BatchHandler func(ctx context.Context, b *BatchTask) error

// BatchTask is a batch as its handler sees it.
type BatchTask struct {
	Parent  string
	Piece   int // 1-based
	Attempt int
	Payload []byte // JSON
}

// BatchConsumerName is the durable consumer that all workers of one batch
// type on a queue share.
func BatchConsumerName(batchType string) string { return "batch_" + streams.Token(batchType) }

// receiveBatch is the consume callback of batch consumers.
func (r *Runtime) receiveBatch(msg jetstream.Msg) {
	if !r.acquire(msg) {
		return
	}
	go func() {
		defer r.releaseSlot()
		r.processBatch(msg)
	}()
}

// processBatch runs one batch and records its outcome as a piece event of
// its parent, before the item is acked.
func (r *Runtime) processBatch(msg jetstream.Msg) {
	ctx := context.Background()
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.Term()
		return
	}
	var item streams.BatchItem
	if err := streams.Unmarshal(msg.Data(), &item); err != nil || item.Parent == "" || item.Piece < 1 {
		r.log.Error("malformed batch dropped", "seq", meta.Sequence.Stream, "err", err)
		_ = msg.Term()
		return
	}
	if r.parents.terminal(ctx, item.Parent) {
		_ = msg.Ack() // the parent ended (cancelled, failed fast): skip the rest
		return
	}
	h := r.cfg.Batches[item.Type]
	if h == nil {
		_ = msg.NakWithDelay(time.Second)
		return
	}
	attempt := int(meta.NumDelivered)
	hctx, cancel := context.WithCancelCause(context.Background())
	hctx, cancelTimeout := context.WithTimeoutCause(hctx, item.Timeout, ErrTimeout)
	key := item.Parent + "/" + strconv.Itoa(item.Piece)
	br := &batchRun{msg: msg, parent: item.Parent, cancel: cancel, since: time.Now()}
	r.mu.Lock()
	r.batches[key] = br
	r.mu.Unlock()
	herr := r.callBatch(hctx, h, &BatchTask{Parent: item.Parent, Piece: item.Piece, Attempt: attempt, Payload: item.Payload})
	cause := context.Cause(hctx)
	cancelTimeout()
	cancel(nil)
	r.mu.Lock()
	delete(r.batches, key)
	r.mu.Unlock()

	outcome := streams.PcSucceeded
	var jerr *streams.JobError
	if herr != nil {
		var rl *RetryLaterError
		var perm *PermanentError
		switch {
		case errors.Is(cause, ErrShutdown):
			_ = msg.Nak() // another worker takes it at once
			return
		case errors.Is(cause, ErrJobCancelled):
			_ = msg.Ack()
			return
		case errors.As(herr, &rl):
			_ = msg.NakWithDelay(rl.Delay)
			return
		case !errors.As(herr, &perm) && attempt <= item.MaxRetries:
			_ = msg.NakWithDelay(min(item.Backoff<<min(attempt-1, 20), time.Minute))
			return
		}
		outcome = streams.PcFailed
		jerr = &streams.JobError{Code: errorCode(herr), Message: herr.Error()}
		if errors.Is(cause, ErrTimeout) {
			jerr.Code = CodeTimeout
		}
	}
	ev := &streams.Event{Type: outcome, JobID: item.Parent, Time: time.Now().UTC(), Piece: item.Piece,
		Attempt: attempt, Actor: r.cfg.WorkerID, Error: jerr}
	if _, err := r.store.publishPiece(ev, item.Parent+"-b"+strconv.Itoa(item.Piece)+"-done").Wait(ctx); err != nil {
		r.log.Warn("batch outcome not recorded; the batch will be redelivered", "parent", item.Parent, "piece", item.Piece, "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	crash("batch:recorded")
	_ = msg.Ack()
}

// batchRun is one batch in progress.
type batchRun struct {
	msg    jetstream.Msg
	parent string
	cancel context.CancelCauseFunc
	since  time.Time
}

func (r *Runtime) callBatch(ctx context.Context, h BatchHandler, b *BatchTask) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: ""}
		}
	}()
	return h(ctx, b)
}
