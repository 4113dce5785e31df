package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Queue limits (quotas). The limits are queue.set events on
// jetflow.reg.queue.<queue>, folded into the queue's record in
// jetflow_queues; every process keeps the records in a watch-fed cache
// (Limits), so a submit learns without a round trip whether its queue has
// limits (then its job waits in pending for admission, admitter.go).

// Limits is the queues' records as the queues bucket has them, kept
// current by a watch.
type Limits struct {
	store *Store
	once  sync.Once
	ready chan struct{}

	mu      sync.RWMutex
	records map[string]domain.QueueRecord
	changed chan struct{} // closed and replaced at every change
}

func newLimits(s *Store) *Limits {
	return &Limits{store: s, ready: make(chan struct{}), records: map[string]domain.QueueRecord{}, changed: make(chan struct{})}
}

func (l *Limits) watch(ctx context.Context) error {
	l.once.Do(func() {
		go func() {
			kv, err := l.store.JS.KeyValue(context.Background(), streams.QueuesBucket)
			for err != nil && !l.store.NC.IsClosed() {
				time.Sleep(time.Second)
				kv, err = l.store.JS.KeyValue(context.Background(), streams.QueuesBucket)
			}
			if err != nil {
				close(l.ready)
				return
			}
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { wg.Wait(); close(l.ready) }()
			followBucket(l.store, kv, &wg, func(e jetstream.KeyValueEntry) {
				var rec domain.QueueRecord
				if streams.Unmarshal(e.Value(), &rec) == nil {
					l.remember(rec)
				}
			})
		}()
	})
	select {
	case <-l.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Limits) remember(rec domain.QueueRecord) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if cur, ok := l.records[rec.Name]; ok && cur.LimitsSeq > rec.LimitsSeq {
		rec.Limits, rec.LimitsSeq, rec.LimitsAt, rec.LimitsBy = cur.Limits, cur.LimitsSeq, cur.LimitsAt, cur.LimitsBy
	}
	l.records[rec.Name] = rec
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

// tracked returns the queues that ever had limits (their jobs may be
// pending), with their records, and a channel closed at the next change.
func (l *Limits) tracked(ctx context.Context) (map[string]domain.QueueRecord, <-chan struct{}, error) {
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
	if err := s.Queues.Ensure(ctx, queue); err != nil {
		return nil, err
	}
	subject := streams.QueueLimitsSubject(queue)
	for try := 0; ; try++ {
		rec, _, last, err := s.loadQueueLimits(ctx, queue)
		if err != nil {
			return nil, err
		}
		ev, err := commands.SetQueueLimits(rec, queue, change(rec.Limits), s.ActorOf(ctx), time.Now().UTC())
		if err != nil {
			return nil, err
		}
		if ev == nil {
			return rec, nil
		}
		seq, err := s.W.AppendAsync(subject, ev, last).Wait(ctx)
		if streams.IsConflict(err) && try < maxDecisions {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("set limits of queue %s: %w", queue, err)
		}
		// The record follows the log: loadQueueLimits folds the event into
		// it (a race with a pause is decided again on what it wrote).
		rec, _, _, err = s.loadQueueLimits(ctx, queue)
		if err != nil {
			return nil, err
		}
		if rec.LimitsSeq < seq {
			return nil, fmt.Errorf("queue %s: record behind its limits event %d", queue, seq)
		}
		return rec, nil
	}
}

// loadQueueLimits reads a queue's record, its revision and the sequence of
// its last limits event; a record behind the log (its writer crashed
// between the append and the record) is brought up to it and written back.
func (s *Store) loadQueueLimits(ctx context.Context, queue string) (*domain.QueueRecord, uint64, uint64, error) {
	kv, err := s.JS.KeyValue(ctx, streams.QueuesBucket)
	if err != nil {
		return nil, 0, 0, err
	}
	for try := 0; ; try++ {
		rec, rev, err := s.queueRecord(ctx, queue)
		if err != nil {
			return nil, 0, 0, err
		}
		ev, last, err := s.lastEvent(ctx, streams.QueueLimitsSubject(queue))
		if err != nil || last == 0 || rec.LimitsSeq >= last {
			return rec, rev, last, err
		}
		next := projections.FoldQueueLimits(*rec, ev)
		b, err := streams.Marshal(&next)
		if err != nil {
			return nil, 0, 0, err
		}
		nrev, err := kv.Update(ctx, queue, b, rev)
		if err == nil {
			s.Limits.remember(next)
			return &next, nrev, last, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || try > 10 {
			return nil, 0, 0, fmt.Errorf("queue %s record: %w", queue, err)
		}
	}
}

// lastEvent reads the last event on subject (one read), and its sequence;
// 0 and no event when the subject has none.
func (s *Store) lastEvent(ctx context.Context, subject string) (*domain.Event, uint64, error) {
	m, err := s.lastMsg(ctx, subject)
	if err != nil || m == nil {
		return nil, 0, err
	}
	ev, err := streams.DecodeEvent(m.Data)
	if err != nil {
		return nil, 0, fmt.Errorf("last event on %s: %w", subject, err)
	}
	ev.Seq = m.Sequence
	return ev, m.Sequence, nil
}
