package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Queue limits (quotas). The limits are queue.set events on
// jetflow.reg.queue.<queue>, folded into the queue's record in
// jetflow_queues; every process keeps the records in a watch-fed cache
// (Limits), so a submit learns without a round trip whether its queue has
// limits (then its job waits in pending for admission: the Admitter).

// queueKind is the aggregate of the queues' limits: a queue's record
// exists before its limits (Queues.Ensure makes it) and holds more than
// them (pause), so the limits' fold is of the record's limits alone, and a
// record that is the fold of its last queue.set.
func queueKind(l *Limits) Kind[domain.QueueRecord] {
	return Kind[domain.QueueRecord]{
		Name:   "queue",
		Bucket: streams.QueuesBucket,
		Seq:    func(r *domain.QueueRecord) uint64 { return r.LimitsSeq },
		Head:   func(r *domain.QueueRecord) []byte { return r.LimitsHash },
		Fold: func(r *domain.QueueRecord, ev *domain.Event) (*domain.QueueRecord, error) {
			var cur domain.QueueRecord
			if r != nil {
				cur = *r
			}
			next := projections.FoldQueueLimits(cur, ev)
			return &next, nil
		},
		LastOnly: true,
		Missing:  func(queue string) error { return fmt.Errorf("queue %s: %w", queue, errQueueNotFound) },
		RefOf: func(ev *domain.Event) (Ref, bool) {
			if ev.Queue == nil {
				return Ref{}, false
			}
			return queueRef(ev.Queue.Name), true
		},
		Written: l.remember,
	}
}

func queueRef(queue string) Ref {
	return Ref{Key: queue, Subject: streams.QueueLimitsSubject(queue)}
}

// Limits is the queues' records as the queues bucket has them, kept
// current by a watch.
type Limits struct {
	recs *Aggregate[domain.QueueRecord]
	warm Warm

	mu      sync.RWMutex
	records map[string]domain.QueueRecord
	changed chan struct{} // closed and replaced at every change
}

func (l *Limits) watch(ctx context.Context) error { return l.warm.Wait(ctx, l.recs.Feed(l.remember)) }

func (l *Limits) remember(rec *domain.QueueRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := *rec
	if cur, ok := l.records[r.Name]; ok && cur.LimitsSeq > r.LimitsSeq {
		r.Limits, r.LimitsSeq, r.LimitsAt, r.LimitsBy = cur.Limits, cur.LimitsSeq, cur.LimitsAt, cur.LimitsBy
	}
	l.records[r.Name] = r
	close(l.changed)
	l.changed = make(chan struct{})
}

// Of returns queue's limits (none for a queue without a record).
func (l *Limits) Of(ctx context.Context, queue string) (domain.QueueLimits, error) {
	if err := l.watch(ctx); err != nil {
		return domain.QueueLimits{}, err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.records[queue].Limits, nil
}

// Tracked returns the queues that ever had limits (their jobs may be
// pending), with their records, and a channel closed at the next change.
func (l *Limits) Tracked(ctx context.Context) (map[string]domain.QueueRecord, <-chan struct{}, error) {
	if err := l.watch(ctx); err != nil {
		return nil, nil, err
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	out := map[string]domain.QueueRecord{}
	for name, rec := range l.records {
		if rec.LimitsSeq != 0 {
			out[name] = rec
		}
	}
	return out, l.changed, nil
}

// SetQueueLimits gives queue the limits lim (queue.set, then its record).
// The queue is created if it does not exist yet. Lowering a limit stops no
// running job; raising one admits pending jobs at once (the Admitter
// follows the record).
func (s *Store) SetQueueLimits(ctx context.Context, queue string, lim domain.QueueLimits) (*domain.QueueRecord, error) {
	return s.ChangeQueueLimits(ctx, queue, func(domain.QueueLimits) domain.QueueLimits { return lim })
}

// ChangeQueueLimits gives queue the limits change returns for its current
// ones, decided again on what another writer wrote if one came first (two
// changes of one limit each at once keep both).
func (s *Store) ChangeQueueLimits(ctx context.Context, queue string, change func(domain.QueueLimits) domain.QueueLimits) (*domain.QueueRecord, error) {
	if !domain.ValidQueue(queue) {
		_, err := commands.SetQueueLimits(nil, queue, domain.QueueLimits{}, "", time.Now())
		return nil, err // checked before anything is created
	}
	// Checked on the limits as they are (a rate limit given alone keeps
	// the period the queue has) before the queue is created.
	var cur domain.QueueLimits
	if rec, err := s.Queue(ctx, queue); err == nil {
		cur = rec.Limits
	}
	if err := commands.CheckLimits(change(cur)); err != nil {
		return nil, err
	}
	if err := s.queues.Ensure(ctx, queue); err != nil {
		return nil, err
	}
	next, ev, err := s.queueRecs.Change(ctx, "queue-limits", queueRef(queue), func(rec *domain.QueueRecord) (*domain.Event, error) {
		return commands.SetQueueLimits(rec, queue, change(rec.Limits), s.ActorOf(ctx), time.Now().UTC())
	})
	if err != nil {
		return nil, err
	}
	if ev != nil && next.Rec.LimitsSeq < ev.Seq {
		return nil, fmt.Errorf("queue %s: record behind its limits event %d", queue, ev.Seq)
	}
	return next.Rec, nil
}
