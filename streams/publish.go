package streams

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// IsConflict reports whether err is JetStream's "wrong last sequence"
// refusal, in both its single-node (10071) and replicated (10164) forms.
func IsConflict(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, domain.ErrConflict) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return false
}

// IsUnavailable reports whether err says the server, or the stream, did not
// answer: the connection is down, a request or a publish's acknowledgement
// timed out (a read's own deadline too), no stream leader responded, or
// JetStream answered 503 (a node lost, a leader being elected). The same
// write may succeed a moment later. (A stream deleted also leaves no one to
// answer: a caller retrying on this bounds its retries.)
func IsUnavailable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, jetstream.ErrAsyncPublishTimeout) || errors.Is(err, nats.ErrNoStreamResponse) ||
		errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.Code == 503
}

// Writer publishes to JetStream through the asynchronous publisher, so that
// concurrent callers share one pipelined window of in-flight publishes
// instead of one round trip each.
type Writer struct {
	JS jetstream.JetStream
	// Group, if set, is the group commit the appends to the event log go
	// through (sync always: one fsync for many appends).
	Group *GroupCommit
}

// Future is a publish in flight.
type Future struct {
	paf   jetstream.PubAckFuture
	group *groupMsg // an append through gc
	gc    *GroupCommit
	err   error
}

// FailedFuture is a Future that failed before anything was sent.
func FailedFuture(err error) Future { return Future{err: err} }

// Wait returns the stream sequence the message was stored at.
func (f Future) Wait(ctx context.Context) (uint64, error) {
	if f.err != nil {
		return 0, f.err
	}
	if f.group != nil {
		r, err := waitGroup(ctx, f.gc, f.group)
		return r.seq, err
	}
	ack, err := f.ack(ctx)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// Stored waits for the message as Wait does, and reports whether this
// publish stored it: false when the stream dropped it as a duplicate of one
// it holds (its message id, within the duplicate window), through a group
// commit too (a group holding such a message is sent again alone).
func (f Future) Stored(ctx context.Context) (bool, error) {
	if f.err != nil {
		return false, f.err
	}
	if f.group != nil {
		r, err := waitGroup(ctx, f.gc, f.group)
		return err == nil && !r.dup, err
	}
	ack, err := f.ack(ctx)
	if err != nil {
		return false, err
	}
	return !ack.Duplicate, nil
}

// ack waits for the acknowledgement of a plain publish; a refused
// expected-sequence check is a domain.ErrConflict.
func (f Future) ack(ctx context.Context) (*jetstream.PubAck, error) {
	select {
	case ack := <-f.paf.Ok():
		return ack, nil
	case err := <-f.paf.Err():
		if IsConflict(err) {
			return nil, fmt.Errorf("%w: %v", domain.ErrConflict, err)
		}
		return nil, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// PublishAsync starts publishing m. The wait for a free slot in the window is
// bounded by the publisher's stall wait.
func (w Writer) PublishAsync(m *nats.Msg, opts ...jetstream.PublishOpt) Future {
	var paf jetstream.PubAckFuture
	var err error
	for i := 0; i < 100; i++ {
		paf, err = w.JS.PublishMsgAsync(m, opts...)
		if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			break
		}
	}
	if err != nil {
		return Future{err: fmt.Errorf("publish %s: %w", m.Subject, err)}
	}
	return Future{paf: paf}
}

// PublishEventAsync starts publishing m, a message on the event log's
// stream with no expected-sequence check (a piece event), once per msgID
// within the stream's duplicate window: through the group commit if the
// Writer has one, so that under sync always it shares the fsync of the
// appends sent with it instead of taking one of its own. (A group holding
// a message id the stream has seen is refused whole, and each of it sent
// again alone: the duplicate is then dropped, the others land.)
func (w Writer) PublishEventAsync(m *nats.Msg, msgID string) Future {
	if w.Group != nil {
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		m.Header.Set(jetstream.MsgIDHeader, msgID)
		return w.Group.append(m)
	}
	return w.PublishAsync(m, jetstream.WithMsgID(msgID))
}

// Publish publishes m and waits for its acknowledgement.
func (w Writer) Publish(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (uint64, error) {
	return w.PublishAsync(m, opts...).Wait(ctx)
}

// AppendAsync appends ev to subject on the condition that the last event on
// that subject is expectSeq (0: none yet).
func (w Writer) AppendAsync(subject string, ev *domain.Event, expectSeq uint64) Future {
	m, err := EventMsg(subject, ev)
	if err != nil {
		return Future{err: err}
	}
	return w.AppendMsgAsync(m, expectSeq, "")
}

// AppendMsgAsync appends an event message (with its headers: the chain
// hash, EventMsg) on the condition that the last sequence on expectOn
// (its subject if empty) is expectSeq (0: none yet), through the group
// commit if the Writer has one.
func (w Writer) AppendMsgAsync(m *nats.Msg, expectSeq uint64, expectOn string) Future {
	if w.Group != nil {
		return w.Group.append(withExpect(m, expectSeq, expectOn))
	}
	if expectOn != "" {
		return w.PublishAsync(m, jetstream.WithExpectLastSequenceForSubject(expectSeq, expectOn))
	}
	return w.PublishAsync(m, jetstream.WithExpectLastSequencePerSubject(expectSeq))
}

// PutJobAsync writes a job record on the condition that the key's current
// revision is rev (0: the key must not exist).
func (w Writer) PutJobAsync(j *domain.Job, rev uint64) Future {
	data, err := EncodeJob(j)
	if err != nil {
		return Future{err: fmt.Errorf("encode job %s: %w", j.ID, err)}
	}
	return w.PublishAsync(&nats.Msg{Subject: KVSubject(j.ID), Data: data, Header: nats.Header{}},
		jetstream.WithExpectLastSequencePerSubject(rev))
}

// DispatchAsync publishes the work item that makes a job runnable, or, if
// it is due later, a message schedule that fires it then. The Nats-Msg-Id
// makes a repeated dispatch of the same job state a no-op within the queue
// stream's duplicate window; after that a duplicate is harmless, because
// claims are checked against the job's sequence.
func (w Writer) DispatchAsync(item *domain.WorkItem) Future {
	j := &item.Job
	data, err := Marshal(item)
	if err != nil {
		return Future{err: fmt.Errorf("encode work item %s: %w", j.ID, err)}
	}
	return w.dispatch(j, data)
}

// DispatchRecordAsync is DispatchAsync of the work item {rev, j} whose job
// is encoded already as record (EncodeJob(j), the bytes just written to
// the jobs bucket): the job is not encoded a second time.
func (w Writer) DispatchRecordAsync(j *domain.Job, rev uint64, record []byte) Future {
	return w.dispatch(j, workItemOf(rev, record))
}

func (w Writer) dispatch(j *domain.Job, data []byte) Future {
	switch {
	case commands.InQueue(j.State):
		return w.PublishAsync(&nats.Msg{Subject: RunSubject(j.Spec.Queue, j.Spec.Type), Data: data, Header: nats.Header{}},
			jetstream.WithMsgID(j.ID+"-"+strconv.FormatUint(j.Seq, 10)))
	case commands.DueLater(j.State):
		// One schedule per job subject: publishing again replaces it, so this
		// is idempotent without a message id. Schedules have a resolution of
		// a second: round up, so that a job never runs early.
		at := j.RunAt
		if now := time.Now(); at.Before(now) {
			at = now
		}
		return w.PublishAsync(&nats.Msg{Subject: SchedSubject(j.Spec.Queue, j.ID), Data: data, Header: nats.Header{}},
			jetstream.WithScheduleAt(at.Add(time.Second-1).Truncate(time.Second)),
			jetstream.WithScheduleTarget(DueSubject(j.Spec.Queue)))
	}
	return Future{err: fmt.Errorf("dispatch %s: job is %s, not runnable", j.ID, j.State)}
}
