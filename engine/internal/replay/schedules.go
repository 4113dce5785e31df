package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// rebuildSchedules folds every schedule event of the log, by
// namespace/name.
func rebuildSchedules(ctx context.Context, js jetstream.JetStream) (map[string]*domain.ScheduleRecord, error) {
	out := map[string]*domain.ScheduleRecord{}
	_, err := streams.ReadSubject(ctx, js.Conn(), streams.EventsStream, streams.RegistryPrefix+".schedule.>", 1, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return fmt.Errorf("schedule event %d: %w", seq, err)
		}
		ev.Seq = seq
		if ev.Schedule == nil {
			return fmt.Errorf("event %d on a schedule's subject is not a schedule's (%s)", seq, ev.Type)
		}
		k := ev.Schedule.Namespace + "/" + ev.Schedule.Name
		r, err := projections.FoldSchedule(out[k], ev)
		if err != nil {
			return fmt.Errorf("event %d: %w", seq, err)
		}
		out[k] = r
		return nil
	})
	return out, err
}

// verifySchedules compares the schedules rebuilt from the log with their
// records. A schedule ticks while this reads: a record ahead of the
// rebuild is compared with the log folded up to it, one behind is read
// again after settle (its writer projects it within) before it counts as
// a difference. It returns how many schedules it compared.
func verifySchedules(ctx context.Context, js jetstream.JetStream, settle time.Duration, rep *projections.Report) (int, error) {
	log, err := rebuildSchedules(ctx, js)
	if err != nil {
		return 0, err
	}
	kv, err := js.KeyValue(ctx, streams.SchedulesBucket)
	if err != nil {
		return 0, err
	}
	evs, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return 0, err
	}
	// check compares one schedule; behind reports a record that is
	// missing or behind the log.
	check := func(want *domain.ScheduleRecord) (d *projections.Diff, behind bool, err error) {
		id := "schedule " + want.Namespace + "/" + want.Name
		e, err := kv.Get(ctx, streams.ScheduleKey(want.Namespace, want.Name))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return &projections.Diff{ID: id, Reason: "in the log, missing from the schedules bucket"}, true, nil
		}
		if err != nil {
			return nil, false, err
		}
		var got domain.ScheduleRecord
		if err := streams.Unmarshal(e.Value(), &got); err != nil {
			return nil, false, fmt.Errorf("%s: %w", id, err)
		}
		if got.Seq < want.Seq {
			return &projections.Diff{ID: id, Reason: fmt.Sprintf("record at event %d, log at %d", got.Seq, want.Seq)}, true, nil
		}
		if got.Seq > want.Seq {
			if want, err = foldScheduleTail(ctx, evs, want, got.Seq); err != nil {
				return nil, false, err
			}
		}
		if reason := scheduleDiff(&got, want); reason != "" {
			return &projections.Diff{ID: id, Reason: reason}, false, nil
		}
		return nil, false, nil
	}
	var again []*domain.ScheduleRecord
	for _, want := range log {
		d, behind, err := check(want)
		switch {
		case err != nil:
			return 0, err
		case behind && settle > 0:
			again = append(again, want)
		case d != nil:
			rep.Diffs = append(rep.Diffs, *d)
		}
	}
	if len(again) > 0 {
		t := time.NewTimer(settle)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		}
		for _, want := range again {
			d, _, err := check(want)
			if err != nil {
				return 0, err
			}
			if d != nil {
				rep.Diffs = append(rep.Diffs, *d)
			}
		}
	}
	return len(log), nil
}

// foldScheduleTail folds the schedule's events after r.Seq, up to upTo,
// from the log.
func foldScheduleTail(ctx context.Context, evs jetstream.Stream, r *domain.ScheduleRecord, upTo uint64) (*domain.ScheduleRecord, error) {
	subject := streams.ScheduleSubject(r.Namespace, r.Name)
	for seq := r.Seq + 1; seq <= upTo; {
		m, err := evs.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, err
		}
		if m.Sequence > upTo {
			break
		}
		ev, err := streams.DecodeEvent(m.Data)
		if err != nil {
			return nil, err
		}
		ev.Seq = m.Sequence
		if r, err = projections.FoldSchedule(r, ev); err != nil {
			return nil, err
		}
		seq = m.Sequence + 1
	}
	return r, nil
}

// scheduleDiff says how a record differs from the log's fold ("": not).
func scheduleDiff(got, want *domain.ScheduleRecord) string {
	if got.Seq != want.Seq || got.Paused != want.Paused || got.Deleted != want.Deleted || !got.Next.Equal(want.Next) {
		return fmt.Sprintf("record at event %d (paused %v, deleted %v, next %s), log at %d (paused %v, deleted %v, next %s)",
			got.Seq, got.Paused, got.Deleted, got.Next.Format(time.RFC3339Nano), want.Seq, want.Paused, want.Deleted, want.Next.Format(time.RFC3339Nano))
	}
	if string(got.Spec.Job) != string(want.Spec.Job) || got.Spec.Cron != want.Spec.Cron || got.Spec.Every != want.Spec.Every {
		return "spec differs from the log's"
	}
	runs := len(got.LastRuns) == len(want.LastRuns)
	for i := 0; runs && i < len(got.LastRuns); i++ {
		a, b := got.LastRuns[i], want.LastRuns[i]
		runs = a.At.Equal(b.At) && a.Outcome == b.Outcome && a.Job == b.Job && a.Count == b.Count
	}
	if !runs || got.LastJob != want.LastJob || got.Fired != want.Fired || got.Skipped != want.Skipped ||
		got.Cancelled != want.Cancelled || got.Missed != want.Missed || got.Refused != want.Refused {
		return fmt.Sprintf("ticks differ: record %d fired (last job %s), %d missed; log %d fired (last job %s), %d missed",
			got.Fired, got.LastJob, got.Missed, want.Fired, want.LastJob, want.Missed)
	}
	return ""
}
