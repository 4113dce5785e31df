package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// maxExactAhead bounds how many work items QueuePosition checks one by one.
const maxExactAhead = 1000

// errFound stops a read of a queue's items once a job's own item is found.
var errFound = errors.New("found")

// QueuePosition is how many jobs are ahead of queued job j on its queue, as
// the workers of its type will take them (one consumer per type: jobs of
// other types do not wait for these), or -1 if j is not queued. It reads the
// work items waiting before j's and counts those whose job is still queued
// at the state the item carries: items left behind by jobs that moved on
// (cancelled while queued, say) are not ahead of anyone. Past
// maxExactAhead items, the count is the stream's, an upper bound.
func (s *Store) QueuePosition(ctx context.Context, j *domain.Job) (int, error) {
	if !commands.InQueue(j.State) {
		return -1, nil
	}
	stream := streams.QueueStream(j.Spec.Queue)
	subject := streams.RunSubject(j.Spec.Queue, j.Spec.Type)
	from := uint64(1)
	var waiting uint64
	cons, err := s.js.Consumer(ctx, stream, ConsumerName(j.Spec.Type))
	switch {
	case err == nil:
		info, err := cons.Info(ctx)
		if err != nil {
			return 0, err
		}
		from, waiting = info.Delivered.Stream+1, info.NumPending
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		// No worker ever ran this type: everything on the subject waits.
		qs, err := s.js.Stream(ctx, stream)
		if err != nil {
			return 0, err
		}
		info, err := qs.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			return 0, err
		}
		waiting = info.State.Subjects[subject]
	default:
		return 0, err
	}
	var ahead []*domain.WorkItem
	_, err = streams.ReadSubject(ctx, s.nc, stream, subject, from, func(_ uint64, data []byte) error {
		item, err := streams.DecodeWorkItem(data)
		if err != nil {
			return nil
		}
		if item.Job.ID == j.ID {
			return errFound
		}
		if len(ahead) == maxExactAhead {
			return errTooFar
		}
		ahead = append(ahead, item)
		return nil
	})
	switch {
	case errors.Is(err, errFound):
		return s.liveItems(ctx, ahead)
	case err != nil && !errors.Is(err, errTooFar):
		return 0, err
	}
	// Far down the queue (or its item not found): the stream's count.
	after, found, err := s.pendingAfter(ctx, stream, subject, j)
	if err != nil {
		return 0, err
	}
	if !found || waiting < after+1 {
		return 0, nil
	}
	return int(waiting - after - 1), nil
}

var errTooFar = errors.New("too far")

// liveItems counts the jobs of items that are still queued at the state
// their item carries.
func (s *Store) liveItems(ctx context.Context, items []*domain.WorkItem) (int, error) {
	ids := make([]string, 0, len(items))
	for _, it := range items {
		ids = append(ids, it.Job.ID)
	}
	recs, err := s.Records(ctx, ids)
	if err != nil {
		return 0, err
	}
	seen := map[string]bool{}
	n := 0
	for _, it := range items {
		if seen[it.Job.ID] {
			continue
		}
		cur, ok := recs[it.Job.ID]
		if !ok || !commands.InQueue(cur.Job.State) || cur.Job.Seq != it.Job.Seq {
			continue
		}
		seen[it.Job.ID] = true
		n++
	}
	return n, nil
}

// pendingAfter finds j's work item on subject, reading forward from the
// time it was queued (its item is stored after that), and returns how many
// messages on subject follow it.
func (s *Store) pendingAfter(ctx context.Context, stream, subject string, j *domain.Job) (uint64, bool, error) {
	req := map[string]any{"start_time": j.QueuedAt.Add(-time.Millisecond).UTC(), "next_by_subj": subject, "batch": 256}
	var after, last uint64
	found := false
	for read := 0; read < 4096 && !found; {
		n := 0
		_, err := streams.DirectBatch(ctx, s.nc, stream, req, func(m *nats.Msg) error {
			n++
			last, _ = strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
			if item, err := streams.DecodeWorkItem(m.Data); err == nil && item.Job.ID == j.ID {
				after, _ = strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				found = true
				return errFound
			}
			return nil
		})
		if err != nil && !errors.Is(err, errFound) {
			return 0, false, err
		}
		if n == 0 {
			return 0, false, nil // not (yet) on the subject
		}
		read += n
		req = map[string]any{"seq": last + 1, "next_by_subj": subject, "batch": 256}
	}
	return after, found, nil
}
