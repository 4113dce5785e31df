package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// MaxTailBatch bounds the events one Tail call returns.
const MaxTailBatch = 500

// TailEvent is an event of a tail, with its job's namespace, queue and
// type (from its subject).
type TailEvent struct {
	*domain.Event
	Namespace, Queue, Type string
}

// Tail returns the job events that filter (streams.EventsFilter) selects
// after stream sequence after, at most limit, waiting up to wait for the
// first of them, and the sequence to give the next call. With after 0 it
// starts at since (a time), or, since zero, after the log's last event now
// (nothing returned: the next call follows from there; an empty log is
// followed from its start).
func (s *Store) Tail(ctx context.Context, filter string, after uint64, since time.Time, limit int, wait time.Duration) ([]TailEvent, uint64, error) {
	if limit <= 0 || limit > MaxTailBatch {
		limit = MaxTailBatch
	}
	info, err := s.events.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	last := info.State.LastSeq
	if after == 0 && since.IsZero() && last > 0 {
		return nil, last, nil // an empty log is followed from its start
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: after + 1}
	if after == 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, 0, &since
	}
	cons, err := s.events.OrderedConsumer(ctx, cfg)
	if err != nil {
		return nil, 0, err
	}
	var out []TailEvent
	next := max(after, last) // nothing matched up to the end of the log as it was
	got := 0                 // messages delivered
	collect := func(batch jetstream.MessageBatch, err error) error {
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			got++
			meta, err := m.Metadata()
			if err != nil {
				continue
			}
			next = meta.Sequence.Stream
			ev, err := streams.DecodeEvent(m.Data())
			if err != nil {
				continue // not jetflow's: nothing to show
			}
			ev.Seq, ev.Subject = meta.Sequence.Stream, m.Subject()
			ns, q, t, _ := streams.EventScope(m.Subject())
			out = append(out, TailEvent{Event: ev, Namespace: ns, Queue: q, Type: t})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("tail: %w", err)
		}
		return nil
	}
	// What is there now, at once; if nothing, the first event to come
	// within wait and what came with it (one fetch of many would wait
	// for all of them).
	if err := collect(cons.FetchNoWait(limit)); err != nil {
		return nil, 0, err
	}
	if got == 0 && wait > 0 {
		wait = max(wait, 100*time.Millisecond)
		if err := collect(cons.Fetch(1, jetstream.FetchMaxWait(wait))); err != nil {
			return nil, 0, err
		}
		if got > 0 && limit > 1 {
			if err := collect(cons.FetchNoWait(limit - 1)); err != nil {
				return nil, 0, err
			}
		}
	}
	if got > 0 && got < limit {
		next = max(next, last)
	}
	return out, next, nil
}
