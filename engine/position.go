package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/streams"
)

// QueuePosition is how many jobs are ahead of queued job j on its queue
// (those of its type waiting to be claimed that were queued before it), or
// -1 if j is not queued. It asks the server: the run consumer's count of
// undelivered items, and how many items follow j's own.
func (s *Store) QueuePosition(ctx context.Context, j *streams.Job) (int, error) {
	if j.State != streams.StateQueued {
		return -1, nil
	}
	stream := streams.QueueStream(j.Spec.Queue)
	subject := streams.RunSubject(j.Spec.Queue, j.Spec.Type)
	var waiting uint64
	cons, err := s.JS.Consumer(ctx, stream, ConsumerName(j.Spec.Type))
	switch {
	case err == nil:
		info, err := cons.Info(ctx)
		if err != nil {
			return 0, err
		}
		waiting = info.NumPending
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		// No worker ever ran this type: everything on the subject waits.
		qs, err := s.JS.Stream(ctx, stream)
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
	after, found, err := s.pendingAfter(ctx, stream, subject, j)
	if err != nil {
		return 0, err
	}
	if !found || waiting < after+1 {
		return 0, nil
	}
	return int(waiting - after - 1), nil
}

// pendingAfter finds j's work item on subject, reading forward from the
// time it was queued (its item is stored after that), and returns how many
// messages on subject follow it.
func (s *Store) pendingAfter(ctx context.Context, stream, subject string, j *streams.Job) (uint64, bool, error) {
	req := map[string]any{"start_time": j.QueuedAt.Add(-time.Millisecond).UTC(), "next_by_subj": subject, "batch": 256}
	for read := 0; read < 4096; {
		body, _ := json.Marshal(req)
		msgs, err := s.directBatch(ctx, stream, body)
		if err != nil || len(msgs) == 0 {
			return 0, false, err
		}
		for _, m := range msgs {
			read++
			if item, err := streams.DecodeWorkItem(m.Data); err == nil && item.Job.ID == j.ID {
				n, _ := strconv.ParseUint(m.Header.Get("Nats-Num-Pending"), 10, 64)
				return n, true, nil
			}
		}
		last, _ := strconv.ParseUint(msgs[len(msgs)-1].Header.Get("Nats-Sequence"), 10, 64)
		req = map[string]any{"seq": last + 1, "next_by_subj": subject, "batch": 256}
	}
	return 0, false, nil
}

// directBatch sends a batched direct get and collects its messages.
func (s *Store) directBatch(ctx context.Context, stream string, req []byte) ([]*nats.Msg, error) {
	inbox := s.NC.NewRespInbox()
	sub, err := s.NC.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer sub.Unsubscribe()
	if err := s.NC.PublishRequest("$JS.API.DIRECT.GET."+stream, inbox, req); err != nil {
		return nil, err
	}
	var out []*nats.Msg
	for {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			return nil, fmt.Errorf("direct get on %s: %w", stream, err)
		}
		if m.Header.Get("Status") != "" { // 204 end of batch, 404 nothing
			return out, nil
		}
		out = append(out, m)
	}
}
