package runtime

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/pull"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/streams"
)

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

// batchRun is one batch in progress.
type batchRun struct {
	msg    jetstream.Msg
	parent string
	cancel context.CancelCauseFunc
	since  time.Time
}

// receiveBatch is the fetch callback of batch consumers.
func (r *Runtime) receiveBatch(msg jetstream.Msg) {
	p, ok := r.acquire(msg, false)
	if !ok {
		return
	}
	go r.run(msg, p, r.processBatch)
}

// processBatch runs one batch, then settles it: its outcome is classified
// as a job's is (classifyOutcome), decided by commands.DecideBatch, and
// recorded as a piece event of its parent before the item is acked. As in
// process, the slot is freed (handOver) while the outcome is recorded.
func (r *Runtime) processBatch(msg jetstream.Msg, p *place) {
	ctx := context.Background()
	meta, err := msg.Metadata()
	if err != nil {
		_ = msg.Term()
		return
	}
	var item domain.BatchItem
	if err := streams.Unmarshal(msg.Data(), &item); err != nil || item.Parent == "" || item.Piece < 1 {
		r.log.Error("malformed batch dropped", "seq", meta.Sequence.Stream, "err", err)
		_ = msg.Term()
		return
	}
	if r.isStopping() {
		_ = pull.GiveBack(msg) // arrived as the runtime began to stop: for another worker
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
	var span trace.Span
	if tr := tracing.Tracer(); tr != nil {
		_, span = tracing.StartBatch(ctx, tr, &item, attempt, r.cfg.WorkerID, false, time.Time{})
	}
	hctx, cancel := context.WithCancelCause(tracing.HandlerContext(context.Background(), span, item.Trace, ""))
	hctx, cancelTimeout := context.WithTimeoutCause(hctx, item.Timeout, ErrTimeout)
	key := item.Parent + "/" + strconv.Itoa(item.Piece)
	br := &batchRun{msg: msg, parent: item.Parent, cancel: cancel, since: time.Now()}
	if claimedHook != nil {
		claimedHook(key)
	}
	r.mu.Lock()
	late := r.graceEnd // Stop has cancelled the batches it knew of
	if !late {
		r.batches[key] = br
	}
	r.mu.Unlock()
	if late {
		cancelTimeout()
		cancel(ErrShutdown)
		if span != nil {
			tracing.EndBatch(span, commands.BatchStep{Retry: true}, ErrShutdown) // handed back: it comes again
		}
		_ = pull.GiveBack(msg) // for another worker
		return
	}
	var herr error
	if err := p.seat(hctx, item.Timeout); err != nil {
		// Stopped or cancelled while it waited for a handler slot: it
		// ends as a handler that returned at once on its context's end.
		cancel(err) // (keeps the cause of a context ended already)
		herr = hctx.Err()
	} else {
		_, herr = callHandler(func() ([]byte, error) {
			return nil, h(hctx, &BatchTask{Parent: item.Parent, Piece: item.Piece, Attempt: attempt, Payload: item.Payload})
		})
	}
	cause := context.Cause(hctx)
	cancelTimeout()
	cancel(nil)
	r.mu.Lock()
	delete(r.batches, key)
	r.mu.Unlock()

	o, _ := classifyOutcome(nil, herr, cause, item.Timeout)
	step := commands.DecideBatch(&item, attempt, o, errors.Is(cause, ErrJobCancelled))
	func() {
		defer r.handOver(p.free, 0)()
		err = r.settleBatch(ctx, msg, &item, attempt, step)
	}()
	if span != nil {
		tracing.EndBatch(span, step, err)
	}
}

// settleBatch carries out what was decided of a batch's attempt
// (Store.SettleBatch); a piece event that could not be written leaves the
// batch to be redelivered.
func (r *Runtime) settleBatch(ctx context.Context, msg jetstream.Msg, item *domain.BatchItem, attempt int, step commands.BatchStep) error {
	err := r.store.SettleBatch(ctx, msg, item, attempt, step, r.cfg.WorkerID)
	if err != nil {
		r.log.Warn("batch outcome not recorded; the batch will be redelivered", "parent", item.Parent, "piece", item.Piece, "err", err)
		_ = msg.NakWithDelay(time.Second)
	}
	return err
}
