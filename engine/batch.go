package engine

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
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

// BatchConsumerName is the durable consumer that all workers of one batch
// type on a queue share.
func BatchConsumerName(batchType string) string { return "batch_" + streams.Token(batchType) }

// batchRun is one batch in progress.
type batchRun struct {
	msg    jetstream.Msg
	parent string
	cancel context.CancelCauseFunc
	since  time.Time
}

// receiveBatch is the fetch callback of batch consumers.
func (r *Runtime) receiveBatch(msg jetstream.Msg) {
	if !r.acquire(msg) {
		return
	}
	go func() {
		defer r.releaseSlot()
		r.processBatch(msg)
	}()
}

// processBatch runs one batch, then settles it: its outcome is classified
// as a job's is (ClassifyOutcome), decided by commands.DecideBatch, and
// recorded as a piece event of its parent before the item is acked.
func (r *Runtime) processBatch(msg jetstream.Msg) {
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
		_ = msg.Nak() // arrived as the runtime began to stop: another worker takes it at once
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
	_, herr := callHandler(func() ([]byte, error) {
		return nil, h(hctx, &BatchTask{Parent: item.Parent, Piece: item.Piece, Attempt: attempt, Payload: item.Payload})
	})
	cause := context.Cause(hctx)
	cancelTimeout()
	cancel(nil)
	r.mu.Lock()
	delete(r.batches, key)
	r.mu.Unlock()

	o, _ := ClassifyOutcome(nil, herr, cause, item.Timeout)
	r.settleBatch(ctx, msg, &item, attempt, commands.DecideBatch(&item, attempt, o, errors.Is(cause, ErrJobCancelled)))
}

// settleBatch carries out what was decided of a batch's attempt
// (Store.settleBatch); a piece event that could not be written leaves the
// batch to be redelivered.
func (r *Runtime) settleBatch(ctx context.Context, msg jetstream.Msg, item *domain.BatchItem, attempt int, step commands.BatchStep) {
	if err := r.store.settleBatch(ctx, msg, item, attempt, step, r.cfg.WorkerID); err != nil {
		r.log.Warn("batch outcome not recorded; the batch will be redelivered", "parent", item.Parent, "piece", item.Piece, "err", err)
		_ = msg.NakWithDelay(time.Second)
	}
}

// batchItem is a batch's work item as it is settled: the message a worker
// in this process fetched, or the ack subject of one a remote worker holds
// (ackSubject).
type batchItem interface {
	Ack() error
	Nak() error
	NakWithDelay(time.Duration) error
}

// settleBatch carries out what was decided of a batch's attempt, by a
// worker in this process or outside it: its work item given back (now or
// after a delay), dropped, or acked once its piece event is in the log.
// An error says the piece event was not written (nothing was settled).
func (s *Store) settleBatch(ctx context.Context, msg batchItem, item *domain.BatchItem, attempt int, step commands.BatchStep, actor string) error {
	switch {
	case step.Retry && step.Delay > 0:
		return msg.NakWithDelay(step.Delay)
	case step.Retry:
		return msg.Nak() // another worker takes it at once
	case step.Drop:
		return msg.Ack()
	}
	ev := &domain.Event{Type: step.Piece, JobID: item.Parent, Time: time.Now().UTC(), Piece: item.Piece,
		Attempt: attempt, Actor: actor, Error: step.Error}
	stamp(ctx, ev)
	if _, err := s.publishPiece(ev, item.Parent+"-b"+strconv.Itoa(item.Piece)+"-done").Wait(ctx); err != nil {
		return err
	}
	crash("batch:recorded")
	return msg.Ack()
}
