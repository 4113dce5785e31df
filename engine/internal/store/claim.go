package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/streams"
)

// ConsumerName is the durable consumer that all workers of one job type on a
// queue share.
func ConsumerName(jobType string) string { return "run_" + streams.Token(jobType) }

// BatchConsumerName is the durable consumer that all workers of one batch
// type on a queue share.
func BatchConsumerName(batchType string) string { return "batch_" + streams.Token(batchType) }

// IsWorkConsumer reports whether a queue stream's consumer is one that
// workers pull work from (run_<type>, batch_<type>).
func IsWorkConsumer(name string) bool {
	return strings.HasPrefix(name, "run_") || strings.HasPrefix(name, "batch_")
}

// Defaults of the run consumers: the lease of a claim (the consumer's
// AckWait) and how many jobs of one type may be in flight across all the
// workers of a queue (its MaxAckPending).
const (
	DefaultLease         = 30 * time.Second
	DefaultMaxAckPending = 4096
)

// runConsumerConfig is the durable consumer that all workers of one job
// type on a queue share: its AckWait is the lease of a running job, its
// MaxAckPending the cluster-wide limit of jobs of that type in flight.
func runConsumerConfig(queue, jobType string, lease time.Duration, maxAckPending int) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName(jobType),
		Description:   "jetflow workers of " + jobType,
		FilterSubject: streams.RunSubject(queue, jobType),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       lease,
		MaxDeliver:    -1, // lease losses are counted in the job (max_lease_requeues), not here
		MaxAckPending: maxAckPending,
	}
}

// BatchConsumerConfig is runConsumerConfig for the batches of a batch type.
func BatchConsumerConfig(queue, batchType string, lease time.Duration, maxAckPending int) jetstream.ConsumerConfig {
	cfg := runConsumerConfig(queue, batchType, lease, maxAckPending)
	cfg.Durable = BatchConsumerName(batchType)
	cfg.Description = "jetflow workers of batches " + batchType
	cfg.FilterSubject = streams.BatchFilter(queue, batchType)
	return cfg
}

// EnsureRunConsumer creates or updates the run consumer of a job type on a
// queue, paused if the queue is paused.
func (s *Store) EnsureRunConsumer(ctx context.Context, queue, jobType string, lease time.Duration, maxAckPending int) (jetstream.Consumer, error) {
	return s.EnsureConsumer(ctx, queue, runConsumerConfig(queue, jobType, lease, maxAckPending))
}

// EnsureConsumer creates or updates a work consumer of a queue, paused if
// the queue is paused: on the queue's batch stream for a consumer of
// batches (its filter is a batch type's), on its queue stream for any
// other.
func (s *Store) EnsureConsumer(ctx context.Context, queue string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	batches, err := s.queues.BatchStream(ctx, queue)
	if err != nil {
		return nil, err
	}
	stream := streams.QueueStream(queue)
	if streams.SubjectMatches(streams.BatchesFilter(queue), cfg.FilterSubject) {
		stream = batches
	}
	rec, err := s.Queue(ctx, queue)
	if err != nil {
		return nil, err
	}
	if rec.Paused {
		cfg.PauseUntil = &pausedForever
	}
	cons, err := s.js.CreateOrUpdateConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("consumer %s on %s: %w", cfg.Durable, queue, err)
	}
	// A pause that landed between reading the queue and updating the
	// consumer would have been undone by the update: apply it again.
	if rec, err := s.Queue(ctx, queue); err == nil && rec.Paused && cfg.PauseUntil == nil {
		if _, err := s.js.PauseConsumer(ctx, stream, cfg.Durable, pausedForever); err != nil {
			return nil, err
		}
	}
	return cons, nil
}

// pausedForever is how long a paused queue's consumers are paused: until
// resumed.
var pausedForever = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Delivery is a work item as a consumer delivered it.
type Delivery struct {
	Msg  jetstream.Msg
	Meta *jetstream.MsgMetadata
	Item *domain.WorkItem
}

// DecodeDelivery reads a delivered work item; a malformed one is
// terminated (it can never be run) and nil returned.
func DecodeDelivery(msg jetstream.Msg, log *slog.Logger) *Delivery {
	meta, err := msg.Metadata()
	if err != nil {
		log.Error("work item without metadata", "err", err)
		_ = msg.Term()
		return nil
	}
	item, err := streams.DecodeWorkItem(msg.Data())
	if err != nil {
		log.Error("malformed work item dropped", "seq", meta.Sequence.Stream, "err", err)
		_ = msg.Term()
		return nil
	}
	return &Delivery{Msg: msg, Meta: meta, Item: item}
}

// Claim takes the job of a delivered work item for worker: job.started
// for a worker in this process, job.claimed (with the item's ack subject as
// the lease) for a remote one. lease is how long a claim lasts without a
// renewal (the delivering consumer's AckWait). It returns false when the
// item is not, or no longer, the job's way to run, after settling the
// message:
//
//   - the job is terminal, scheduled or waiting: the item is stale (acked);
//   - the job is held under another item that still exists: a duplicate (acked);
//   - the job is held under this item (the server delivered it again) or
//     under an item that is gone, and its holder is alive
//     (commands.LeaseExpired says no): a redelivery after a server restart
//     goes back to wait until the lease would run out (nak with that delay);
//     a duplicate of a job held under a gone item is acked;
//   - the same, and the holder's lease ran out: the lease is lost;
//     job.lease_expired_requeue (or job.lease_expired, failing the job,
//     after max_lease_requeues) and then the claim are written.
func (s *Store) Claim(ctx context.Context, qs jetstream.Stream, d *Delivery, worker string, remote bool, lease time.Duration, log *slog.Logger) (Snapshot, bool) {
	item := d.Meta.Sequence.Stream
	ack := ""
	if remote {
		ack = d.Msg.Reply()
	}
	cur := Snapshot{Job: &d.Item.Job, Rev: d.Item.Rev}
	span := tracing.ClaimTrace(ctx) // the attempt's span, if tracing is on
	var opts []Option
	if !remote {
		// The runtime writes the record of its claim once the handler has
		// run ClaimRecordAfter, unless the attempt's outcome (or another
		// write of it) comes first: a short job's record goes from queued
		// to its outcome in one write.
		opts = deferClaimRecord
	}
	for round := 0; round < 4; round++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if s.topo.Replicas > 1 {
			// A PubAck lost with a node would hold the claim for the
			// publisher's whole timeout (30 s), longer than a lease: after
			// a third of one, the read-back below says whether it landed.
			actx, cancel = context.WithTimeout(ctx, max(lease/3, time.Second))
		}
		snap, _, err := s.Apply(actx, "claim", cur, func(j *domain.Job) (*domain.Event, error) {
			now := time.Now().UTC()
			if remote {
				ev, err := commands.Claim(j, worker, item, now)
				if ev != nil {
					ev.LeaseAck, ev.Trace = ack, span
				}
				return ev, err
			}
			ev, err := commands.Start(j, worker, item, now)
			if ev != nil {
				ev.Trace = span
			}
			return ev, err
		}, opts...)
		cancel()
		if err == nil {
			return snap, true
		}
		if !errors.Is(err, commands.ErrInvalidTransition) {
			// The append may have landed though its answer was lost, or the
			// record's write failed after it: the log says whether this
			// worker holds the job now, once it can be read (the server may
			// be away for a while: a restart).
			// A worker in this process lists the job in its heartbeats
			// meanwhile, so it may read for longer than a lease; a remote
			// one does not know of the job yet.
			readFor := max(lease, readBackFor)
			if remote {
				readFor = lease
			}
			if cur, ok := s.heldAfterError(ctx, &d.Item.Job, worker, item, lease, readFor); ok {
				log.Info("claim answered with an error, but the log has it", "job", cur.Job.ID, "err", err)
				return cur, true
			}
			log.Warn("claim failed; the item will be redelivered", "job", d.Item.Job.ID, "err", err)
			_ = d.Msg.NakWithDelay(time.Second)
			return snap, false
		}
		j := snap.Job
		if !commands.Held(j) {
			_ = d.Msg.Ack()
			return snap, false
		}
		if j.LeaseItem != item && itemAlive(ctx, qs, j.LeaseItem) {
			_ = d.Msg.Ack()
			return snap, false
		}
		beat, err := s.workers.beat(ctx, j)
		if err != nil {
			log.Warn("lease check failed; the item will be redelivered", "job", j.ID, "err", err)
			_ = d.Msg.NakWithDelay(time.Second)
			return snap, false
		}
		// No worker could beat while this process's connection was away:
		// a lease is not judged here until a lease has passed since it came
		// back (the lease sweeper judges it meanwhile).
		fresh := time.Since(s.ConnectedSince()) < lease+commands.LeaseGrace
		if fresh || !commands.LeaseExpired(j, beat, lease, time.Now()) {
			// Its holder is alive: not a lost lease. Come back when the
			// lease would run out if the holder stopped renewing now. (An
			// item other than the holder's is kept too: the holder's is
			// gone, and this one is what brings the job back if the holder
			// dies.)
			wait := commands.LeaseLeft(j, beat, lease, time.Now()) + commands.LeaseGrace
			if fresh {
				wait = max(wait, lease+commands.LeaseGrace-time.Since(s.ConnectedSince()))
			}
			_ = d.Msg.NakWithDelay(max(wait, time.Second))
			return snap, false
		}
		judged := *j // as the beat was read for it
		began := time.Now()
		next, ev, err := s.Apply(ctx, "lease", snap, func(j *domain.Job) (*domain.Event, error) {
			return commands.WriteOffLease(j, &judged, beat, lease, worker, time.Now().UTC())
		})
		if err != nil && !errors.Is(err, commands.ErrInvalidTransition) {
			log.Warn("lease expiry failed; the item will be redelivered", "job", j.ID, "err", err)
			_ = d.Msg.NakWithDelay(time.Second)
			return next, false
		}
		if err == nil {
			// The holder lost it: a heartbeat waiting for news of its jobs hears it.
			_ = s.nc.Publish(streams.CancelSubject, []byte(j.ID))
			leaseWrittenOff(ctx, j, ev, began)
		}
		if next.Job.State.Terminal() {
			_ = d.Msg.Ack()
			return next, false
		}
		cur = next
	}
	_ = d.Msg.NakWithDelay(time.Second)
	return cur, false
}

// ClaimRecordAfter is how long after a local claim its record may still
// be the job's record before it (queued): the runtime writes the claim's
// record then if the attempt's outcome has not been written by then
// (Store.WriteRecord). The log has the claim at once; reads that reconcile
// with it (Current) see the job running, and the record of a job whose
// worker died in between is repaired (Current, the Projector).
const ClaimRecordAfter = 100 * time.Millisecond

var deferClaimRecord = []Option{DeferRecord}

// The read-back of a claim whose answer was lost (heldAfterError): each
// read has readBackTry to answer (a request sent while the connection is
// away can wait for an answer that never comes), and a worker in this
// process reads for readBackFor, longer than a restart of the server
// takes.
const (
	readBackTry = 5 * time.Second
	readBackFor = 2 * time.Minute
)

// errBehindLeader: a read-back answered by a replica behind the leader.
var errBehindLeader = errors.New("the replica read is behind its leader")

// heldAfterError reads a job whose claim came back with an error until it
// can, for up to readFor, and reports whether worker holds it under item
// with its lease alive. While the server is away the worker's heartbeats
// list the job, so nobody else takes it; a worker that gave up sooner
// would leave a claim that landed to run out its lease (a restart of serve
// longer than the lease did that: TestClaimReadBackOutlastsAServerRestart).
// A claim found held once its lease, counted from the claim, has run out
// is run only when a heartbeat since says the worker holds it: a worker
// cut off alone (the others connected) may have had its lease judged
// meanwhile, so it waits for its own heartbeat, or for the write-off.
// A job that is not found is not read again.
func (s *Store) heldAfterError(ctx context.Context, job *domain.Job, worker string, item uint64, lease, readFor time.Duration) (Snapshot, bool) {
	deadline := time.Now().Add(readFor)
	for pause := 50 * time.Millisecond; ; pause = min(2*pause, time.Second) {
		cur, mine, alive, err := s.readBackClaim(ctx, job, worker, item, lease)
		if err == nil && (!mine || alive) {
			return cur, mine
		}
		if errors.Is(err, commands.ErrNotFound) || time.Now().Add(pause).After(deadline) || ctx.Err() != nil {
			return Snapshot{}, false
		}
		select {
		case <-ctx.Done():
			return Snapshot{}, false
		case <-time.After(pause):
		}
	}
}

// readBackClaim is one read of heldAfterError, within readBackTry: the job
// (as its work item has it: job) as the log has it, whether worker holds
// it under item, and if so whether its lease is alive, counted from the
// claim or from a heartbeat since that lists the job (read only when the
// claim's own lease ran out).
func (s *Store) readBackClaim(ctx context.Context, job *domain.Job, worker string, item uint64, lease time.Duration) (cur Snapshot, mine, alive bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, readBackTry)
	defer cancel()
	cur, err = s.Current(ctx, job.ID)
	if s.topo.Replicas > 1 && (err == nil || errors.Is(err, commands.ErrNotFound)) {
		// A replica behind the stream's leader may have answered, without
		// the claim that is in the log (or without the job at all: a node
		// that just came back): the job is judged only once it is read as
		// far as the leader had it after that read.
		read, subject := uint64(0), streams.JobSubject(job)
		if err == nil {
			read, subject = cur.Job.Seq, streams.JobSubject(cur.Job)
		}
		last, lerr := streams.LastSeqOnLeader(ctx, s.nc, streams.EventsStream, subject)
		if lerr != nil {
			return cur, false, false, lerr
		}
		gone, berr := againstLeader(read, last, err == nil)
		switch {
		case berr != nil:
			return cur, false, false, fmt.Errorf("job %s: %w", job.ID, berr)
		case gone:
			return cur, false, false, nil // not held
		}
	}
	if err != nil {
		return cur, false, false, err
	}
	j := cur.Job
	if !commands.Held(j) || j.Worker != worker || j.LeaseItem != item {
		return cur, false, false, nil
	}
	if commands.LeaseLeft(j, commands.Beat{}, lease, time.Now()) > 0 {
		return cur, true, true, nil
	}
	beat, err := s.workers.beat(ctx, j)
	return cur, true, err == nil && commands.LeaseLeft(j, beat, lease, time.Now()) > 0, nil
}

// againstLeader judges a read of a job against its stream's leader: read
// is the last event the read found (found false: the job was not found),
// last the leader's last event on the job's subject, asked for after the
// read. A read behind the leader is errBehindLeader (read again); a job
// found where the leader has no event of it is gone (purged meanwhile);
// else the read stands, a job not found too.
func againstLeader(read, last uint64, found bool) (gone bool, err error) {
	switch {
	case read < last:
		return false, fmt.Errorf("read at event %d, the leader has %d: %w", read, last, errBehindLeader)
	case found && last == 0:
		return true, nil
	}
	return false, nil
}

// itemAlive reports whether the work item at seq of a queue's stream still
// exists (held by a worker, or waiting for redelivery).
func itemAlive(ctx context.Context, qs jetstream.Stream, seq uint64) bool {
	if seq == 0 {
		return false
	}
	_, err := qs.GetMsg(ctx, seq)
	return err == nil || !errors.Is(err, jetstream.ErrMsgNotFound)
}

// PutBack publishes the work item at seq of a queue's stream again (at a
// new sequence) and deletes it at seq: an item its consumer counts as
// acked while the stream still holds it (the lease sweeper's stranded
// items). ok is false when the item was gone already (acked meanwhile).
func (s *Store) PutBack(ctx context.Context, qs jetstream.Stream, seq uint64) (subject string, ok bool, err error) {
	stream := qs.CachedInfo().Config.Name
	m, err := qs.GetMsg(ctx, seq)
	if err != nil {
		return "", false, nil // acked meanwhile after all
	}
	msg := &nats.Msg{Subject: m.Subject, Data: m.Data, Header: nats.Header{}}
	if _, err := s.w.PublishAsync(msg, jetstream.WithMsgID("rescue-"+stream+"-"+strconv.FormatUint(seq, 10))).Wait(ctx); err != nil {
		return m.Subject, false, fmt.Errorf("put back item %d of %s: %w", seq, stream, err)
	}
	if err := qs.DeleteMsg(ctx, seq); err != nil {
		s.Log.Warn("delete a stranded item put back", "stream", stream, "seq", seq, "err", err)
	}
	return m.Subject, true, nil
}
