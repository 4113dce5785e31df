package store

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Filter selects jobs; empty fields match everything.
type Filter struct {
	State     domain.State `json:"state,omitempty" msgpack:"state,omitempty"`
	Queue     string       `json:"queue,omitempty" msgpack:"queue,omitempty"`
	Type      string       `json:"type,omitempty" msgpack:"type,omitempty"`
	Namespace string       `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Parent    string       `json:"parent,omitempty" msgpack:"parent,omitempty"`
	Limit     int          `json:"limit,omitempty" msgpack:"limit,omitempty"`
	// Search (search.go): an id's beginning, a tag, the last error's code
	// or a piece of its text, payload fields, when it finished.
	Search
}

// Validate checks a filter's fields.
func (f *Filter) Validate() error {
	if f.State != "" && !f.State.Valid() {
		return &commands.InputError{Field: "state", Reason: fmt.Sprintf("%q is not a state", f.State)}
	}
	if f.Queue != "" && !domain.ValidQueue(f.Queue) {
		return &commands.InputError{Field: "queue", Reason: fmt.Sprintf("%q is not a queue name", f.Queue)}
	}
	if f.Namespace != "" && !domain.ValidNamespace(f.Namespace) {
		return &commands.InputError{Field: "namespace", Reason: fmt.Sprintf("%q is not a namespace", f.Namespace)}
	}
	if f.Type != "" && !domain.ValidType(f.Type) {
		return &commands.InputError{Field: "type", Reason: fmt.Sprintf("%q is not a job type", f.Type)}
	}
	if f.Parent != "" && !domain.ValidID(f.Parent) {
		return &commands.InputError{Field: "parent", Reason: fmt.Sprintf("%q is not a job id", f.Parent)}
	}
	if f.Limit < 0 {
		return &commands.InputError{Field: "limit", Reason: "must not be negative"}
	}
	return f.Search.Validate()
}

// Match reports whether j passes the filter.
func (f *Filter) Match(j *domain.Job) bool {
	return (f.State == "" || j.State == f.State) && (f.Queue == "" || j.Spec.Queue == f.Queue) &&
		(f.Type == "" || j.Spec.Type == f.Type) && (f.Namespace == "" || j.Spec.Namespace == f.Namespace) &&
		(f.Parent == "" || j.Spec.Parent == f.Parent) && f.Search.Match(j)
}

// scanIdle is how long a scan of a bucket waits for its next record.
const scanIdle = 10 * time.Second

// scan calls fn with every record of a bucket, read once through one
// ordered consumer (deleted ones left out). A watch whose consumer was on a
// server that went away can stall for good: it gives up when the bucket
// says nothing for scanIdle.
func scan(ctx context.Context, kv jetstream.KeyValue, fn func(jetstream.KeyValueEntry)) error {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("read %s: %w", kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	idle := time.NewTimer(scanIdle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-idle.C:
			return fmt.Errorf("read %s: no answer from the bucket for %s", kv.Bucket(), scanIdle)
		case e, ok := <-w.Updates():
			idle.Reset(scanIdle)
			if !ok || e == nil {
				return nil
			}
			fn(e)
		}
	}
}

// Scan calls fn with every job record, read once (the reaper's, the
// sweepers', the purger's look at every job); undecodable records are
// logged and left out.
func (s *Store) Scan(ctx context.Context, fn func(j *domain.Job)) error {
	return scan(ctx, s.jobs.kv, func(e jetstream.KeyValueEntry) {
		j, err := streams.DecodeJob(e.Value())
		if err != nil {
			s.Log.Warn("undecodable job record", "key", e.Key(), "err", err)
			return
		}
		fn(j)
	})
}

// List returns the jobs that match f, newest first, reading the whole jobs
// bucket through one ordered consumer.
func (s *Store) List(ctx context.Context, f Filter) ([]*domain.Job, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var out []*domain.Job
	err := s.Scan(ctx, func(j *domain.Job) {
		if f.Match(j) {
			out = append(out, j)
		}
	})
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	sortNewestFirst(out)
	if f.Limit > 0 && len(out) > f.Limit {
		out = out[:f.Limit]
	}
	return out, nil
}

// sortNewestFirst orders jobs by creation, newest first (id breaks ties).
func sortNewestFirst(js []*domain.Job) {
	sort.Slice(js, func(i, k int) bool {
		if !js[i].CreatedAt.Equal(js[k].CreatedAt) {
			return js[i].CreatedAt.After(js[k].CreatedAt)
		}
		return js[i].ID > js[k].ID
	})
}

// Records reads the records of jobs ids as the bucket has them, with one
// request per thousand; a job without a record (or with one that does not
// decode) is left out.
func (s *Store) Records(ctx context.Context, ids []string) (map[string]Snapshot, error) {
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = streams.KVSubject(id)
	}
	last, err := streams.MultiLast(ctx, s.nc, "KV_"+streams.JobsBucket, keys)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Snapshot, len(ids))
	for i, id := range ids {
		m, ok := last[keys[i]]
		if !ok || m.Deleted || len(m.Data) == 0 {
			continue
		}
		j, err := streams.DecodeJob(m.Data)
		if err != nil {
			s.Log.Warn("undecodable job record", "key", id, "err", err)
			continue
		}
		out[id] = Snapshot{Job: j, Rev: m.Seq}
	}
	return out, nil
}

// ReadRecords is Records to show the jobs, as Read shows one: the queued
// records among them (an in-process claim writes its record later,
// DeferRecord) with their job's last event folded in, read with one more
// request per thousand. A purged job is left out; when the log cannot be
// read, the records are shown as they are.
func (s *Store) ReadRecords(ctx context.Context, ids []string) (map[string]Snapshot, error) {
	out, err := s.Records(ctx, ids)
	if err != nil {
		return nil, err
	}
	var queued []string
	for _, snap := range out {
		if commands.InQueue(snap.Job.State) {
			queued = append(queued, streams.JobSubject(snap.Job))
		}
	}
	if len(queued) == 0 {
		return out, nil
	}
	last, err := streams.MultiLast(ctx, s.nc, streams.EventsStream, queued)
	if err != nil {
		return out, nil // the log not read (a leader election): the records as they are
	}
	for id, snap := range out {
		if !commands.InQueue(snap.Job.State) {
			continue
		}
		m, ok := last[streams.JobSubject(snap.Job)]
		if !ok || m.Deleted {
			continue
		}
		shown, gone := s.foldQueued(ctx, snap, m.Seq, m.Subject, m.Data)
		if gone {
			delete(out, id)
			continue
		}
		out[id] = shown
	}
	return out, nil
}

// View renders a job as clients see it (the JSON object of the API and the
// CLI), with the queue position of a queued job, and for a pending one its
// place among its queue's pending jobs and the limit that holds it now, as
// the admitter tells them (one request, for pending jobs only). When no
// admitter answers, the position is left out and the hold is the record's
// (job.pending).
func (s *Store) View(ctx context.Context, j *domain.Job) *projections.JobView {
	v := projections.View(j)
	if commands.InQueue(j.State) {
		if pos, err := s.QueuePosition(ctx, j); err == nil && pos >= 0 {
			v.QueuePosition = &pos
		}
	}
	if commands.InAdmission(j.State) {
		if place, ok := s.admissionPlaceOf(ctx, j.ID); ok {
			v.PendingPosition = &place.Position
			v.Hold = nil // a slot is free: its turn comes at once
			if place.Hold != nil {
				v.Hold = projections.ViewHold(j, *place.Hold)
			}
		}
	}
	return v
}

// Retry submits a new job that runs terminal job id again
// (commands.Retry), with idempotencyKey if not empty; with failedPieces,
// a fan-out's run that makes only the pieces that did not succeed.
func (s *Store) Retry(ctx context.Context, id, idempotencyKey string, failedPieces bool) (Submitted, error) {
	orig, err := s.Current(ctx, id)
	if err != nil {
		return Submitted{}, err
	}
	req, err := commands.Retry(orig.Job, idempotencyKey, failedPieces)
	if err != nil {
		return Submitted{}, err
	}
	ctx = tracing.LinkTo(ctx, orig.Job.Spec.TraceParent, tracing.LinkRetryOf) // the retry's submit span links to the job
	if len(orig.Job.Spec.Files) > 0 {
		return s.retryWithFiles(ctx, orig.Job, req)
	}
	return s.Submit(ctx, req)
}

// History calls fn with each event of a job, oldest first; with live it
// goes on with new events until the job's terminal event, fn's error or
// ctx's end. after skips events up to that sequence.
func (s *Store) History(ctx context.Context, id string, after uint64, live bool, fn func(*domain.Event) error) error {
	// The record as it is names the job's subject; the log is read to its
	// end whatever the record says, so a record behind it is not repaired
	// here (a read writes nothing), only one that is missing is built.
	snap, err := s.Read(ctx, id)
	if err != nil {
		return err
	}
	if !live {
		if snap.Job.Seq <= after {
			return nil
		}
		// The history so far: read straight from the log, no consumer.
		var fnErr error
		last, err := streams.ReadSubject(ctx, s.nc, streams.EventsStream, streams.JobSubject(snap.Job), after+1, func(seq uint64, data []byte) error {
			ev, err := streams.DecodeEvent(data)
			if err != nil {
				return fmt.Errorf("event %d: %w", seq, err)
			}
			ev.Seq, ev.Subject = seq, streams.JobSubject(snap.Job)
			fnErr = fn(ev)
			return fnErr
		})
		if fnErr != nil {
			return fnErr
		}
		if err != nil {
			return fmt.Errorf("events of %s: %w", id, err)
		}
		if last >= snap.Job.Seq {
			return nil
		}
		after = last // a replica behind the leader answered: the consumer reads the rest
	}
	// An ordered consumer lives on the server until deleted or inactive:
	// it is deleted when the read ends, and one left behind (a process
	// that died mid-read) goes after historyInactive without pulls.
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{streams.JobSubject(snap.Job)}, InactiveThreshold: historyInactive}
	if after > 0 {
		cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
		cfg.OptStartSeq = after + 1
	}
	cons, err := s.js.OrderedConsumer(ctx, streams.EventsStream, cfg)
	if err != nil {
		return fmt.Errorf("events of %s: %w", id, err)
	}
	if info := cons.CachedInfo(); !live && info != nil && info.NumPending == 0 {
		// Nothing past what was read where the consumer runs, though the
		// record is further on. Its stream's leader says whether the log
		// has more (the consumer may run on a replica that is behind too):
		// if not, the tail aged out (retention) or was lost (a crash
		// without sync always), and the history is what the log has.
		if last, err := streams.LastSeqOnLeader(ctx, s.nc, streams.EventsStream, streams.JobSubject(snap.Job)); err == nil && last <= after {
			s.dropOrdered(cons)
			return nil
		}
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("events of %s: %w", id, err)
	}
	defer s.dropOrdered(cons)
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	var next []jetstream.NextOpt
	if !live {
		next = append(next, jetstream.NextMaxWait(historyWait))
	}
	for {
		m, err := it.Next(next...)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("events of %s: %w", id, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return err
		}
		ev, err := streams.DecodeEvent(m.Data())
		if err != nil {
			return fmt.Errorf("event %d: %w", meta.Sequence.Stream, err)
		}
		ev.Seq, ev.Subject = meta.Sequence.Stream, m.Subject()
		if err := fn(ev); err != nil {
			return err
		}
		if meta.NumPending == 0 && (!live || ev.To.Terminal()) {
			return nil
		}
	}
}

// historyWait is how long a read of a job's history so far waits for its
// next event from its consumer (which reported more): longer, and the
// read fails rather than wait for ever (a server lost meanwhile).
const historyWait = 30 * time.Second

// historyInactive is how long the server keeps a history read's consumer
// that nobody pulls from (a live read pulls all the time).
const historyInactive = 10 * time.Second

// dropOrdered deletes an ordered consumer whose reading ended, in the
// background: the read's answer does not wait for it.
func (s *Store) dropOrdered(cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// Not logged: it may end after its reader's process is done with
		// logging, and a consumer not deleted goes when inactive anyway.
		_ = s.js.DeleteConsumer(ctx, info.Stream, info.Name)
	}()
}

// WaitTerminal watches job id's record until it is terminal or d passed,
// and returns the last record seen, or shown (the job as its caller read
// it, Read) if none came past it: a record behind shown (an in-process
// claim writes its record late, and Read folds the log into it) is not
// taken over it. Pushed by a watch of the record, nothing polls.
func (s *Store) WaitTerminal(ctx context.Context, id string, d time.Duration, shown *domain.Job) (*domain.Job, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	w, err := s.jobs.kv.Watch(ctx, streams.KVKey(id))
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil
		}
		return nil, fmt.Errorf("watch job %s: %w", id, err)
	}
	defer func() { _ = w.Stop() }()
	last := shown
	for {
		select {
		case <-ctx.Done():
			return last, nil
		case e, ok := <-w.Updates():
			if !ok {
				return last, nil
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			j, err := streams.DecodeJob(e.Value())
			if err != nil {
				return nil, err
			}
			if j.State.Terminal() {
				return j, nil
			}
			if last == nil || j.Seq >= last.Seq {
				last = j
			}
		}
	}
}
