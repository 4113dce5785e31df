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
	"hash/maphash"
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
	h, err := foldScope(ctx, js, Scope{}, upTo, keepWhole)
	if err != nil {
		return nil, 0, err
	}
	return h.live, h.last, nil
}

// Verify rebuilds every job from the log and compares it with its record in
// the jobs bucket. On a live system a job that moves while Verify reads is
// compared at the same event: records that are ahead of the rebuilt state
// are folded forward from the log first, records that are behind are read
// again after settle (writers project their own events within it) before
// they count as a difference.
func Verify(ctx context.Context, js jetstream.JetStream, settle time.Duration) (*projections.Report, error) {
	return VerifyScope(ctx, js, Scope{}, settle)
}

// VerifyScope is Verify on a scope of the log: only the records of the
// scope's jobs are compared (a time range: the jobs submitted in it, folded
// forward to their record), and the registry, schedules and queue counts
// only on the whole log. Jobs that ended are compared by a hash of their
// encoded record and let go (folded again from the log only if they
// differ): memory holds the jobs that have not ended.
func VerifyScope(ctx context.Context, js jetstream.JetStream, sc Scope, settle time.Duration) (*projections.Report, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	h, err := foldScope(ctx, js, sc, 0, keepSum)
	if err != nil {
		return nil, err
	}
	upTo := h.last
	kv, err := js.KeyValue(ctx, streams.JobsBucket)
	if err != nil {
		return nil, err
	}
	evs, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return nil, err
	}
	rep := &projections.Report{Jobs: h.jobs(), LastSeq: upTo}
	// recs: the records compared whole (of jobs kept whole, of jobs let go
	// whose hash differs); orphans: records of no job of the log.
	recs := map[string]*domain.Job{}
	var orphans []string
	err = h.records(ctx, kv, sc, func(id string, raw []byte, got *domain.Job) error {
		rep.Records++
		if d, ok := h.done[id]; ok {
			d.seen = true
			h.done[id] = d
			if !d.purged && maphash.Bytes(h.seed, raw) == d.sum {
				return nil
			}
		} else if _, ok := h.live[id]; !ok {
			orphans = append(orphans, id)
			return nil
		}
		if got == nil {
			var err error
			if got, err = streams.DecodeJob(raw); err != nil {
				return fmt.Errorf("record %s: %w", id, err)
			}
		}
		recs[id] = got
		return nil
	})
	if err != nil {
		return nil, err
	}
	// want: the job as the log says, whole.
	want := func(id string) (*domain.Job, error) {
		if j, ok := h.live[id]; ok {
			return j, nil
		}
		return h.expand(ctx, id, h.done[id].seq)
	}
	check := func(id string) ([]string, error) {
		got, ok := recs[id]
		w, err := want(id)
		if err != nil {
			return nil, err
		}
		if !w.PurgedAt.IsZero() {
			// Purged: its record must be gone (a purger that crashed
			// after the append left it to the Projector).
			rep.Purged++
			if ok {
				return []string{id}, nil
			}
			return nil, nil
		}
		if !ok || got.Seq < w.Seq {
			return []string{id}, nil
		}
		if got.Seq > w.Seq {
			if w, err = foldTail(ctx, evs, w, got.Seq); err != nil {
				return nil, err
			}
		}
		if d := compare(w, got); d != nil {
			rep.Diffs = append(rep.Diffs, *d)
		}
		return nil, nil
	}
	var behind []string
	for id := range h.live {
		b, err := check(id)
		if err != nil {
			return nil, err
		}
		behind = append(behind, b...)
	}
	for id, d := range h.done {
		switch {
		case !d.seen && d.purged:
			rep.Purged++
		case !d.seen:
			behind = append(behind, id)
		case recs[id] != nil:
			b, err := check(id)
			if err != nil {
				return nil, err
			}
			behind = append(behind, b...)
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
		want, err := want(id)
		if err != nil {
			return nil, err
		}
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
	for _, id := range orphans {
		rep.Diffs = append(rep.Diffs, projections.Diff{ID: id, Reason: "in the jobs bucket, not in the log"})
	}
	log := h.live // every job with a fan-out, workflow and step, every job not ended
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
	if !sc.Whole() {
		sortDiffs(rep)
		return rep, nil
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
	sortDiffs(rep)
	return rep, nil
}

func sortDiffs(rep *projections.Report) {
	sort.Slice(rep.Diffs, func(i, k int) bool { return rep.Diffs[i].ID < rep.Diffs[k].ID })
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
	h2, err := foldScope(ctx, js, Scope{}, 0, keepState)
	if err != nil {
		return err
	}
	want = slotsOf(reg, h2.live)
	rep.Slots = want
	if got = askAdmitter(ctx, js); got != nil {
		rep.Diffs = append(rep.Diffs, slotDiffs(want, got)...)
	}
	return nil
}
