package remote

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Batches of a fan-out run by workers outside any jetflow process (HTTP
// workers with batch_types). A batch has no record: its work item is all
// there is, as for a Go batch handler. A remote worker holds it under its
// ack subject, which the batch's id carries (with the parent and the time
// of the claim), so that whichever gateway hears of it can renew, settle or
// give back the item; the worker's registry record lists the ids it holds,
// and only those are accepted from it. Its outcome is decided by
// commands.DecideBatch and recorded by Store.SettleBatch, as a Go batch's.

// RemoteBatch is a batch a remote worker claimed.
type RemoteBatch struct {
	ID       string
	Item     domain.BatchItem
	Attempt  int       // 1-based: the item's deliveries
	Deadline time.Time // when the attempt's timeout ends: claim time + the batch's timeout
}

// batchIDPrefix begins every batch id (and no job or worker id).
const batchIDPrefix = "bt-"

// MaxBatchIDLen bounds a batch id.
const MaxBatchIDLen = 1024

// IsBatchID reports whether id names a batch rather than a job.
func IsBatchID(id string) bool { return strings.HasPrefix(id, batchIDPrefix) }

// batchRef is what a batch id says: when it was claimed, its parent, and
// its item's ack subject, with what that subject says.
type batchRef struct {
	claimed   time.Time
	parent    string
	ack       string
	stream    string
	seq       uint64
	delivered int
}

// batchID makes the id of a batch claimed at claimed, of parent, held
// under ack: URL-safe, opaque to workers.
func batchID(claimed time.Time, parent, ack string) string {
	b := make([]byte, 8, 8+len(parent)+1+len(ack))
	binary.BigEndian.PutUint64(b, uint64(claimed.UnixMilli()))
	b = append(b, parent...)
	b = append(b, 0)
	b = append(b, ack...)
	return batchIDPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// errNoBatch is the error of a batch id that cannot name a batch.
func errNoBatch(id string) error {
	return fmt.Errorf("no batch has the id %q: %w", id, commands.ErrNotFound)
}

// parseBatchID reads a batch id: its ack subject must be one of a batch
// consumer on a queue's stream ($JS.ACK.<stream>.<consumer>.<delivered>.
// <stream seq>...; with a domain, two tokens more before the stream).
func parseBatchID(id string) (batchRef, error) {
	if !IsBatchID(id) || len(id) > MaxBatchIDLen {
		return batchRef{}, errNoBatch(id)
	}
	b, err := base64.RawURLEncoding.DecodeString(id[len(batchIDPrefix):])
	if err != nil || len(b) < 8+1 {
		return batchRef{}, errNoBatch(id)
	}
	ref := batchRef{claimed: time.UnixMilli(int64(binary.BigEndian.Uint64(b[:8])))}
	parent, ack, ok := strings.Cut(string(b[8:]), "\x00")
	if !ok || !domain.ValidID(parent) {
		return batchRef{}, errNoBatch(id)
	}
	ref.parent, ref.ack = parent, ack
	tok := strings.Split(ack, ".")
	if len(tok) >= 12 {
		tok = append(tok[:2], tok[4:]...) // $JS.ACK.<domain>.<account hash>.<stream>...
	}
	if len(tok) < 9 || tok[0] != "$JS" || tok[1] != "ACK" || !strings.HasPrefix(tok[3], "batch_") {
		return batchRef{}, errNoBatch(id)
	}
	if _, ok := streams.QueueOfStream(tok[2]); !ok {
		return batchRef{}, errNoBatch(id)
	}
	ref.stream = tok[2]
	n, err1 := strconv.Atoi(tok[4])
	seq, err2 := strconv.ParseUint(tok[5], 10, 64)
	if err1 != nil || err2 != nil || n < 1 || seq == 0 {
		return batchRef{}, errNoBatch(id)
	}
	ref.delivered, ref.seq = n, seq
	return ref, nil
}

// ackSubject is the work item of a batch a remote worker holds, settled
// through its ack subject.
type ackSubject struct {
	nc      *nats.Conn
	subject string
}

// Ack acks the item and waits for the server to confirm it.
func (a ackSubject) Ack() error {
	_, err := a.nc.Request(a.subject, []byte("+ACK"), 5*time.Second)
	return err
}

func (a ackSubject) Nak() error { return a.nc.Publish(a.subject, []byte("-NAK")) }

func (a ackSubject) NakWithDelay(d time.Duration) error {
	b, _ := json.Marshal(struct {
		Delay int64 `json:"delay"`
	}{d.Nanoseconds()})
	return a.nc.Publish(a.subject, append([]byte("-NAK "), b...))
}

func (a ackSubject) renew() error { return a.nc.Publish(a.subject, []byte("+WPI")) }

// tryClaimBatch takes one batch of a batch consumer for a remote worker: a
// batch of a parent that ended is dropped (as a Go batch worker drops it),
// one of another namespace than only's goes back at once for a worker of
// its own.
func (r *Remote) tryClaimBatch(ctx context.Context, c *runConsumer, only string) (_ *RemoteBatch, ok, skipped bool, _ error) {
	batch, err := c.cons.FetchNoWait(1)
	if err == nil {
		for msg := range batch.Messages() {
			meta, err := msg.Metadata()
			if err != nil {
				_ = msg.Term()
				continue
			}
			var item domain.BatchItem
			if err := streams.Unmarshal(msg.Data(), &item); err != nil || !domain.ValidID(item.Parent) || item.Piece < 1 {
				r.log.Error("malformed batch dropped", "seq", meta.Sequence.Stream, "err", err)
				_ = msg.Term()
				continue
			}
			parent, err := r.store.Record(ctx, item.Parent)
			if errors.Is(err, commands.ErrNotFound) || err == nil && parent.Job.State.Terminal() {
				_ = msg.Ack() // the parent ended (cancelled, failed fast): skip the rest
				continue
			}
			if err != nil {
				_ = msg.NakWithDelay(time.Second)
				return nil, false, false, err
			}
			if only != "" && parent.Job.Spec.Namespace != only {
				_ = msg.NakWithDelay(foreignDelay)
				skipped = true
				continue
			}
			now := time.Now()
			return &RemoteBatch{ID: batchID(now, item.Parent, msg.Reply()), Item: item,
				Attempt: int(meta.NumDelivered), Deadline: now.Add(item.Timeout).UTC()}, true, false, nil
		}
		err = batch.Error()
	}
	if consumerGone(err) {
		return nil, false, false, r.renew(ctx, c)
	}
	if err != nil && !errors.Is(err, nats.ErrTimeout) {
		return nil, false, false, fmt.Errorf("fetch batches %s/%s: %w", c.queue, c.jobType, err)
	}
	return nil, false, skipped, nil
}

// heldBatch is a batch a remote worker reports or renews, as it is now.
type heldBatch struct {
	ref    batchRef
	item   domain.BatchItem
	parent store.Snapshot
}

// deadline is when the attempt's execution timeout ends.
func (b *heldBatch) deadline() time.Time { return b.ref.claimed.Add(b.item.Timeout) }

// lookBatch reads what a batch id names: its parent (a parent that ended
// makes any report of it an invalid transition) and its work item (one
// that is gone was settled by another, or purged: not the worker's any
// more).
func (r *Remote) lookBatch(ctx context.Context, id string) (*heldBatch, error) {
	ref, err := parseBatchID(id)
	if err != nil {
		return nil, err
	}
	parent, err := r.store.Record(ctx, ref.parent)
	if errors.Is(err, commands.ErrNotFound) {
		return nil, fmt.Errorf("batch %s: its parent %s is gone: %w", id, ref.parent, commands.ErrInvalidTransition)
	}
	if err != nil {
		return nil, err
	}
	if parent.Job.State.Terminal() {
		_ = ackSubject{r.store.NC(), ref.ack}.Ack() // dropped, as a Go batch worker drops it
		return nil, &commands.TransitionError{JobID: ref.parent, Event: "batch report", From: parent.Job.State}
	}
	b := &heldBatch{ref: ref, parent: parent}
	queue, _ := streams.QueueOfStream(ref.stream)
	qx, ok, err := r.stream(ctx, queue)
	var raw *jetstream.RawStreamMsg
	if err == nil && (!ok || qx.Batches == nil || qx.Batches.CachedInfo().Config.Name != ref.stream) {
		err = jetstream.ErrStreamNotFound
	}
	if err == nil {
		raw, err = qx.Batches.GetMsg(ctx, ref.seq)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("batch %s is no longer in its queue (settled, or taken over after a lost lease): %w", id, commands.ErrNotClaimant)
	}
	if err != nil {
		return nil, fmt.Errorf("batch %s: %w", id, err)
	}
	if err := streams.Unmarshal(raw.Data, &b.item); err != nil || b.item.Parent != ref.parent {
		return nil, fmt.Errorf("batch %s: the item under it is not its: %w", id, commands.ErrNotClaimant)
	}
	return b, nil
}

// BatchReport is what became of a batch a remote worker reported.
type BatchReport struct {
	ID       string `json:"id"`
	ParentID string `json:"parent_id"`
	Piece    int    `json:"piece"`
	// State is succeeded (its piece done), failed (for good) or retrying
	// (back in its queue for another attempt).
	State string `json:"state"`
}

// Batch report states.
const (
	BatchSucceeded = "succeeded"
	BatchFailed    = "failed"
	BatchRetrying  = "retrying"
)

// ReportBatch records the outcome of a batch worker holds: succeeded,
// failed (retried with the batch's backoff while attempts are left and it
// is retryable) or retry_later, decided by commands.DecideBatch and
// recorded as a Go batch's (a piece event of its parent, then the item
// acked). The caller checked that the worker holds the id. A batch of a
// parent that ended is refused with ErrInvalidTransition, one whose item
// is gone with ErrNotClaimant, and so is one whose deadline passed by more
// than commands.DeadlineGrace: it is ended as TIMEOUT instead.
func (r *Remote) ReportBatch(ctx context.Context, id, worker string, rep commands.Report) (BatchReport, error) {
	o, err := rep.BatchOutcome()
	if err != nil {
		return BatchReport{}, err
	}
	b, err := r.lookBatch(ctx, id)
	if err != nil {
		return BatchReport{}, err
	}
	if time.Since(b.deadline()) > commands.DeadlineGrace {
		if _, err := r.timeOutBatch(ctx, b); err != nil {
			return BatchReport{}, err
		}
		return BatchReport{}, fmt.Errorf("batch %s: its deadline %s passed; it was ended as %s: %w",
			id, b.deadline().UTC().Format(time.RFC3339), commands.CodeTimeout, commands.ErrNotClaimant)
	}
	return r.settle(ctx, b, worker, commands.DecideBatch(&b.item, b.ref.delivered, o, false))
}

// settle carries out step for batch b and says what became of it.
func (r *Remote) settle(ctx context.Context, b *heldBatch, actor string, step commands.BatchStep) (BatchReport, error) {
	err := r.store.SettleBatch(ctx, ackSubject{r.store.NC(), b.ref.ack}, &b.item, b.ref.delivered, step, actor)
	batchSpan(ctx, b, actor, step, err)
	if err != nil {
		return BatchReport{}, fmt.Errorf("batch of %s, piece %d: %w", b.item.Parent, b.item.Piece, err)
	}
	out := BatchReport{ParentID: b.item.Parent, Piece: b.item.Piece, State: BatchRetrying}
	switch {
	case step.Piece == domain.PcSucceeded:
		out.State = BatchSucceeded
	case step.Piece == domain.PcFailed:
		out.State = BatchFailed
	}
	return out, nil
}

// timeOutBatch ends the attempt of a batch whose deadline passed, as a
// failure with code TIMEOUT (retried while its attempts last).
func (r *Remote) timeOutBatch(ctx context.Context, b *heldBatch) (BatchReport, error) {
	o := commands.Outcome{Kind: commands.Failed, Error: domain.JobError{Code: commands.CodeTimeout, Message: fmt.Sprintf(
		"execution timeout of %s passed (and %s grace) before the worker reported", b.item.Timeout, commands.DeadlineGrace)}}
	r.log.Info("batch execution timeout", "parent", b.item.Parent, "piece", b.item.Piece)
	return r.settle(ctx, b, r.store.Actor(), commands.DecideBatch(&b.item, b.ref.delivered, o, false))
}

// ReleaseBatch gives a batch a remote worker holds back to its queue at
// once (the worker unregisters, or its claim was not delivered).
func (r *Remote) ReleaseBatch(id string) error {
	ref, err := parseBatchID(id)
	if err != nil {
		return err
	}
	return ackSubject{r.store.NC(), ref.ack}.Nak()
}

// renewBatch is Renew of one batch: held (its item's lease extended), lost
// (its parent ended, its item is gone, or its deadline passed, which ends
// it as TIMEOUT), or an error (unchecked).
// The time returned is when the batch's deadline plus the grace passes.
func (r *Remote) renewBatch(ctx context.Context, id string) (held bool, due time.Time, err error) {
	b, err := r.lookBatch(ctx, id)
	switch {
	case errors.Is(err, commands.ErrNotFound) || errors.Is(err, commands.ErrInvalidTransition) || errors.Is(err, commands.ErrNotClaimant):
		return false, time.Time{}, nil
	case err != nil:
		return false, time.Time{}, err
	}
	if time.Since(b.deadline()) > commands.DeadlineGrace {
		_, err := r.timeOutBatch(ctx, b)
		return false, time.Time{}, err
	}
	return true, b.deadline().Add(commands.DeadlineGrace), ackSubject{r.store.NC(), b.ref.ack}.renew()
}

// ClaimsSeen are the claims of a worker that p may see: those of jobs of
// a namespace it sees (a batch is its parent's), nsOf telling a job's
// namespace (false: not known, left out). A worker of a free-form type,
// or an HTTP worker of every namespace, runs other namespaces' jobs too:
// a namespaced principal is not shown their ids. A new slice: claims may
// be a shared record's.
func ClaimsSeen(p *commands.Principal, claims []string, nsOf func(job string) (string, bool)) []string {
	if !p.Scoped() {
		return claims
	}
	out := make([]string, 0, len(claims))
	for _, id := range claims {
		if ns, ok := nsOf(ClaimJob(id)); ok && p.Sees(ns) {
			out = append(out, id)
		}
	}
	return out
}

// ClaimJob is the job a worker's claim id is of: the parent of a batch,
// else the id itself.
func ClaimJob(id string) string {
	if IsBatchID(id) {
		return BatchParent(id)
	}
	return id
}

// BatchParent is the parent of the batch id names ("" if it names none).
func BatchParent(id string) string {
	ref, err := parseBatchID(id)
	if err != nil {
		return ""
	}
	return ref.parent
}
