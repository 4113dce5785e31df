package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// ErrWorkerNotFound: no worker of that id is registered (never, or it
// stopped beating and its record expired).
var ErrWorkerNotFound = fmt.Errorf("worker %w", commands.ErrNotFound)

// Workers is the worker registry (streams.WorkersBucket): one record per
// worker, SDK and HTTP alike, written at its heartbeats. The lease rules
// read it to tell a holder that is alive from one that is gone
// (commands.LeaseLeft).
type Workers struct {
	kv jetstream.KeyValue
}

// Worker is a worker's record as read, with the server's time of its
// last write: the moment of its last heartbeat, on the server's clock.
type Worker struct {
	*domain.WorkerRecord
	Rev    uint64
	BeatAt time.Time
}

func openWorkers(ctx context.Context, js jetstream.JetStream) (*Workers, error) {
	kv, err := js.KeyValue(ctx, streams.WorkersBucket)
	if err != nil {
		return nil, fmt.Errorf("workers bucket: %w", err)
	}
	return &Workers{kv: kv}, nil
}

func marshalWorker(rec *domain.WorkerRecord) ([]byte, error) {
	if !domain.ValidWorkerID(rec.ID) {
		return nil, &commands.InputError{Field: "worker_id", Reason: fmt.Sprintf("%q: want 1-128 of [A-Za-z0-9_.-]", rec.ID)}
	}
	return streams.Marshal(rec)
}

// Register adds a worker's record; it fails if the id is taken.
func (w *Workers) Register(ctx context.Context, rec *domain.WorkerRecord) error {
	b, err := marshalWorker(rec)
	if err != nil {
		return err
	}
	if _, err := w.kv.Create(ctx, rec.ID, b); err != nil {
		return fmt.Errorf("register worker %s: %w", rec.ID, err)
	}
	return nil
}

// Put writes a worker's record as it is (a worker beating for itself: it
// is the only writer of its record).
func (w *Workers) Put(ctx context.Context, rec *domain.WorkerRecord) error {
	b, err := marshalWorker(rec)
	if err != nil {
		return err
	}
	if _, err := w.kv.Put(ctx, rec.ID, b); err != nil {
		return fmt.Errorf("worker %s heartbeat: %w", rec.ID, err)
	}
	return nil
}

// Get reads a worker's record.
func (w *Workers) Get(ctx context.Context, id string) (Worker, error) {
	if !domain.ValidWorkerID(id) {
		return Worker{}, fmt.Errorf("%q: %w", id, ErrWorkerNotFound)
	}
	e, err := w.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Worker{}, fmt.Errorf("%s: %w", id, ErrWorkerNotFound)
	}
	if err != nil {
		return Worker{}, fmt.Errorf("worker %s: %w", id, err)
	}
	return decodeWorker(e)
}

func decodeWorker(e jetstream.KeyValueEntry) (Worker, error) {
	var rec domain.WorkerRecord
	if err := streams.Unmarshal(e.Value(), &rec); err != nil {
		return Worker{}, fmt.Errorf("worker %s record: %w", e.Key(), err)
	}
	return Worker{WorkerRecord: &rec, Rev: e.Revision(), BeatAt: e.Created()}, nil
}

// Update changes a worker's record with fn, revision-checked: fn runs
// again on the newer record if another writer got there first.
func (w *Workers) Update(ctx context.Context, id string, fn func(*domain.WorkerRecord)) (*domain.WorkerRecord, error) {
	for try := 0; ; try++ {
		cur, err := w.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		fn(cur.WorkerRecord)
		b, err := marshalWorker(cur.WorkerRecord)
		if err != nil {
			return nil, err
		}
		if _, err = w.kv.Update(ctx, id, b, cur.Rev); err == nil {
			return cur.WorkerRecord, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || try >= 20 {
			return nil, fmt.Errorf("update worker %s: %w", id, err)
		}
	}
}

// Delete removes a worker's record.
func (w *Workers) Delete(ctx context.Context, id string) error {
	if !domain.ValidWorkerID(id) {
		return nil
	}
	return w.kv.Delete(ctx, id)
}

// List returns every registered worker, by registration time: a read of the
// whole bucket.
func (w *Workers) List(ctx context.Context) ([]Worker, error) {
	out := []Worker{}
	err := scan(ctx, w.kv, func(e jetstream.KeyValueEntry) {
		if rec, err := decodeWorker(e); err == nil {
			out = append(out, rec)
		}
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, k int) bool { return out[i].RegisteredAt.Before(out[k].RegisteredAt) })
	return out, nil
}

// BeatOf is what the lease rules need of a job's holder: when it last beat
// (zero: no record) and whether that beat listed the job.
func (w Worker) BeatOf(jobID string) commands.Beat {
	if w.WorkerRecord == nil {
		return commands.Beat{}
	}
	for _, c := range w.Claims {
		if c == jobID {
			return commands.Beat{At: w.BeatAt, Holds: true}
		}
	}
	return commands.Beat{At: w.BeatAt}
}

// beat reads the last heartbeat of the worker that holds j (a zero Beat if
// it has no record: it is gone).
func (w *Workers) beat(ctx context.Context, j *domain.Job) (commands.Beat, error) {
	rec, err := w.Get(ctx, j.Worker)
	if errors.Is(err, ErrWorkerNotFound) {
		return commands.Beat{}, nil
	}
	if err != nil {
		return commands.Beat{}, err
	}
	return rec.BeatOf(j.ID), nil
}

// WorkerView is a registered worker as clients see it.
type WorkerView struct {
	domain.WorkerRecord
	// Live is false once the worker missed its heartbeats for a lease: its
	// claims are being requeued by the lease rules.
	Live                     bool    `json:"live"`
	LeaseSeconds             float64 `json:"lease_seconds"`
	HeartbeatIntervalSeconds float64 `json:"heartbeat_interval_seconds"`
}

// ViewWorker renders a worker's record for clients, judged live by lease.
// It does not change rec (records are shared by the readers of a cached
// registry).
func ViewWorker(rec *domain.WorkerRecord, lease time.Duration) *WorkerView {
	v := &WorkerView{WorkerRecord: *rec, Live: time.Since(rec.LastHeartbeat) <= lease,
		LeaseSeconds: lease.Seconds(), HeartbeatIntervalSeconds: (lease / 3).Seconds()}
	if v.Claims == nil {
		v.Claims = []string{}
	}
	if v.Queues == nil {
		v.Queues = []string{}
	}
	if v.BatchTypes == nil {
		v.BatchTypes = []string{}
	}
	return v
}
