package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/streams"
)

// defaultLeaseSweepInterval is how often the LeaseSweeper looks: a job
// whose holder died is requeued within its lease plus this plus
// commands.LeaseGrace.
const defaultLeaseSweepInterval = 3 * time.Second

// LeaseSweeper requeues claimed and running jobs whose holder stopped
// renewing the lease (job.lease_expired_requeue; job.lease_expired, failed,
// after max_lease_requeues), whether or not any worker is left to claim
// them: a job whose worker is gone does not stay running.
//
// It finds held jobs where their leases live, in the queues: a held job's
// work item stays in its work-queue stream, delivered and not acked, until
// its attempt ends. Each pass reads, for every run consumer with items in
// flight, the items between its ack floor and its last delivery (the
// in-flight ones and nothing else), the records of their jobs (one
// multi-get), and the worker registry (one read); a job held under one of
// those items whose lease ran out (commands.LeaseExpired) is written off,
// revision-checked and decided again on the job as it is then, so a job
// that finished meanwhile is never touched; a requeued job gets a new work
// item. The cost is per job in flight and per pass, not per job
// run: the hot path writes nothing for it.
//
// One runs at a time, under the Leader; a worker that receives a
// redelivered item judges the lease the same way, and the revision-checked
// write makes sure only one of them writes off a lease.
type LeaseSweeper struct {
	periodic
	store   *store.Store
	cfg     LeaseSweeperConfig
	log     *slog.Logger
	rescued atomic.Int64

	mu       sync.Mutex // one pass at a time; guards what follows
	passes   int
	since    time.Time       // when this term began: leases are not judged for a lease after it
	suspects map[string]bool // items below their consumer's ack floor at the last look
}

// LeaseSweeperConfig configures the LeaseSweeper.
type LeaseSweeperConfig struct {
	Interval time.Duration // how often it looks (default defaultLeaseSweepInterval)
	Log      *slog.Logger
}

func (c LeaseSweeperConfig) withDefaults() LeaseSweeperConfig {
	orDefault(&c.Interval, defaultLeaseSweepInterval)
	return c
}

func (c LeaseSweeperConfig) validate() error { return nil }

// strandedEvery is how many passes go between two looks for stranded items.
const strandedEvery = 5

// NewLeaseSweeper returns a LeaseSweeper.
func NewLeaseSweeper(s *store.Store, cfg LeaseSweeperConfig) *LeaseSweeper {
	cfg = cfg.withDefaults()
	l := &LeaseSweeper{store: s, cfg: cfg, log: logger(cfg.Log, "leases")}
	l.periodic = periodic{every: cfg.Interval, log: l.log, check: cfg.validate, pass: func(ctx context.Context) error {
		_, err := l.Sweep(ctx)
		return err
	}, begin: func() {
		l.mu.Lock()
		l.since, l.passes, l.suspects = time.Now(), 0, nil
		l.mu.Unlock()
	}}
	return l
}

// Rescued is how many stranded work items this sweeper put back.
func (l *LeaseSweeper) Rescued() int64 { return l.rescued.Load() }

// inFlight is a work item delivered and not acked.
type inFlight struct {
	seq   uint64
	job   string
	lease time.Duration // its consumer's AckWait
}

// Sweep looks at every job in flight once and writes off the leases that
// ran out. It returns how many it wrote off.
func (l *LeaseSweeper) Sweep(ctx context.Context) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	items, err := l.inFlight(ctx)
	if err != nil || len(items) == 0 {
		return 0, err
	}
	ids := make([]string, 0, len(items))
	for _, it := range items {
		ids = append(ids, it.job)
	}
	recs, err := l.store.Records(ctx, ids)
	if err != nil {
		return 0, err
	}
	workers, err := l.store.Workers().List(ctx)
	if err != nil {
		return 0, err
	}
	byID := make(map[string]store.Worker, len(workers))
	for _, w := range workers {
		byID[w.ID] = w
	}
	n := 0
	now := time.Now()
	// No worker could beat while this engine, or its connection, was away:
	// a lease is judged only once a lease (and the grace) has passed since
	// it began to lead and since it last connected.
	awake := now.Sub(l.store.ConnectedSince())
	if l.since.IsZero() {
		l.since = now.Add(-time.Hour) // Sweep called without Start: judged at once
	}
	awake = min(awake, now.Sub(l.since))
	for _, it := range items {
		snap, ok := recs[it.job]
		if !ok {
			continue
		}
		j := snap.Job
		if !commands.Held(j) || j.LeaseItem != it.seq {
			continue
		}
		if commands.HeldRemotely(j) && commands.TimedOut(j, commands.DeadlineGrace, now) {
			// Nothing in the process of a worker outside jetflow ends its
			// attempt at its deadline: the engine does (a deadline is
			// absolute, so heartbeats do not matter here).
			if l.timeOut(ctx, it, snap) {
				n++
			}
			continue
		}
		if awake < it.lease+commands.LeaseGrace {
			continue
		}
		beat := byID[j.Worker].BeatOf(j.ID)
		if !commands.LeaseExpired(j, beat, it.lease, now) {
			continue
		}
		if l.expire(ctx, it, snap, beat) {
			n++
		}
	}
	return n, ctx.Err()
}

// inFlight lists the work items of every run consumer that are delivered
// and not acked: in a work-queue stream an acked item is gone, so the items
// still there between a consumer's ack floor and its last delivery are
// exactly those in flight.
func (l *LeaseSweeper) inFlight(ctx context.Context) ([]inFlight, error) {
	queues, err := l.store.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	var out []inFlight
	l.passes++
	look := l.passes%strandedEvery == 0
	next := map[string]bool{}
	for _, q := range queues {
		qss, err := streams.QueueStreams(ctx, l.store.JS(), q.Name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, qs := range qss.All() {
			if out, err = l.inFlightOn(ctx, qs, q.Name, look, next, out); err != nil {
				return nil, err
			}
		}
	}
	if look {
		l.suspects = next
	}
	return out, nil
}

// inFlightOn appends to out the items in flight on qs, one of queue's
// streams, and, on a look, puts back its stranded items.
func (l *LeaseSweeper) inFlightOn(ctx context.Context, qs jetstream.Stream, queue string, look bool, next map[string]bool, out []inFlight) ([]inFlight, error) {
	var stored map[string]uint64
	var err error
	if look {
		if stored, err = storedItems(ctx, qs, queue); err != nil {
			return nil, err
		}
	}
	consumers, err := streams.Consumers(ctx, qs)
	if err != nil {
		return nil, fmt.Errorf("consumers of queue %s: %w", queue, err)
	}
	for _, info := range consumers {
		// The promoter's too: a fired schedule stranded so would leave
		// its job scheduled for good.
		if look && (store.IsWorkConsumer(info.Name) || info.Name == PromoterConsumer) {
			if err := l.stranded(ctx, qs, info, stored, l.suspects, next); err != nil {
				l.log.Warn("stranded items", "consumer", info.Name, "err", err)
			}
		}
		if !strings.HasPrefix(info.Name, "run_") || info.NumAckPending == 0 {
			continue
		}
		// Every item stored in the range, not only NumAckPending of them:
		// besides those in flight, it may hold items the consumer counts as
		// acked whose deletion a server crash undid (under sync always the
		// queue streams persist asynchronously), until stranded puts them
		// back; read first, they would hide the items in flight after them.
		from, upTo := info.AckFloor.Stream+1, info.Delivered.Stream
		if upTo < from {
			continue
		}
		err := streams.ReadRange(ctx, l.store.NC(), qs.CachedInfo().Config.Name, info.Config.FilterSubject, from, upTo,
			int(min(upTo-from+1, 1<<30)), func(seq uint64, data []byte) error {
				item, err := streams.DecodeWorkItem(data)
				if err == nil {
					out = append(out, inFlight{seq: seq, job: item.Job.ID, lease: info.Config.AckWait})
				}
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("items in flight on %s: %w", info.Config.FilterSubject, err)
		}
	}
	return out, nil
}

// storedItems counts the run, batch and fired-schedule (due) items stored on
// each subject of a queue's stream qs (of those it captures).
func storedItems(ctx context.Context, qs jetstream.Stream, queue string) (map[string]uint64, error) {
	stored := map[string]uint64{}
	for _, filter := range []string{streams.RunFilter(queue), streams.BatchesFilter(queue), streams.DueSubject(queue)} {
		if !streams.Captures(qs, filter) {
			continue
		}
		info, err := qs.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return nil, fmt.Errorf("items of queue %s: %w", queue, err)
		}
		for subj, n := range info.State.Subjects {
			stored[subj] = n
		}
	}
	return stored, nil
}

// expire writes off the lease of the job held under it, if it is still
// held under it and its lease still ran out (decided again on the job as
// it is now; Apply dispatches the requeued job), and tells a holder that is
// only slow to stop. The old item stays: it is redelivered (its AckWait ran
// out), and whichever of the two items is claimed first holds the job; the
// other is dropped as a duplicate.
func (l *LeaseSweeper) expire(ctx context.Context, it inFlight, cur store.Snapshot, beat commands.Beat) bool {
	var on *domain.Job
	judged := *cur.Job // as the beat was read for it
	began := time.Now()
	_, ev, err := l.store.Apply(ctx, "lease", cur, func(j *domain.Job) (*domain.Event, error) {
		on = j
		return commands.WriteOffLease(j, &judged, beat, it.lease, l.store.Actor(), time.Now().UTC())
	})
	if errors.Is(err, commands.ErrInvalidTransition) {
		return false
	}
	if err != nil {
		l.log.Warn("lease expiry", "job", it.job, "err", err)
		return false
	}
	_ = l.store.NC().Publish(streams.CancelSubject, []byte(it.job))
	l.log.Info("lease expired", "job", it.job, "worker", cur.Job.Worker, "event", ev.Type)
	decided(ctx, tracing.SpanLeaseExpired, on, ev, began)
	return true
}

// timeOut ends the attempt of a job a remote worker holds under it whose
// deadline passed by more than commands.DeadlineGrace (commands.TimeOutHeld:
// retried or failed, with code TIMEOUT), decided again on the job as it is
// now; then the attempt's work item is settled (a retry has its own) and
// the cancel broadcast tells the worker's heartbeat that it lost the job.
// Its later reports are refused: it no longer holds the job.
func (l *LeaseSweeper) timeOut(ctx context.Context, it inFlight, cur store.Snapshot) bool {
	var on *domain.Job
	u := commands.Jitter()
	began := time.Now()
	_, ev, err := l.store.Apply(ctx, "timeout", cur, func(j *domain.Job) (*domain.Event, error) {
		on = j
		return commands.TimeOutHeld(j, it.seq, commands.DeadlineGrace, l.store.Actor(), time.Now().UTC(), u)
	})
	if errors.Is(err, commands.ErrInvalidTransition) {
		return false
	}
	if err != nil {
		l.log.Warn("execution timeout", "job", it.job, "err", err)
		return false
	}
	_ = l.store.NC().Publish(on.LeaseAck, []byte("+ACK"))
	_ = l.store.NC().Publish(streams.CancelSubject, []byte(it.job))
	l.log.Info("execution timeout", "job", it.job, "worker", on.Worker, "event", ev.Type)
	decided(ctx, tracing.SpanTimeout, on, ev, began)
	return true
}
