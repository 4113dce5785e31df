package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
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
	store *Store
	lease time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	ensured map[string]jetstream.Consumer // queue + "/" + type
	streams map[string]jetstream.Stream
}

// NewRemote returns a Remote whose claims hold a lease of lease (the
// AckWait of run consumers it creates; 0: DefaultLease). Remote workers
// must heartbeat well within it.
func NewRemote(store *Store, lease time.Duration, log *slog.Logger) *Remote {
	if lease <= 0 {
		lease = DefaultLease
	}
	if log == nil {
		log = slog.Default()
	}
	return &Remote{store: store, lease: lease, log: log.With("component", "remote"),
		ensured: map[string]jetstream.Consumer{}, streams: map[string]jetstream.Stream{}}
}

// Lease is how long a remote claim lasts without a heartbeat.
func (r *Remote) Lease() time.Duration { return r.lease }

type runConsumer struct {
	queue, jobType string
	cons           jetstream.Consumer
	qs             jetstream.Stream
}

func (r *Remote) consumers(ctx context.Context, queues, types []string) ([]runConsumer, error) {
	var out []runConsumer
	for _, q := range queues {
		for _, t := range types {
			if !streams.ValidQueue(q) {
				return nil, &commands.InputError{Field: "queues", Reason: fmt.Sprintf("%q is not a queue name", q)}
			}
			if !streams.ValidType(t) {
				return nil, &commands.InputError{Field: "types", Reason: fmt.Sprintf("%q is not a job type", t)}
			}
			key := q + "/" + t
			r.mu.Lock()
			cons, qs := r.ensured[key], r.streams[q]
			r.mu.Unlock()
			if cons == nil {
				var err error
				if cons, err = r.store.EnsureRunConsumer(ctx, q, t, r.lease, DefaultMaxAckPending); err != nil {
					return nil, err
				}
				if qs, err = r.store.JS.Stream(ctx, streams.QueueStream(q)); err != nil {
					return nil, err
				}
				r.mu.Lock()
				r.ensured[key], r.streams[q] = cons, qs
				r.mu.Unlock()
			}
			out = append(out, runConsumer{queue: q, jobType: t, cons: cons, qs: qs})
		}
	}
	return out, nil
}

// Claim long-polls for a work item of one of types on one of queues and
// claims its job for worker (queued -> claimed). It returns a zero Snapshot
// (Job nil) when none came within wait. It waits on the run subjects
// themselves (a publish wakes it), not on a timer.
func (r *Remote) Claim(ctx context.Context, worker string, queues, types []string, wait time.Duration) (Snapshot, error) {
	if worker == "" {
		return Snapshot{}, &commands.InputError{Field: "worker_id", Reason: "is required"}
	}
	if len(types) == 0 {
		return Snapshot{}, &commands.InputError{Field: "types", Reason: "a worker needs at least one job type"}
	}
	if len(queues) == 0 {
		queues = []string{streams.DefaultQueue}
	}
	cs, err := r.consumers(ctx, queues, types)
	if err != nil {
		return Snapshot{}, err
	}
	deadline := time.Now().Add(wait)
	var wake chan struct{}
	for {
		for _, c := range cs {
			snap, ok, err := r.tryClaim(ctx, c, worker)
			if err != nil {
				return Snapshot{}, err
			}
			if ok {
				return snap, nil
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Snapshot{}, nil
		}
		if wake == nil {
			// Subscribe once, then look again, so that nothing published
			// between the look and the subscribe is missed.
			wake = make(chan struct{}, 1)
			var subs []*nats.Subscription
			for _, c := range cs {
				sub, err := r.store.NC.Subscribe(streams.RunSubject(c.queue, c.jobType), func(*nats.Msg) {
					select {
					case wake <- struct{}{}:
					default:
					}
				})
				if err != nil {
					return Snapshot{}, err
				}
				subs = append(subs, sub)
			}
			defer func() {
				for _, s := range subs {
					_ = s.Unsubscribe()
				}
			}()
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
			return Snapshot{}, ctx.Err()
		}
		t.Stop()
	}
}

func (r *Remote) tryClaim(ctx context.Context, c runConsumer, worker string) (Snapshot, bool, error) {
	batch, err := c.cons.FetchNoWait(1)
	if err != nil {
		return Snapshot{}, false, fmt.Errorf("fetch %s/%s: %w", c.queue, c.jobType, err)
	}
	for msg := range batch.Messages() {
		d := decodeDelivery(msg, r.log)
		if d == nil {
			continue
		}
		if snap, ok := r.store.claimItem(ctx, c.qs, d, worker, true, r.log); ok {
			return snap, true, nil
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
		return Snapshot{}, false, err
	}
	return Snapshot{}, false, nil
}

// Renew extends the leases of the jobs worker holds among ids (a
// heartbeat). It returns the ids it renewed; jobs the worker no longer holds
// are left out.
func (r *Remote) Renew(ctx context.Context, worker string, ids []string) ([]string, error) {
	var held []string
	for _, id := range ids {
		snap, err := r.store.Get(ctx, id)
		if err != nil {
			continue
		}
		if commands.CheckHolder(snap.Job, worker) != nil || snap.Job.LeaseAck == "" {
			continue
		}
		if err := r.store.NC.Publish(snap.Job.LeaseAck, []byte("+WPI")); err != nil {
			return held, err
		}
		held = append(held, id)
	}
	return held, nil
}

// report applies a remote worker's report on a job it holds. On an
// outcome that ends its hold (settle), the work item is acked and a job
// that became runnable again is dispatched.
func (r *Remote) report(ctx context.Context, op, id, worker string, settle bool, decide func(j *streams.Job, now time.Time) (*streams.Event, error)) (Snapshot, error) {
	cur, err := r.store.Load(ctx, id)
	if err != nil {
		return cur, err
	}
	var ack string
	next, _, err := r.store.Apply(ctx, op, cur, func(j *streams.Job) (*streams.Event, error) {
		if err := commands.CheckHolder(j, worker); err != nil {
			return nil, err
		}
		ack = j.LeaseAck
		return decide(j, time.Now().UTC())
	})
	if err != nil {
		return next, err
	}
	if settle {
		if err := r.store.Dispatch(ctx, next); err != nil {
			r.log.Warn("dispatch after a remote report; the projector repeats it", "job", id, "err", err)
		}
		if ack != "" {
			_ = r.store.NC.Publish(ack, []byte("+ACK"))
		}
	}
	return next, nil
}

// Start records that worker started the job it claimed (claimed -> running).
func (r *Remote) Start(ctx context.Context, id, worker string) (Snapshot, error) {
	return r.report(ctx, "start", id, worker, false, func(j *streams.Job, now time.Time) (*streams.Event, error) {
		ev, err := commands.Start(j, worker, j.LeaseItem, now)
		if ev != nil {
			ev.LeaseAck = j.LeaseAck
		}
		return ev, err
	})
}

// Succeed records the result of a job worker holds.
func (r *Remote) Succeed(ctx context.Context, id, worker string, result []byte) (Snapshot, error) {
	res, err := commands.CompactJSON(result)
	if err != nil {
		return Snapshot{}, &commands.InputError{Field: "result", Reason: err.Error()}
	}
	return r.report(ctx, "complete", id, worker, true, func(j *streams.Job, now time.Time) (*streams.Event, error) {
		return commands.Succeed(j, res, worker, now)
	})
}

// Fail records a failed attempt of a job worker holds; retryable failures
// are retried with the job's backoff while retries are left.
func (r *Remote) Fail(ctx context.Context, id, worker string, jerr streams.JobError, retryable bool) (Snapshot, error) {
	u := commands.Jitter()
	return r.report(ctx, "complete", id, worker, true, func(j *streams.Job, now time.Time) (*streams.Event, error) {
		return commands.Fail(j, jerr, retryable, worker, now, u)
	})
}

// Progress records a job's progress reported by the worker that holds it.
func (r *Remote) Progress(ctx context.Context, id, worker string, p streams.Progress) (Snapshot, error) {
	return r.report(ctx, "progress", id, worker, false, func(j *streams.Job, now time.Time) (*streams.Event, error) {
		return commands.Progress(j, p, worker, now)
	})
}

// Release gives a job worker holds back to its queue at once (the worker
// unregisters or shuts down): job.requeued.
func (r *Remote) Release(ctx context.Context, id, worker, reason string) (Snapshot, error) {
	return r.report(ctx, "requeue", id, worker, true, func(j *streams.Job, now time.Time) (*streams.Event, error) {
		return commands.Requeue(j, reason, worker, now)
	})
}
