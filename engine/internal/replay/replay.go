// Package replay rebuilds what the event log says from the log itself and
// compares it with the records (jetflow replay --verify): every job, every
// finished fan-out's counts, the registry's records, and the admitter's
// slot counts. The folds it uses are package projections'; the reads are
// its own.
package replay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Rebuild folds the event log, from the first event up to and including
// sequence upTo (0: the last one now), into job records: the state of every
// job as the log says it is.
func Rebuild(ctx context.Context, js jetstream.JetStream, upTo uint64) (map[string]*domain.Job, uint64, error) {
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return nil, 0, fmt.Errorf("events stream: %w", err)
	}
	if upTo == 0 {
		upTo = s.CachedInfo().State.LastSeq
	}
	jobs := map[string]*domain.Job{}
	if upTo == 0 {
		return jobs, 0, nil
	}
	cons, err := js.OrderedConsumer(ctx, streams.EventsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, 0, fmt.Errorf("read event log: %w", err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2048))
	if err != nil {
		return nil, 0, fmt.Errorf("read event log: %w", err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, 0, fmt.Errorf("read event log: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return nil, 0, err
		}
		if meta.Sequence.Stream > upTo {
			break
		}
		if !streams.IsJobSubject(m.Subject()) {
			// Piece events are facts about a parent's pieces, not its
			// transitions (CountPieces folds them); registry events are
			// folded by rebuildRegistry.
			if meta.Sequence.Stream >= upTo {
				break
			}
			continue
		}
		ev, err := streams.DecodeEvent(m.Data())
		if err != nil {
			return nil, 0, fmt.Errorf("event %d: %w", meta.Sequence.Stream, err)
		}
		ev.Seq, ev.Subject = meta.Sequence.Stream, m.Subject()
		if jobs[ev.JobID] == nil && ev.Type != domain.EvSubmitted {
			// Its first events aged out of the log (the events stream's
			// MaxAge): what is left cannot rebuild it.
			if meta.Sequence.Stream >= upTo {
				break
			}
			continue
		}
		j, err := projections.Fold(jobs[ev.JobID], ev)
		if err != nil {
			return nil, 0, fmt.Errorf("event %d: %w", ev.Seq, err)
		}
		jobs[ev.JobID] = j
		if meta.Sequence.Stream >= upTo {
			break
		}
	}
	return jobs, upTo, nil
}

// Verify rebuilds every job from the log and compares it with its record in
// the jobs bucket. On a live system a job that moves while Verify reads is
// compared at the same event: records that are ahead of the rebuilt state
// are folded forward from the log first, records that are behind are read
// again after settle (writers project their own events within it) before
// they count as a difference.
func Verify(ctx context.Context, js jetstream.JetStream, settle time.Duration) (*projections.Report, error) {
	log, upTo, err := Rebuild(ctx, js, 0)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, streams.JobsBucket)
	if err != nil {
		return nil, err
	}
	recs, err := readAll(ctx, kv)
	if err != nil {
		return nil, err
	}
	evs, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return nil, err
	}
	rep := &projections.Report{Jobs: len(log), Records: len(recs), LastSeq: upTo}
	var behind []string
	for id, want := range log {
		got, ok := recs[id]
		if !want.PurgedAt.IsZero() {
			// Purged: its record must be gone (a purger that crashed
			// after the append left it to the Projector).
			rep.Purged++
			if ok {
				behind = append(behind, id)
			}
			continue
		}
		if !ok || got.Seq < want.Seq {
			behind = append(behind, id)
			continue
		}
		if got.Seq > want.Seq {
			if want, err = foldTail(ctx, evs, want, got.Seq); err != nil {
				return nil, err
			}
		}
		if d := compare(want, got); d != nil {
			rep.Diffs = append(rep.Diffs, *d)
		}
	}
	if len(behind) > 0 && settle > 0 {
		t := time.NewTimer(settle)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	for _, id := range behind {
		want := log[id]
		got, err := readOne(ctx, kv, id)
		if err != nil {
			return nil, err
		}
		if !want.PurgedAt.IsZero() {
			if got != nil {
				rep.Diffs = append(rep.Diffs, projections.Diff{ID: id, Reason: fmt.Sprintf("purged at event %d, record still in the jobs bucket", want.Seq)})
			}
			continue
		}
		switch {
		case got == nil:
			rep.Diffs = append(rep.Diffs, projections.Diff{ID: id, Reason: "in the log, missing from the jobs bucket"})
			continue
		case got.Seq < want.Seq:
			rep.Diffs = append(rep.Diffs, projections.Diff{ID: id, Reason: fmt.Sprintf("record at event %d, log at %d", got.Seq, want.Seq)})
			continue
		case got.Seq > want.Seq:
			if want, err = foldTail(ctx, evs, want, got.Seq); err != nil {
				return nil, err
			}
		}
		if d := compare(want, got); d != nil {
			rep.Diffs = append(rep.Diffs, *d)
		}
	}
	for id := range recs {
		if _, ok := log[id]; !ok {
			rep.Diffs = append(rep.Diffs, projections.Diff{ID: id, Reason: "in the jobs bucket, not in the log"})
		}
	}
	// A finished fan-out's counts must be what its piece events say.
	for id, j := range log {
		if j.Fanout == nil || !commands.Settled(j.State) || j.Events == 0 || j.Spec.Workflow != nil {
			continue // a workflow's counts: verifyWorkflows
		}
		if j.Error != nil && j.Error.Code == "STALLED" {
			continue // stalled parents end without final counts
		}
		got, err := store.CountPieces(ctx, js.Conn(), id, j.Fanout.Counts.UpTo)
		if err != nil {
			return nil, err
		}
		want := j.Fanout.Counts
		if got.Succeeded != want.Succeeded || got.Failed != want.Failed || got.Cancelled != want.Cancelled {
			rep.Diffs = append(rep.Diffs, projections.Diff{ID: id, Reason: fmt.Sprintf(
				"fan-out counts %d/%d/%d (succeeded/failed/cancelled) but its piece events say %d/%d/%d",
				want.Succeeded, want.Failed, want.Cancelled, got.Succeeded, got.Failed, got.Cancelled)})
		}
	}
	wfDiffs, err := verifyWorkflows(ctx, js.Conn(), log, upTo)
	if err != nil {
		return nil, err
	}
	rep.Diffs = append(rep.Diffs, wfDiffs...)
	regDiffs, n, err := verifyRegistry(ctx, js)
	if err != nil {
		return nil, err
	}
	rep.Registry = n
	rep.Diffs = append(rep.Diffs, regDiffs...)
	if rep.Schedules, err = verifySchedules(ctx, js, settle, rep); err != nil {
		return nil, err
	}
	if err := verifySlots(ctx, js, log, settle, rep); err != nil {
		return nil, err
	}
	reg, err := rebuildRegistry(ctx, js)
	if err != nil {
		return nil, err
	}
	rateDiffs, n, err := verifyRates(ctx, js, reg, upTo)
	if err != nil {
		return nil, err
	}
	rep.RateAdmissions = n
	rep.Diffs = append(rep.Diffs, rateDiffs...)
	uniqueDiffs, n, err := verifyUnique(ctx, js, log)
	if err != nil {
		return nil, err
	}
	rep.UniqueJobs = n
	rep.Diffs = append(rep.Diffs, uniqueDiffs...)
	sort.Slice(rep.Diffs, func(i, k int) bool { return rep.Diffs[i].ID < rep.Diffs[k].ID })
	return rep, nil
}

// foldTail folds the job's events after j.Seq up to upTo from the log.
func foldTail(ctx context.Context, evs jetstream.Stream, j *domain.Job, upTo uint64) (*domain.Job, error) {
	subject := streams.JobSubject(j)
	for seq := j.Seq + 1; seq <= upTo; {
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
		ev.Seq, ev.Subject = m.Sequence, m.Subject
		if j, err = projections.Fold(j, ev); err != nil {
			return nil, err
		}
		seq = m.Sequence + 1
	}
	return j, nil
}

func compare(want, got *domain.Job) *projections.Diff {
	a, err1 := streams.EncodeJob(want)
	b, err2 := streams.EncodeJob(got)
	if err1 == nil && err2 == nil && bytes.Equal(a, b) {
		return nil
	}
	return &projections.Diff{ID: want.ID, Reason: "record differs from the log", Fields: fieldDiff(want, got)}
}

// fieldDiff names the top-level fields of the job's JSON view (and the
// record's internals) that differ.
func fieldDiff(want, got *domain.Job) []string {
	var fields []string
	toMap := func(v any) map[string]json.RawMessage {
		b, _ := json.Marshal(v)
		m := map[string]json.RawMessage{}
		_ = json.Unmarshal(b, &m)
		return m
	}
	wm, gm := toMap(projections.View(want)), toMap(projections.View(got))
	wm["lease_item"], _ = json.Marshal(want.LeaseItem)
	gm["lease_item"], _ = json.Marshal(got.LeaseItem)
	for k, v := range wm {
		if !bytes.Equal(v, gm[k]) {
			fields = append(fields, k)
		}
	}
	sort.Strings(fields)
	if len(fields) == 0 {
		fields = []string{"(encoding)"}
	}
	return fields
}

func readAll(ctx context.Context, kv jetstream.KeyValue) (map[string]*domain.Job, error) {
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	out := map[string]*domain.Job{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return out, nil
			}
			if e == nil {
				return out, nil
			}
			j, err := streams.DecodeJob(e.Value())
			if err != nil {
				return nil, fmt.Errorf("record %s: %w", e.Key(), err)
			}
			out[e.Key()] = j
		}
	}
}

func readOne(ctx context.Context, kv jetstream.KeyValue, id string) (*domain.Job, error) {
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return streams.DecodeJob(e.Value())
}

// slotsOf counts the slots of the jobs of every queue with limits as the
// rebuilt log gives them (commands.CountSlots).
func slotsOf(reg *projections.Registry, log map[string]*domain.Job) map[string]commands.Counts {
	byQueue := map[string][]commands.Slot{}
	for name, q := range reg.Queues {
		if q.LimitsSeq != 0 {
			byQueue[name] = nil
		}
	}
	for _, j := range log {
		if _, ok := byQueue[j.Spec.Queue]; !ok || j.State.Terminal() {
			continue
		}
		sl := commands.SlotOf(j.ID, &j.Spec, reg.Queues[j.Spec.Queue].Limits)
		sl.State, sl.Created, sl.Hold = j.State, j.CreatedAt, j.Hold
		byQueue[j.Spec.Queue] = append(byQueue[j.Spec.Queue], sl)
	}
	out := map[string]commands.Counts{}
	for name, slots := range byQueue {
		out[name] = commands.CountSlots(slots)
	}
	return out
}

// askAdmitter asks the leading engine's admitter for its counts; nil if
// none answers.
func askAdmitter(ctx context.Context, js jetstream.JetStream) map[string]commands.Counts {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := js.Conn().RequestWithContext(ctx, streams.AdmissionCounts, nil)
	if err != nil {
		return nil
	}
	var out map[string]commands.Counts
	if json.Unmarshal(m.Data, &out) != nil {
		return nil
	}
	return out
}

// slotDiffs compares the admitter's counts with the log's.
func slotDiffs(want, got map[string]commands.Counts) []projections.Diff {
	var diffs []projections.Diff
	for name, w := range want {
		g, ok := got[name]
		if !ok {
			diffs = append(diffs, projections.Diff{ID: "queue " + name, Reason: "has limits, but the admitter does not follow it"})
			continue
		}
		same := g.Holding == w.Holding && g.Pending == w.Pending && len(g.Users) == len(w.Users) && len(g.Keys) == len(w.Keys)
		for u, wc := range w.Users {
			same = same && g.Users[u] == wc
		}
		for k, wc := range w.Keys {
			same = same && g.Keys[k] == wc
		}
		if !same {
			diffs = append(diffs, projections.Diff{ID: "queue " + name, Reason: fmt.Sprintf(
				"the admitter counts %d running and %d pending (%v, keys %v); the log says %d and %d (%v, keys %v)",
				g.Holding, g.Pending, g.Users, g.Keys, w.Holding, w.Pending, w.Users, w.Keys)})
		}
	}
	return diffs
}

// verifySlots compares the slot counts of the queues with limits, rebuilt
// from the log, with the live admitter's, if one answers. Counts that
// differ are compared again after settle, on a new rebuild (the system may
// have been moving).
func verifySlots(ctx context.Context, js jetstream.JetStream, log map[string]*domain.Job, settle time.Duration, rep *projections.Report) error {
	reg, err := rebuildRegistry(ctx, js)
	if err != nil {
		return err
	}
	want := slotsOf(reg, log)
	if len(want) == 0 {
		return nil
	}
	rep.Slots = want
	got := askAdmitter(ctx, js)
	if got == nil {
		return nil
	}
	rep.SlotsChecked = true
	if len(slotDiffs(want, got)) == 0 || settle <= 0 {
		rep.Diffs = append(rep.Diffs, slotDiffs(want, got)...)
		return nil
	}
	t := time.NewTimer(settle)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
	log2, _, err := Rebuild(ctx, js, 0)
	if err != nil {
		return err
	}
	want = slotsOf(reg, log2)
	rep.Slots = want
	if got = askAdmitter(ctx, js); got != nil {
		rep.Diffs = append(rep.Diffs, slotDiffs(want, got)...)
	}
	return nil
}
