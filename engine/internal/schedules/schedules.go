// Package schedules keeps the schedules (cron and intervals): their
// changes and ticks are events on the log (jetflow.reg.schedule.<ns>.<name>),
// appended with the expected last sequence of their subject through the
// store's Aggregate, and projected into the schedules bucket; every
// process reads them through a cache that a watch of the bucket keeps
// current. The leader's Scheduler (engine/internal/maintenance) fires
// their ticks. The rules are package commands'.
package schedules

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Record is a schedule's record as read or written, with its revision and
// the sequence of its subject's last event (what a tick expects).
type Record = store.Version[domain.ScheduleRecord]

// Schedules are the schedules of a store.
type Schedules struct {
	store *store.Store
	types store.Types
	recs  *store.Aggregate[domain.ScheduleRecord]

	warm    store.Warm
	mu      sync.RWMutex
	byKey   map[string]*domain.ScheduleRecord
	changed chan struct{} // closed and replaced at every change
}

// Open opens the schedules of a store; types checks the type and payload
// of a schedule's job as a submit would (the registry).
func Open(ctx context.Context, s *store.Store, types store.Types) (*Schedules, error) {
	x := &Schedules{store: s, types: types, byKey: map[string]*domain.ScheduleRecord{}, changed: make(chan struct{})}
	var err error
	x.recs, err = store.NewAggregate(ctx, s, store.Kind[domain.ScheduleRecord]{
		Name:   "schedule",
		Bucket: streams.SchedulesBucket,
		Seq:    func(r *domain.ScheduleRecord) uint64 { return r.Seq },
		Head:   func(r *domain.ScheduleRecord) []byte { return r.LastHash },
		Fold:   projections.FoldSchedule,
		RefOf: func(ev *domain.Event) (store.Ref, bool) {
			if ev.Schedule == nil {
				return store.Ref{}, false
			}
			return ref(ev.Schedule.Namespace, ev.Schedule.Name), true
		},
		Written: x.remember,
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

func ref(ns, name string) store.Ref {
	return store.Ref{Key: streams.ScheduleKey(ns, name), Subject: streams.ScheduleSubject(ns, name)}
}

func key(ns, name string) string { return ns + "/" + name }

func (x *Schedules) watch(ctx context.Context) error {
	return x.warm.Wait(ctx, x.recs.Feed(x.remember))
}

// remember keeps a record in the cache, unless it holds a later one.
func (x *Schedules) remember(r *domain.ScheduleRecord) {
	if r == nil {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	k := key(r.Namespace, r.Name)
	if cur := x.byKey[k]; cur != nil && cur.Seq >= r.Seq {
		return
	}
	x.byKey[k] = r
	close(x.changed)
	x.changed = make(chan struct{})
}

// Snapshot returns every schedule's record (deleted ones too), by
// namespace/name, and a channel closed at the next change.
func (x *Schedules) Snapshot(ctx context.Context) (map[string]*domain.ScheduleRecord, <-chan struct{}, error) {
	if err := x.watch(ctx); err != nil {
		return nil, nil, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make(map[string]*domain.ScheduleRecord, len(x.byKey))
	for k, r := range x.byKey {
		out[k] = r
	}
	return out, x.changed, nil
}

// List returns the schedules of namespace ns ("": of every namespace),
// by namespace and name; deleted ones are left out. It reads the bucket,
// not the cache: one created an instant ago by another process is listed.
func (x *Schedules) List(ctx context.Context, ns string) ([]*domain.ScheduleRecord, error) {
	if ns != "" {
		if err := commands.CheckNamespace(ns); err != nil {
			return nil, err
		}
	}
	all, err := x.recs.All(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*domain.ScheduleRecord, 0, len(all))
	for _, r := range all {
		x.remember(r)
		if !r.Deleted && (ns == "" || r.Namespace == ns) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, k int) bool {
		if out[i].Namespace != out[k].Namespace {
			return out[i].Namespace < out[k].Namespace
		}
		return out[i].Name < out[k].Name
	})
	return out, nil
}

// Get returns a schedule; one that does not exist, or was deleted, is an
// error matching commands.ErrNotFound. One created a moment ago on another
// process, not seen by the watch yet, is read from the bucket (and the
// log).
func (x *Schedules) Get(ctx context.Context, ns, name string) (*domain.ScheduleRecord, error) {
	if err := checkRef(ns, name); err != nil {
		return nil, err
	}
	if err := x.watch(ctx); err != nil {
		return nil, err
	}
	x.mu.RLock()
	r := x.byKey[key(ns, name)]
	x.mu.RUnlock()
	if r == nil {
		v, err := x.recs.Current(ctx, ref(ns, name))
		if err != nil {
			return nil, err
		}
		r = v.Rec
		x.remember(r)
	}
	if r == nil || r.Deleted {
		return nil, unknown(ns, name)
	}
	return r, nil
}

// Current reads a schedule as the log has it (its record, repaired if it
// is behind), for a decision: the scheduler's.
func (x *Schedules) Current(ctx context.Context, ns, name string) (Record, error) {
	v, err := x.recs.Current(ctx, ref(ns, name))
	if err == nil {
		x.remember(v.Rec)
	}
	return v, err
}

func unknown(ns, name string) error {
	return fmt.Errorf("schedule %s (namespace %s): %w", name, ns, commands.ErrNotFound)
}

// checkRef refuses a namespace or name that cannot be one, as not found
// would be answered for a well-formed one that does not exist.
func checkRef(ns, name string) error {
	if err := commands.CheckNamespace(ns); err != nil {
		return err
	}
	return commands.CheckScheduleName(name)
}

// Create creates a schedule (schedule.created). One that exists with the
// very same spec is returned as it is (created false), one with another
// spec is refused (ErrConflict). Nothing is written when the request, its
// job (checked as a submit, with the type's schema) or the namespace's
// room refuses it.
func (x *Schedules) Create(ctx context.Context, req *commands.ScheduleRequest) (*domain.ScheduleRecord, bool, error) {
	now := time.Now().UTC()
	ns, spec, err := req.Spec(now)
	if err != nil {
		return nil, false, err
	}
	if err := x.checkJob(ctx, ns, spec.Job, now); err != nil {
		return nil, false, err
	}
	var before *domain.ScheduleRecord
	next, ev, err := x.recs.Change(ctx, "schedule", ref(ns, req.Name), func(cur *domain.ScheduleRecord) (*domain.Event, error) {
		before = cur
		if cur == nil || cur.Deleted {
			if err := x.roomFor(ctx, ns); err != nil {
				return nil, err
			}
		}
		return commands.ScheduleEvent(cur, domain.EvScheduleCreated, ns, req.Name, &spec, x.store.ActorOf(ctx), now)
	})
	if ev == nil {
		if err != nil {
			return nil, false, err
		}
		return before, false, nil
	}
	return x.written(next, ev, err), true, nil
}

// Update changes a schedule's spec (schedule.changed) as the patch says;
// a patch that changes nothing writes nothing.
func (x *Schedules) Update(ctx context.Context, ns, name string, p *commands.SchedulePatch) (*domain.ScheduleRecord, error) {
	if err := checkRef(ns, name); err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	var before *domain.ScheduleRecord
	next, ev, err := x.recs.Change(ctx, "schedule", ref(ns, name), func(cur *domain.ScheduleRecord) (*domain.Event, error) {
		before = cur
		if cur == nil || cur.Deleted {
			return nil, unknown(ns, name)
		}
		spec, err := p.Apply(ns, name, cur.Spec, now)
		if err != nil {
			return nil, err
		}
		if p.Job != nil {
			if err := x.checkJob(ctx, ns, spec.Job, now); err != nil {
				return nil, err
			}
		}
		return commands.ScheduleEvent(cur, domain.EvScheduleChanged, ns, name, &spec, x.store.ActorOf(ctx), now)
	})
	if ev == nil {
		return before, err
	}
	return x.written(next, ev, err), nil
}

// Pause pauses a schedule: no tick fires until it is resumed, and the
// ticks meanwhile are not missed, just not there. A paused one is
// returned as it is.
func (x *Schedules) Pause(ctx context.Context, ns, name string) (*domain.ScheduleRecord, error) {
	return x.change(ctx, domain.EvSchedulePaused, ns, name)
}

// Resume resumes a paused schedule: its ticks count from now.
func (x *Schedules) Resume(ctx context.Context, ns, name string) (*domain.ScheduleRecord, error) {
	return x.change(ctx, domain.EvScheduleResumed, ns, name)
}

// Delete deletes a schedule: no tick fires any more; the jobs it fired
// are left as they are. Its name can be created again.
func (x *Schedules) Delete(ctx context.Context, ns, name string) (*domain.ScheduleRecord, error) {
	return x.change(ctx, domain.EvScheduleDeleted, ns, name)
}

func (x *Schedules) change(ctx context.Context, typ, ns, name string) (*domain.ScheduleRecord, error) {
	if err := checkRef(ns, name); err != nil {
		return nil, err
	}
	var before *domain.ScheduleRecord
	next, ev, err := x.recs.Change(ctx, "schedule", ref(ns, name), func(cur *domain.ScheduleRecord) (*domain.Event, error) {
		before = cur
		return commands.ScheduleEvent(cur, typ, ns, name, nil, x.store.ActorOf(ctx), time.Now().UTC())
	})
	if ev == nil {
		return before, err
	}
	return x.written(next, ev, err), nil
}

// written is the record of a change in the log: the one written, or, if
// the record failed (the Projector repairs it), the fold of the event.
func (x *Schedules) written(next Record, ev *domain.Event, err error) *domain.ScheduleRecord {
	if err != nil {
		x.store.Log.Warn("schedule record", "schedule", ev.JobID, "event", ev.Type, "err", err)
	}
	return next.Rec
}

// checkJob checks a schedule's job against the registry (its type, and
// its payload against the type's schema), as its submit would be.
func (x *Schedules) checkJob(ctx context.Context, ns string, body []byte, now time.Time) error {
	job, err := commands.DecodeScheduleJob(body)
	if err != nil {
		return err
	}
	job.Namespace = ns
	spec, err := job.Spec(now)
	if err != nil {
		return err
	}
	if x.types == nil {
		return nil
	}
	if _, err := x.types.Resolve(ctx, ns, spec.Type, spec.Payload); err != nil {
		var in *commands.InputError
		if errors.As(err, &in) && in.Field != "" {
			named := *in
			named.Field = "job." + in.Field
			return &named
		}
		return fmt.Errorf("job: %w", err)
	}
	return nil
}

// roomFor refuses a new schedule in a namespace that holds
// MaxSchedulesPerNamespace (deleted ones count). It counts what this
// engine's cache holds: engines creating at the same moment may pass the
// limit by a few.
func (x *Schedules) roomFor(ctx context.Context, ns string) error {
	all, _, err := x.Snapshot(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, r := range all {
		if r.Namespace == ns {
			n++
		}
	}
	if n >= commands.MaxSchedulesPerNamespace {
		return fmt.Errorf("namespace %s holds %d schedules (deleted ones count until created again), at most %d: %w",
			ns, n, commands.MaxSchedulesPerNamespace, commands.ErrConflict)
	}
	return nil
}

// Tick appends a tick decided on v, the version its step was decided on,
// and writes the record. lost: another writer appended first (another
// leader recorded the tick, or someone changed the schedule): nothing was
// written, and the caller decides again on Current.
func (x *Schedules) Tick(ctx context.Context, v Record, ev *domain.Event) (next Record, lost bool, err error) {
	c := ev.Schedule
	w := &store.Write[domain.ScheduleRecord]{Ref: ref(c.Namespace, c.Name), Cur: v, Ev: ev}
	x.recs.Write(ctx, "tick", w)
	switch {
	case w.Lost:
		return v, true, nil
	case !w.Appended():
		return v, false, w.Err
	case w.Err != nil:
		// In the log: the record is repaired by the next Current.
		x.store.Log.Warn("schedule record", "schedule", ev.JobID, "err", w.Err)
	}
	return w.Next, false, nil
}
