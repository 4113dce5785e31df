package remote

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Remote serves workers that run outside any jetflow process: the HTTP
// worker protocol. It keeps no state of its own, so any number of gateways
// can serve one worker: a claim's lease is its work item's ack deadline, as
// for workers in process, and the item's ack subject is kept in the job
// record (LeaseAck), so whichever gateway a heartbeat or a report reaches can
// renew or settle the item. A worker whose heartbeats stop loses its claims
// to the core's lease rules: the server redelivers the item, and whoever
// gets it requeues the job (job.lease_expired_requeue).
type Remote struct {
	store *store.Store
	lease time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	ensured map[string]jetstream.Consumer // queue + "/" + type
	streams map[string]streams.QueueSet
	names   []string // the queues that exist, as of namesAt
	namesAt time.Time
}

// Limits of what one remote worker serves: every (queue, type) pair is a
// run consumer on the server, created by the worker's first claim.
const (
	MaxRemoteTypes  = 64
	MaxRemoteQueues = 16
	maxRemotePairs  = 256 // types × queues
)

// CheckRemoteScope refuses a worker scope over the limits with a
// *commands.InputError on "types".
func CheckRemoteScope(queues, types []string) error {
	if len(types) > MaxRemoteTypes || len(queues) > MaxRemoteQueues || len(types)*max(len(queues), 1) > maxRemotePairs {
		return &commands.InputError{Field: "types", Reason: fmt.Sprintf(
			"%d types on %d queues: at most %d types, %d queues and %d types × queues",
			len(types), len(queues), MaxRemoteTypes, MaxRemoteQueues, maxRemotePairs)}
	}
	return nil
}

// New returns a Remote whose claims hold a lease of lease (the AckWait of
// run consumers it creates; 0: store.DefaultLease). Remote workers must
// heartbeat well within it.
func New(s *store.Store, lease time.Duration, log *slog.Logger) *Remote {
	if lease <= 0 {
		lease = store.DefaultLease
	}
	if log == nil {
		log = slog.Default()
	}
	return &Remote{store: s, lease: lease, log: log.With("component", "remote"),
		ensured: map[string]jetstream.Consumer{}, streams: map[string]streams.QueueSet{}}
}

type runConsumer struct {
	queue, jobType, subject string
	batch                   bool // a batch consumer: jobType is a batch type
	cons                    jetstream.Consumer
	qs                      jetstream.Stream
}

// queueNames are the queues that exist, read at most once a second per
// Remote: what a worker that names no queues serves.
func (r *Remote) queueNames(ctx context.Context) ([]string, error) {
	r.mu.Lock()
	if time.Since(r.namesAt) < time.Second {
		names := r.names
		r.mu.Unlock()
		return names, nil
	}
	r.mu.Unlock()
	recs, err := r.store.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(recs))
	for _, q := range recs {
		names = append(names, q.Name)
	}
	r.mu.Lock()
	r.names, r.namesAt = names, time.Now()
	r.mu.Unlock()
	return names, nil
}

// stream returns a queue's streams, ok false if the queue does not exist
// (a claim does not create queues: it only has nothing to claim there
// until a job is submitted to it).
func (r *Remote) stream(ctx context.Context, q string) (qx streams.QueueSet, ok bool, err error) {
	r.mu.Lock()
	qx, ok = r.streams[q]
	r.mu.Unlock()
	if ok {
		return qx, true, nil
	}
	qx, err = streams.QueueStreams(ctx, r.store.JS(), q)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return qx, false, nil
	}
	if err != nil {
		return qx, false, err
	}
	if qx.Batches != nil { // else its batch stream is missing: looked up again next time
		r.mu.Lock()
		r.streams[q] = qx
		r.mu.Unlock()
	}
	return qx, true, nil
}

// consumer returns the run consumer of a type (or the batch consumer of a
// batch type) on an existing queue, from the cache or created.
func (r *Remote) consumer(ctx context.Context, q, t string, batch bool, qs jetstream.Stream) (runConsumer, error) {
	key, subject := q+"/"+t, streams.RunSubject(q, t)
	if batch {
		key, subject = "batch:"+key, streams.BatchFilter(q, t)
	}
	r.mu.Lock()
	cons := r.ensured[key]
	r.mu.Unlock()
	if cons == nil {
		var err error
		if batch {
			cons, err = r.store.EnsureConsumer(ctx, q, store.BatchConsumerConfig(q, t, r.lease, store.DefaultMaxAckPending))
		} else {
			cons, err = r.store.EnsureRunConsumer(ctx, q, t, r.lease, store.DefaultMaxAckPending)
		}
		if err != nil {
			return runConsumer{}, err
		}
		r.mu.Lock()
		r.ensured[key] = cons
		r.mu.Unlock()
	}
	return runConsumer{queue: q, jobType: t, subject: subject, batch: batch, cons: cons, qs: qs}, nil
}

// renew drops a consumer that is gone from the server (deleted by an
// operator, or with its stream) from the cache and creates it again.
func (r *Remote) renew(ctx context.Context, c *runConsumer) error {
	key := c.queue + "/" + c.jobType
	if c.batch {
		key = "batch:" + key
	}
	r.mu.Lock()
	delete(r.ensured, key)
	r.mu.Unlock()
	r.log.Warn("run consumer is gone; creating it again", "queue", c.queue, "type", c.jobType, "batch", c.batch)
	fresh, err := r.consumer(ctx, c.queue, c.jobType, c.batch, c.qs)
	if err != nil {
		return err
	}
	*c = fresh
	return nil
}

// consumerGone reports whether err says a consumer no longer exists on
// the server (a pull to it has no responder).
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, nats.ErrNoResponders)
}

// Claim long-polls for a work item of one of types on one of queues (none:
// every queue, those created meanwhile included) and claims its job for
// worker (queued -> claimed): the oldest waiting item of them all (by the
// time it was queued), whatever its type or queue. It returns a zero
// Snapshot (Job nil) when none came within wait. It waits on the run
// subjects themselves (a publish wakes it), not on a timer.
//
// Age is read from the server before each round (the next undelivered
// item of each consumer that has items); when claimers race, the one that
// loses an item takes the next, and the revision-checked claim decides who
// holds a job.
func (r *Remote) Claim(ctx context.Context, worker string, queues, types []string, wait time.Duration, only string) (store.Snapshot, error) {
	c, err := r.ClaimWork(ctx, Scope{Worker: worker, Queues: queues, Types: types, Only: only}, wait)
	return c.Snapshot, err
}

// Scope is what a remote worker serves: its job types and batch types on
// its queues (none: every queue), of every namespace or Only one.
type Scope struct {
	Worker     string
	Queues     []string
	Types      []string
	BatchTypes []string
	Only       string
}

// Claimed is what a claim got: a job (Snapshot.Job), a batch, or nothing.
type Claimed struct {
	store.Snapshot
	Batch *RemoteBatch
}

// ClaimWork is Claim for a worker that may run batches too: the oldest
// waiting item of its job types and batch types, whatever its kind. A
// batch claimed writes nothing (it has no record): it is the worker's
// until it reports it (ReportBatch), gives it back (ReleaseBatch) or
// stops renewing it.
func (r *Remote) ClaimWork(ctx context.Context, sc Scope, wait time.Duration) (Claimed, error) {
	worker, queues, types, only := sc.Worker, sc.Queues, sc.Types, sc.Only
	if worker == "" {
		return Claimed{}, &commands.InputError{Field: "worker_id", Reason: "is required"}
	}
	if len(types) == 0 && len(sc.BatchTypes) == 0 {
		return Claimed{}, &commands.InputError{Field: "types", Reason: "a worker needs at least one job type"}
	}
	if err := CheckRemoteScope(queues, append(slices.Clip(types), sc.BatchTypes...)); err != nil {
		return Claimed{}, err
	}
	for _, q := range queues {
		if !domain.ValidQueue(q) {
			return Claimed{}, &commands.InputError{Field: "queues", Reason: fmt.Sprintf("%q is not a queue name", q)}
		}
	}
	for _, t := range append(slices.Clip(types), sc.BatchTypes...) {
		if !domain.ValidType(t) {
			return Claimed{}, &commands.InputError{Field: "types", Reason: fmt.Sprintf("%q is not a job type", t)}
		}
		if strings.HasPrefix(t, commands.ScopeInternal+":") {
			return Claimed{}, fmt.Errorf("type %s: @internal types are run by the engine itself, never by a remote worker: %w",
				t, commands.ErrInternalType)
		}
	}
	every := len(queues) == 0
	deadline := time.Now().Add(wait)
	var wake chan struct{}
	for {
		qnames := queues
		if every {
			var err error
			if qnames, err = r.queueNames(ctx); err != nil {
				return Claimed{}, err
			}
		}
		order, err := r.byAge(ctx, qnames, types, sc.BatchTypes)
		if err != nil {
			return Claimed{}, err
		}
		for _, c := range order {
			got, ok, err := r.tryClaim(ctx, c, worker, only)
			if err != nil {
				return Claimed{}, err
			}
			if ok {
				return got, nil
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Claimed{}, nil
		}
		if wake == nil {
			// Subscribe once, then look again, so that nothing published
			// between the look and the subscribe is missed. Queues that do
			// not exist yet are listened to as well: a submit creates them.
			wake = make(chan struct{}, 1)
			listen := queues
			if every {
				listen = []string{"*"}
			}
			var subs []*nats.Subscription
			defer func() {
				for _, s := range subs {
					_ = s.Unsubscribe()
				}
			}()
			var subjects []string
			for _, q := range listen {
				for _, t := range types {
					subjects = append(subjects, streams.RunSubject(q, t))
				}
				for _, t := range sc.BatchTypes {
					subjects = append(subjects, streams.BatchFilter(q, t))
				}
			}
			for _, subject := range subjects {
				sub, err := r.store.NC().Subscribe(subject, func(*nats.Msg) {
					select {
					case wake <- struct{}{}:
					default:
					}
				})
				if err != nil {
					return Claimed{}, err
				}
				subs = append(subs, sub)
			}
			continue
		}
		// Redeliveries (expired leases) do not publish on the subject: look
		// again at least every second for them.
		t := time.NewTimer(min(left, time.Second))
		select {
		case <-wake:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Claimed{}, ctx.Err()
		}
		t.Stop()
	}
}

// byAge returns the run consumers of the (queue, type) pairs that have
// work waiting, ordered by the age of their next waiting item, oldest
// first, then those whose items are all in flight (one may come back
// after a lost lease); paused ones are left out. One request per queue
// says which of its run subjects hold items at all, so an idle pair costs
// nothing more, and its consumer is only created once it has work. A single
// candidate is returned as is: its fetch is the look.
func (r *Remote) byAge(ctx context.Context, queues, types, batchTypes []string) ([]*runConsumer, error) {
	var cands []*runConsumer
	for _, q := range queues {
		qx, ok, err := r.stream(ctx, q)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		info, err := qx.Run.Info(ctx, jetstream.WithSubjectFilter(streams.RunFilter(q)))
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			r.mu.Lock()
			delete(r.streams, q)
			r.mu.Unlock()
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", q, err)
		}
		for _, t := range types {
			if info.State.Subjects[streams.RunSubject(q, t)] == 0 {
				continue
			}
			c, err := r.consumer(ctx, q, t, false, qx.Run)
			if err != nil {
				return nil, err
			}
			cands = append(cands, &c)
		}
		if len(batchTypes) == 0 || qx.Batches == nil {
			continue
		}
		// Batches are on a subject per parent: one more request says which
		// batch types have any.
		binfo, err := qx.Batches.Info(ctx, jetstream.WithSubjectFilter(streams.BatchesFilter(q)))
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", q, err)
		}
		for _, t := range batchTypes {
			prefix := strings.TrimSuffix(streams.BatchFilter(q, t), "*")
			has := false
			for subj, n := range binfo.State.Subjects {
				if n > 0 && strings.HasPrefix(subj, prefix) {
					has = true
					break
				}
			}
			if !has {
				continue
			}
			c, err := r.consumer(ctx, q, t, true, qx.Batches)
			if err != nil {
				return nil, err
			}
			cands = append(cands, &c)
		}
	}
	if len(cands) <= 1 {
		return cands, nil
	}
	type aged struct {
		c   *runConsumer
		at  time.Time
		seq uint64
	}
	var ready []aged
	var redeliver []*runConsumer
	for _, c := range cands {
		info, err := c.cons.Info(ctx)
		if consumerGone(err) {
			if err = r.renew(ctx, c); err == nil {
				info, err = c.cons.Info(ctx)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("run consumer %s/%s: %w", c.queue, c.jobType, err)
		}
		if info.Paused {
			continue
		}
		if info.NumPending == 0 {
			if info.NumAckPending > 0 {
				redeliver = append(redeliver, c) // held items may come back after a lost lease
			}
			continue
		}
		msg, err := c.qs.GetMsg(ctx, info.Delivered.Stream+1, jetstream.WithGetMsgSubject(c.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			redeliver = append(redeliver, c) // taken meanwhile
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("peek %s: %w", c.subject, err)
		}
		ready = append(ready, aged{c: c, at: msg.Time, seq: msg.Sequence})
	}
	sort.SliceStable(ready, func(i, k int) bool {
		if !ready[i].at.Equal(ready[k].at) {
			return ready[i].at.Before(ready[k].at)
		}
		return ready[i].seq < ready[k].seq
	})
	out := make([]*runConsumer, 0, len(ready)+len(redeliver))
	for _, a := range ready {
		out = append(out, a.c)
	}
	return append(out, redeliver...), nil
}

// dropChild cancels a child the worker just claimed whose parent ended.
func (r *Remote) dropChild(ctx context.Context, snap store.Snapshot, worker string) {
	_, ev, err := r.store.RecordOutcome(ctx, "cancel", snap, store.Attempt{Worker: worker},
		commands.Outcome{Kind: commands.ParentEnded, Reason: store.ErrParentGone.Error()}, store.WaitForCascade)
	if err != nil {
		r.log.Warn("cancel a child whose parent ended", "job", snap.Job.ID, "err", err)
	}
	endAttempt(ctx, snap.Job, ev)
}

func (r *Remote) tryClaim(ctx context.Context, c *runConsumer, worker, only string) (Claimed, bool, error) {
	// Items of another namespace than only's go back for their own
	// workers; a few are passed over before this consumer is given up
	// until the next look.
	for skipped := 0; ; skipped++ {
		var got Claimed
		var ok, skip bool
		var err error
		if c.batch {
			got.Batch, ok, skip, err = r.tryClaimBatch(ctx, c, only)
		} else {
			got.Snapshot, ok, skip, err = r.tryClaimOne(ctx, c, worker, only)
		}
		if !skip || skipped >= maxForeignSkips {
			return got, ok, err
		}
	}
}

// maxForeignSkips bounds the items of other namespaces one claim passes
// over in one consumer.
const maxForeignSkips = 16

func (r *Remote) tryClaimOne(ctx context.Context, c *runConsumer, worker, only string) (_ store.Snapshot, ok, skipped bool, _ error) {
	batch, err := c.cons.FetchNoWait(1)
	if err == nil {
		for msg := range batch.Messages() {
			d := store.DecodeDelivery(msg, r.log)
			if d == nil {
				continue
			}
			if !commands.ClaimableBy(only, d.Item.Job.Spec.Namespace) {
				// Not this worker's namespace: back to the queue at once for
				// a worker that may run it (a short delay, so that this
				// claim's next fetch gets the item after it).
				_ = msg.NakWithDelay(foreignDelay)
				skipped = true
				continue
			}
			snap, ok := r.store.Claim(claimContext(ctx, &d.Item.Job), c.qs, d, worker, true, r.lease, r.log)
			if ok && r.store.ParentEnded(ctx, snap.Job) {
				// Read after the claim is in the log: a child whose parent
				// was cancelled before it is never handed out.
				r.dropChild(ctx, snap, worker)
				_ = msg.Ack()
				return store.Snapshot{}, false, false, nil
			}
			if ok {
				return snap, true, false, nil
			}
		}
		err = batch.Error()
	}
	if consumerGone(err) {
		// Created again for the next look; nothing to claim from it now.
		return store.Snapshot{}, false, false, r.renew(ctx, c)
	}
	if err != nil && !errors.Is(err, nats.ErrTimeout) {
		return store.Snapshot{}, false, false, fmt.Errorf("fetch %s/%s: %w", c.queue, c.jobType, err)
	}
	return store.Snapshot{}, false, skipped, nil
}

// foreignDelay is how long an item passed over for its namespace waits
// before it is delivered again.
const foreignDelay = 200 * time.Millisecond

// Renewal is what a heartbeat's renewal found of a worker's claims.
type Renewal struct {
	// Held are the claims whose leases were renewed: the worker holds them.
	Held []string
	// Lost are the claims the worker no longer holds: the job is gone, or
	// it moved on (finished, cancelled, requeued after a lost lease).
	Lost []string
	// Unchecked are the claims that could not be looked at now (a
	// transient error: NATS slow or unreachable). They are not lost: the
	// next heartbeat looks again, and their leases run on meanwhile.
	Unchecked []string
	// Due is the earliest moment a batch held is ended for its deadline
	// (zero: none held).
	Due time.Time
}

// Renew extends the leases of the jobs worker holds among ids (a
// heartbeat). Only a job that is not found, or that the worker does not
// hold any more, is lost; a job that could not be read or renewed is
// unchecked, and the error says why.
func (r *Remote) Renew(ctx context.Context, worker string, ids []string) (Renewal, error) {
	var rn Renewal
	var errs []error
	for _, id := range ids {
		if IsBatchID(id) {
			held, due, err := r.renewBatch(ctx, id)
			switch {
			case err != nil:
				rn.Unchecked = append(rn.Unchecked, id)
				errs = append(errs, fmt.Errorf("renew %s: %w", id, err))
			case held:
				rn.Held = append(rn.Held, id)
				if rn.Due.IsZero() || due.Before(rn.Due) {
					rn.Due = due
				}
			default:
				rn.Lost = append(rn.Lost, id)
			}
			continue
		}
		snap, err := r.store.Record(ctx, id)
		if errors.Is(err, commands.ErrNotFound) {
			rn.Lost = append(rn.Lost, id)
			continue
		}
		if err != nil {
			rn.Unchecked = append(rn.Unchecked, id)
			errs = append(errs, fmt.Errorf("renew %s: %w", id, err))
			continue
		}
		if commands.CheckHolder(snap.Job, worker) != nil || snap.Job.LeaseAck == "" {
			rn.Lost = append(rn.Lost, id)
			continue
		}
		if err := r.store.NC().Publish(snap.Job.LeaseAck, []byte("+WPI")); err != nil {
			rn.Unchecked = append(rn.Unchecked, id)
			errs = append(errs, fmt.Errorf("renew %s: %w", id, err))
			continue
		}
		rn.Held = append(rn.Held, id)
	}
	return rn, errors.Join(errs...)
}

// Report applies a remote worker's report on a job it holds, on one read
// of the job: checked as a whole first (commands.CheckReport: a refused
// report writes nothing of itself), then its progress, then its state: a
// start (claimed -> running), or an outcome recorded as an attempt's end is
// (Store.RecordOutcome), which acks the job's work item through the ack subject
// kept in the record.
func (r *Remote) Report(ctx context.Context, id, worker string, rep commands.Report, progress *domain.Progress) (store.Snapshot, error) {
	cur, err := r.store.Current(ctx, id)
	if err != nil {
		return cur, err
	}
	if err := commands.CheckReport(cur.Job, worker, rep, progress, time.Now().UTC()); err != nil {
		return cur, err
	}
	a := r.attempt(worker)
	if cur, err = r.annotations(ctx, cur, a, worker, progress, rep.Event); err != nil {
		return cur, err
	}
	if rep.State == "" {
		return cur, nil
	}
	o, ends, err := rep.Outcome()
	if err != nil {
		return cur, err
	}
	if !ends {
		return r.store.Annotate(ctx, "start", cur, a, func(j *domain.Job, now time.Time) (*domain.Event, error) {
			ev, err := commands.Start(j, worker, j.LeaseItem, now)
			if ev != nil {
				ev.LeaseAck, ev.Trace = j.LeaseAck, j.AttemptTrace // the attempt's span stays its claim's
			}
			return ev, err
		})
	}
	op := "complete"
	if o.Kind == commands.GivenBack {
		op = "requeue"
	}
	next, ev, err := r.store.RecordOutcome(ctx, op, cur, a, o)
	endAttempt(ctx, cur.Job, ev)
	return next, err
}

// annotations writes what a report says about the attempt before its
// state: its progress, then the handler's own event.
func (r *Remote) annotations(ctx context.Context, cur store.Snapshot, a store.Attempt, worker string, progress *domain.Progress, ev *commands.EventReport) (store.Snapshot, error) {
	var err error
	if progress != nil {
		if cur, err = r.store.Annotate(ctx, "progress", cur, a, func(j *domain.Job, now time.Time) (*domain.Event, error) {
			return commands.Progress(j, *progress, worker, now)
		}); err != nil {
			return cur, err
		}
	}
	if ev != nil {
		if cur, err = r.store.Annotate(ctx, "emit", cur, a, func(j *domain.Job, now time.Time) (*domain.Event, error) {
			return ev.Decide(j, worker, now)
		}); err != nil {
			return cur, err
		}
	}
	return cur, nil
}

// attempt is a remote worker's attempt: known by its worker id (the
// record's worker), its item acked through the ack subject kept in the
// record (so that whichever gateway hears the report can settle it).
func (r *Remote) attempt(worker string) store.Attempt {
	return store.Attempt{Worker: worker, Settle: func(j *domain.Job) {
		if j.LeaseAck != "" {
			_ = r.store.NC().Publish(j.LeaseAck, []byte("+ACK"))
		}
	}}
}

// Start records that worker started the job it claimed (claimed -> running).
func (r *Remote) Start(ctx context.Context, id, worker string) (store.Snapshot, error) {
	return r.Report(ctx, id, worker, commands.Report{State: domain.StateRunning}, nil)
}

// Succeed records the result of a job worker holds.
func (r *Remote) Succeed(ctx context.Context, id, worker string, result []byte) (store.Snapshot, error) {
	return r.Report(ctx, id, worker, commands.Report{State: domain.StateSucceeded, Result: result}, nil)
}

// Fail records a failed attempt of a job worker holds; retryable failures
// are retried with the job's backoff while retries are left.
func (r *Remote) Fail(ctx context.Context, id, worker string, jerr domain.JobError, retryable bool) (store.Snapshot, error) {
	return r.Report(ctx, id, worker, commands.Report{State: domain.StateFailed, Error: &jerr, Retryable: &retryable}, nil)
}

// Progress records a job's progress reported by the worker that holds it.
func (r *Remote) Progress(ctx context.Context, id, worker string, p domain.Progress) (store.Snapshot, error) {
	return r.Report(ctx, id, worker, commands.Report{}, &p)
}

// Release gives a job worker holds back to its queue at once (the worker
// unregisters or shuts down): job.requeued.
func (r *Remote) Release(ctx context.Context, id, worker, reason string) (store.Snapshot, error) {
	return r.Report(ctx, id, worker, commands.Report{State: domain.StateQueued, Reason: reason}, nil)
}
