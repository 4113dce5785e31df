package store

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// errQueueNotFound: no queue has the name.
var errQueueNotFound = fmt.Errorf("queue %w", commands.ErrNotFound)

// Queue returns a queue's record.
func (s *Store) Queue(ctx context.Context, queue string) (*domain.QueueRecord, error) {
	v, err := s.queueRecord(ctx, queue)
	return v.Rec, err
}

func (s *Store) queueRecord(ctx context.Context, queue string) (Version[domain.QueueRecord], error) {
	if !domain.ValidQueue(queue) {
		return Version[domain.QueueRecord]{}, &commands.InputError{Field: "queue", Reason: fmt.Sprintf("%q is not a queue name", queue)}
	}
	return s.queueRecs.Record(ctx, queue)
}

// QueueList lists the queues' records.
func (s *Store) QueueList(ctx context.Context) ([]*domain.QueueRecord, error) {
	return s.queueRecs.All(ctx)
}

// SetQueuePaused pauses or resumes a queue: a paused queue accepts jobs but
// dispatches none. The record says so (workers that start later create
// their consumers paused), and every run consumer of the queue is paused or
// resumed on the server, so it holds for every worker at once.
func (s *Store) SetQueuePaused(ctx context.Context, queue string, paused bool) (*domain.QueueRecord, error) {
	var rec *domain.QueueRecord
	for try := 0; ; try++ {
		v, err := s.queueRecord(ctx, queue)
		if err != nil {
			return nil, err
		}
		rec = v.Rec
		if rec.Paused == paused {
			break
		}
		rec.Paused = paused
		_, err = s.queueRecs.put(queue, rec, v.Rev).Wait(ctx)
		if err == nil {
			break
		}
		if !streams.IsConflict(err) || try > 10 {
			return nil, fmt.Errorf("queue %s: %w", queue, err)
		}
	}
	qss, err := streams.QueueStreams(ctx, s.js, queue)
	if err != nil {
		return nil, err
	}
	for _, qs := range qss.All() {
		stream := qs.CachedInfo().Config.Name
		names := qs.ConsumerNames(ctx)
		for name := range names.Name() {
			if !IsWorkConsumer(name) {
				continue
			}
			if paused {
				_, err = s.js.PauseConsumer(ctx, stream, name, pausedForever)
			} else {
				_, err = s.js.ResumeConsumer(ctx, stream, name)
			}
			if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil, fmt.Errorf("queue %s consumer %s: %w", queue, name, err)
			}
		}
		if err := names.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
			return nil, err
		}
	}
	return rec, nil
}

// QueueInfo is a queue as clients see it.
type QueueInfo struct {
	Name      string    `json:"name"`
	Paused    bool      `json:"paused"`
	Depth     uint64    `json:"depth"`   // runnable jobs waiting for a worker
	Held      int       `json:"held"`    // work items held by workers (claimed or running jobs)
	Delayed   uint64    `json:"delayed"` // scheduled jobs and retries in backoff
	CreatedAt time.Time `json:"created_at"`
	// Jobs counts the queue's jobs by state, when an index knows them (the
	// HTTP API's; not the CLI's, which has none).
	Jobs    map[domain.State]int `json:"jobs,omitempty"`
	Running int                  `json:"running"` // jobs claimed or running (from Jobs when known, else Held)
	// Limits are the queue's quotas (0: none); Slots, for a queue with
	// limits, what its admitter counts: jobs holding a slot and pending,
	// in all and by user (absent when no admitter answered).
	MaxRunning        int               `json:"max_running"`
	MaxRunningPerUser int               `json:"max_running_per_user"`
	MaxRunningPerKey  int               `json:"max_running_per_key"`
	RateLimit         int               `json:"rate_limit"`
	RatePeriod        commands.Duration `json:"rate_period"` // seconds
	RateKey           string            `json:"rate_key,omitempty"`
	Priorities        bool              `json:"priorities,omitempty"`
	MaxQueued         int               `json:"max_queued,omitempty"` // its window (domain.QueueLimits.Window)
	Slots             *commands.Counts  `json:"slots,omitempty"`
}

// QueueInfos reads every queue's settings and depth, by name.
func (s *Store) QueueInfos(ctx context.Context) ([]*QueueInfo, error) {
	recs, err := s.QueueList(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*QueueInfo, 0, len(recs))
	var slots map[string]commands.Counts
	for _, rec := range recs {
		if rec.LimitsSeq != 0 {
			slots, _ = s.AdmissionCountsOf(ctx, "") // one ask for every queue; none answering: shown without
			break
		}
	}
	for _, rec := range recs {
		qi, err := s.queueInfo(ctx, rec, slots)
		if err != nil {
			return nil, err
		}
		out = append(out, qi)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out, nil
}

// QueueInfo reads one queue's settings, depth and, if it has limits, the
// admitter's slot counts.
func (s *Store) QueueInfo(ctx context.Context, queue string) (*QueueInfo, error) {
	rec, err := s.Queue(ctx, queue)
	if err != nil {
		return nil, err
	}
	var slots map[string]commands.Counts
	if rec.LimitsSeq != 0 {
		slots, _ = s.AdmissionCountsOf(ctx, queue) // none answering: shown without
	}
	return s.queueInfo(ctx, rec, slots)
}

// queueInfo is a queue as clients see it: its record, what its stream
// holds, and its slots from slots (by queue).
func (s *Store) queueInfo(ctx context.Context, rec *domain.QueueRecord, slots map[string]commands.Counts) (*QueueInfo, error) {
	st, err := s.queueStats(ctx, rec)
	if err != nil {
		return nil, err
	}
	qi := &QueueInfo{Name: rec.Name, Paused: st.Paused, Depth: st.Waiting, Held: st.Held,
		Delayed: st.Delayed, CreatedAt: rec.CreatedAt, Running: st.Held,
		MaxRunning: rec.Limits.MaxRunning, MaxRunningPerUser: rec.Limits.MaxRunningPerUser,
		MaxRunningPerKey: rec.Limits.MaxRunningPerKey, RateLimit: rec.Limits.RateLimit,
		RatePeriod: commands.Duration(rec.Limits.RatePeriod), RateKey: rec.Limits.RateKey,
		Priorities: rec.Limits.Priorities, MaxQueued: rec.Limits.Window()}
	if c, ok := slots[rec.Name]; ok {
		qi.Slots = &c
	}
	return qi, nil
}

// QueueStats is what a queue holds right now.
type QueueStats struct {
	Name    string `json:"name"`
	Paused  bool   `json:"paused"`
	Waiting uint64 `json:"waiting"` // work items not yet delivered
	Held    int    `json:"held"`    // work items delivered and not acked (claimed or running)
	Delayed uint64 `json:"delayed"` // pending schedules (scheduled jobs, retries in backoff)
}

// QueueStats reads a queue's depth from its stream and consumers. Work
// items are counted on the stream itself, so that the items of a type no
// worker ever consumed (no consumer yet) count as waiting: for each run
// and batch subject, what its consumer has not delivered, or every item
// on it when it has no consumer.
func (s *Store) QueueStats(ctx context.Context, queue string) (*QueueStats, error) {
	rec, err := s.Queue(ctx, queue)
	if err != nil {
		return nil, err
	}
	return s.queueStats(ctx, rec)
}

func (s *Store) queueStats(ctx context.Context, rec *domain.QueueRecord) (*QueueStats, error) {
	queue := rec.Name
	st := &QueueStats{Name: queue, Paused: rec.Paused}
	qss, err := streams.QueueStreams(ctx, s.js, queue)
	if err != nil {
		return nil, err
	}
	prefix := "jetflow.q." + queue + "."
	items := map[string]uint64{} // items stored, by the filter of the consumer that takes them
	for _, stream := range qss.All() {
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
		if err != nil {
			return nil, err
		}
		for subj, n := range info.State.Subjects {
			switch kind, _, _ := strings.Cut(strings.TrimPrefix(subj, prefix), "."); kind {
			case "sched":
				st.Delayed++
			case "run":
				items[subj] += n
			case "batch": // one subject per parent; the consumer filters them all
				items[subj[:strings.LastIndexByte(subj, '.')]+".*"] += n
			}
		}
		consumers, err := streams.Consumers(ctx, stream)
		if err != nil {
			return nil, err
		}
		for _, ci := range consumers {
			if !IsWorkConsumer(ci.Name) {
				continue
			}
			// A queue's streams are work queues: one consumer per subject.
			for _, subj := range append([]string{ci.Config.FilterSubject}, ci.Config.FilterSubjects...) {
				delete(items, subj)
			}
			st.Waiting += ci.NumPending
			st.Held += ci.NumAckPending
		}
	}
	for _, n := range items {
		st.Waiting += n // no consumer yet: every item waits
	}
	return st, nil
}
