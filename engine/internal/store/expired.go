package store

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Expired lists the ids of terminal jobs older than the retention of their
// namespace (ns: only that one, if not empty), oldest first, at most max.
// Children are left out: they are purged with their parent. It reads the
// whole bucket once and keeps only the max oldest, so a backlog of any size
// costs one scan and max entries of memory.
func (s *Store) Expired(ctx context.Context, retention func(ns string) time.Duration, ns string, max int) ([]string, error) {
	var oldest newestFirst
	now := time.Now()
	per := map[string]time.Duration{}
	err := s.Scan(ctx, func(j *domain.Job) {
		if !purgeable(j, ns) {
			return
		}
		r, ok := per[j.Spec.Namespace]
		if !ok {
			r = retention(j.Spec.Namespace)
			per[j.Spec.Namespace] = r
		}
		if !commands.Expired(j, r, now) {
			return
		}
		c := expired{j.ID, j.FinishedAt}
		switch {
		case len(oldest) < max:
			heap.Push(&oldest, c)
		case c.end.Before(oldest[0].end):
			oldest[0] = c
			heap.Fix(&oldest, 0)
		}
	})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(oldest))
	for i := len(ids) - 1; i >= 0; i-- {
		ids[i] = heap.Pop(&oldest).(expired).id
	}
	return ids, nil
}

type expired struct {
	id  string
	end time.Time
}

// newestFirst is a heap of expired jobs whose top is the most recent one:
// the first to give way to an older one.
type newestFirst []expired

func (h newestFirst) Len() int           { return len(h) }
func (h newestFirst) Less(i, k int) bool { return h[i].end.After(h[k].end) }
func (h newestFirst) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *newestFirst) Push(x any)        { *h = append(*h, x.(expired)) }
func (h *newestFirst) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// errEnough ends a read of the log that found what it was asked for.
var errEnough = errors.New("enough")

// EndedAfter reads the log's job events from sequence from, in order, and
// calls fn with each job an event moved into a terminal state, with the
// event's subject (its namespace is the subject's third token), as long as
// the log stored the event at upTo or before, until fn kept (returned
// true) limit of them or the log has no more. It returns the sequence to read from next:
// after the last event it read. Events that do not decode are passed over
// (not jetflow's: another program publishing on its subjects).
func (s *Store) EndedAfter(ctx context.Context, from uint64, upTo time.Time, limit int, fn func(id, subject string) bool) (uint64, error) {
	next := max(from, 1)
	end, err := s.LogSeqAt(ctx, upTo) // the first event past upTo: no more is asked for than lies before it
	if err != nil {
		return next, err
	}
	found := 0
	for found < limit && next < end {
		req := map[string]any{"seq": next, "next_by_subj": streams.EventsPrefix + ".>", "batch": min(endedBatch, end-next)}
		read := 0
		var ev domain.Event
		more, err := streams.DirectBatch(ctx, s.nc, streams.EventsStream, req, func(m *nats.Msg) error {
			seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
			if err != nil {
				return fmt.Errorf("read the log: an event without a sequence")
			}
			at, err := time.Parse(time.RFC3339Nano, m.Header.Get("Nats-Time-Stamp"))
			if err != nil {
				return fmt.Errorf("read the log: event %d without a time", seq)
			}
			if at.After(upTo) {
				return errEnough
			}
			read++
			next = seq + 1
			if streams.DecodeEventHead(m.Data, &ev) != nil || !ev.To.Terminal() || ev.From.Terminal() {
				return nil
			}
			if fn(ev.JobID, m.Subject) {
				if found++; found == limit {
					return errEnough
				}
			}
			return nil
		})
		switch {
		case errors.Is(err, errEnough):
			return next, nil
		case err != nil:
			return next, err
		case more == 0 || read == 0:
			return next, nil
		}
	}
	return next, nil
}

// endedBatch is how many events one request of EndedAfter reads.
const endedBatch uint64 = 1000

// LogSeqAt is the sequence of the first job event the log stored at t or
// after, or the sequence the next event will have when there is none.
func (s *Store) LogSeqAt(ctx context.Context, t time.Time) (uint64, error) {
	info, err := s.events.Info(ctx) // before the search: an event stored after it is not passed over
	if err != nil {
		return 0, err
	}
	var seq uint64
	req := map[string]any{"start_time": t.UTC(), "next_by_subj": streams.EventsPrefix + ".>", "batch": 1}
	_, err = streams.DirectBatch(ctx, s.nc, streams.EventsStream, req, func(m *nats.Msg) error {
		seq, _ = strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		return nil
	})
	if err != nil || seq > 0 {
		return seq, err
	}
	return info.State.LastSeq + 1, nil
}
