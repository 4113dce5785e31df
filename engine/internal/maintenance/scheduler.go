package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/engine/internal/schedules"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/lifecycle"
)

// Defaults of the Scheduler.
const (
	DefaultMisfireGrace        = commands.DefaultMisfireGrace
	DefaultScheduleConcurrency = 4
	// maxTicksAtOnce bounds the ticks one schedule records before the
	// others get their turn (a backlog of misfire "all").
	maxTicksAtOnce = 2 * commands.MaxMissedFires
	// schedulerNap is the longest the scheduler sleeps without looking
	// (a clock that jumped, a watch that missed a change).
	schedulerNap = time.Minute
	// scheduleRetry is how long a schedule whose tick failed (NATS away)
	// waits before the next try.
	scheduleRetry = 2 * time.Second
)

// Scheduler fires the ticks of the schedules (docs/schedules.md). It keeps
// them from a watch of their bucket (the schedules' cache), sleeps until
// the soonest tick is due (a timer, woken early by any change), and for
// each due tick of a schedule, decided on the schedule as the log has it
// (commands.NextStep):
//
//  1. submits the tick's job, whose id is derived from the schedule and
//     the tick (commands.TickJobID): a second submit of it is the same job;
//  2. appends schedule.tick, naming the job, with the expected last
//     sequence of the schedule's subject: of two leaders, or of a leader
//     and one that died between 1 and 2, exactly one records the tick.
//
// A tick that must not fire (overlap skip, a misfire) finds out first
// whether its job exists: a leader that died after 1 fired it, and the
// tick is recorded as fired. One Scheduler runs at a time, under the
// Leader.
type Scheduler struct {
	store *store.Store
	cfg   SchedulerConfig
	log   *slog.Logger
	life  lifecycle.Loop

	ticks atomic.Int64 // ticks recorded
	fired atomic.Int64 // jobs submitted by recorded ticks
}

// SchedulerConfig configures the Scheduler.
type SchedulerConfig struct {
	// Schedules are the schedules to fire.
	Schedules *schedules.Schedules
	// MisfireGrace is how late a tick may fire and still count as on
	// time (default DefaultMisfireGrace); later, the schedule's misfire
	// policy decides.
	MisfireGrace time.Duration
	// Concurrency is how many schedules fire at once (default
	// DefaultScheduleConcurrency).
	Concurrency int
	Log         *slog.Logger
}

func (c SchedulerConfig) withDefaults() SchedulerConfig {
	orDefault(&c.MisfireGrace, DefaultMisfireGrace)
	orDefault(&c.Concurrency, DefaultScheduleConcurrency)
	return c
}

func (c SchedulerConfig) validate() error {
	if c.Schedules == nil {
		return errors.New("scheduler: no schedules")
	}
	return nil
}

// NewScheduler returns a Scheduler.
func NewScheduler(s *store.Store, cfg SchedulerConfig) *Scheduler {
	cfg = cfg.withDefaults()
	return &Scheduler{store: s, cfg: cfg, log: logger(cfg.Log, "scheduler")}
}

// Ticks is how many ticks this scheduler recorded; Fired how many of them
// submitted a job.
func (sc *Scheduler) Ticks() int64 { return sc.ticks.Load() }

// Fired is how many recorded ticks of this scheduler fired a job.
func (sc *Scheduler) Fired() int64 { return sc.fired.Load() }

// Start starts firing. Idempotent.
func (sc *Scheduler) Start(context.Context) error {
	return sc.life.Start(func() (func(context.Context), error) {
		if err := sc.cfg.validate(); err != nil {
			return nil, err
		}
		return sc.run, nil
	})
}

// Stop stops firing. Idempotent.
func (sc *Scheduler) Stop(ctx context.Context) { sc.life.Stop(ctx) }

func (sc *Scheduler) run(ctx context.Context) {
	retry := map[string]time.Time{} // schedule -> not before (a failed tick)
	for ctx.Err() == nil {
		all, changed, err := sc.cfg.Schedules.Snapshot(ctx)
		if err != nil {
			if ctx.Err() == nil {
				sc.log.Warn("schedules", "err", err)
			}
			sleepCtx(ctx, time.Second)
			continue
		}
		now := time.Now()
		var due []*domain.ScheduleRecord
		var soonest time.Time
		for k, r := range all {
			at := commands.TickDue(r)
			if at.IsZero() {
				delete(retry, k)
				continue
			}
			if nb, ok := retry[k]; ok && nb.After(at) {
				at = nb
			}
			switch {
			case !at.After(now):
				due = append(due, r)
			case soonest.IsZero() || at.Before(soonest):
				soonest = at
			}
		}
		if len(due) > 0 {
			for k, err := range sc.fireAll(ctx, due) {
				if err == nil {
					delete(retry, k)
					continue
				}
				retry[k] = time.Now().Add(scheduleRetry)
				if ctx.Err() == nil {
					sc.log.Warn("tick failed; tried again shortly", "schedule", k, "err", err)
				}
			}
			continue
		}
		wait := schedulerNap
		if !soonest.IsZero() {
			wait = min(time.Until(soonest), schedulerNap)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-changed:
		}
		t.Stop()
	}
}

// fireAll fires the due ticks of several schedules, Concurrency at once,
// and returns each one's error (by namespace/name).
func (sc *Scheduler) fireAll(ctx context.Context, due []*domain.ScheduleRecord) map[string]error {
	out := make(map[string]error, len(due))
	var mu sync.Mutex
	var wg sync.WaitGroup
	slots := make(chan struct{}, sc.cfg.Concurrency)
	for _, r := range due {
		wg.Add(1)
		slots <- struct{}{}
		go func(ns, name string) {
			defer func() { <-slots; wg.Done() }()
			err := sc.Fire(ctx, ns, name)
			mu.Lock()
			out[ns+"/"+name] = err
			mu.Unlock()
		}(r.Namespace, r.Name)
	}
	wg.Wait()
	return out
}

// submittedTick is a job this scheduler submitted for a tick it has not
// recorded yet.
type submittedTick struct {
	tick    time.Time
	job     string
	created bool // the submit made the job (no other leader did)
}

// Fire records what is due of one schedule now, each tick decided on the
// schedule as the log has it: the ticks to fire, skip or miss, up to
// maxTicksAtOnce of them.
func (sc *Scheduler) Fire(ctx context.Context, ns, name string) error {
	var pending *submittedTick // a job submitted for a tick not recorded (yet)
	defer func() {
		if pending != nil {
			sc.unrecorded(ns, name, pending)
		}
	}()
	for n := 0; n < maxTicksAtOnce; n++ {
		v, err := sc.cfg.Schedules.Current(ctx, ns, name)
		if err != nil {
			return err
		}
		step, err := commands.NextStep(v.Rec, time.Now(), sc.cfg.MisfireGrace)
		if err != nil {
			return err
		}
		if pending != nil && (step.Kind != commands.StepFire || !step.Tick.Equal(pending.tick)) {
			// Our job's tick was recorded by another leader, or the
			// schedule changed under it: see what became of it.
			if !recordedWith(v.Rec, pending) && pending.created {
				sc.orphan(ctx, ns, name, pending)
			}
			pending = nil
		}
		if step.Kind == commands.StepNone {
			return nil
		}
		ev, sub, err := sc.decide(ctx, v.Rec, step)
		if err != nil {
			return err
		}
		if sub != nil {
			if pending != nil && pending.created {
				sub.created = true // submitted again, after a lost race: still ours
			}
			pending = sub
		}
		_, lost, err := sc.cfg.Schedules.Tick(ctx, v, ev)
		if err != nil {
			return err
		}
		if lost {
			continue // decided again on what the other writer wrote
		}
		store.Crash("schedule:ticked")
		pending = nil
		sc.ticks.Add(1)
		t := ev.Schedule.Tick
		if commands.FiresJob(t.Outcome) {
			sc.fired.Add(1)
		}
		lvl := slog.LevelDebug
		if t.Outcome == domain.TickMissed || t.Outcome == domain.TickRefused {
			lvl = slog.LevelWarn
		}
		sc.log.Log(ctx, lvl, "tick", "schedule", ns+"/"+name, "tick", t.At, "outcome", t.Outcome, "job", t.Job,
			"missed", t.Count, "error", t.Error)
	}
	return nil
}

// recordedWith reports whether the record holds the tick as fired with
// the job that was submitted for it.
func recordedWith(rec *domain.ScheduleRecord, s *submittedTick) bool {
	if rec == nil {
		return false
	}
	for _, t := range rec.LastRuns {
		if t.At.Equal(s.tick) && t.Outcome != domain.TickMissed {
			return t.Job == s.job
		}
	}
	return false
}

// orphan cancels a job this scheduler submitted for a tick the log says
// fired no job (another leader recorded it otherwise, or the schedule was
// paused, changed or deleted at that moment): every job of a schedule is
// named by a tick.
func (sc *Scheduler) orphan(ctx context.Context, ns, name string, s *submittedTick) {
	_, err := sc.store.Cancel(ctx, s.job, fmt.Sprintf("schedule %s: its tick of %s was not recorded as firing this job",
		name, s.tick.UTC().Format(time.RFC3339Nano)))
	if err != nil && !errors.Is(err, commands.ErrTerminal) {
		sc.log.Warn("cancel the job of an unrecorded tick", "schedule", ns+"/"+name, "job", s.job, "err", err)
	}
}

// unrecorded logs a job whose tick this scheduler could not record (it
// stopped, or NATS went away): the next Fire, here or on the next leader,
// finds the job by its id and records the tick.
func (sc *Scheduler) unrecorded(ns, name string, s *submittedTick) {
	sc.log.Info("tick submitted, not recorded yet: the next try records it", "schedule", ns+"/"+name,
		"tick", s.tick, "job", s.job)
}

// decide makes what a step's tick implies (cancels, a submit) and
// returns its event, and the job it submitted, if any.
func (sc *Scheduler) decide(ctx context.Context, rec *domain.ScheduleRecord, step commands.TickStep) (*domain.Event, *submittedTick, error) {
	ns, name := rec.Namespace, rec.Name
	actor, now := sc.store.Actor(), time.Now().UTC()
	if step.Kind == commands.StepMiss {
		// The first of them may have fired, by a leader that died before
		// it recorded the tick.
		id := commands.TickJobID(ns, name, step.First)
		ok, err := sc.exists(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			ev, err := commands.Tick(rec, step, domain.TickMissed, "", "", "", actor, now)
			return ev, nil, err
		}
		fire, err := commands.FireNext(rec)
		if err != nil {
			return nil, nil, err
		}
		ev, err := commands.Tick(rec, fire, domain.TickFired, id, "", "", actor, now)
		return ev, nil, err
	}
	id := commands.TickJobID(ns, name, step.Tick)
	prev, running := rec.LastJob, false
	if prev != "" && rec.Spec.Overlap != domain.OverlapAllow {
		var err error
		if running, err = sc.running(ctx, prev); err != nil {
			return nil, nil, err
		}
	}
	outcome, cancel := commands.Overlap(rec.Spec.Overlap, running)
	if outcome == domain.TickSkippedOverlap {
		ok, err := sc.exists(ctx, id)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			ev, err := commands.Tick(rec, step, outcome, "", prev, "", actor, now)
			return ev, nil, err
		}
		outcome = domain.TickFired // a leader that died fired it
	}
	if cancel {
		_, err := sc.store.Cancel(ctx, prev, fmt.Sprintf("schedule %s: the tick of %s fires (overlap cancel)",
			name, step.Tick.UTC().Format(time.RFC3339Nano)))
		if err != nil && !errors.Is(err, commands.ErrTerminal) && !errors.Is(err, commands.ErrNotFound) {
			return nil, nil, err
		}
	} else {
		prev = ""
	}
	job, err := commands.DecodeScheduleJob(rec.Spec.Job)
	if err != nil {
		return nil, nil, err
	}
	job.Namespace, job.IdempotencyKey = ns, commands.TickKey(name, step.Tick)
	res, err := sc.store.Submit(ctx, job)
	if err != nil {
		if !refused(err) {
			return nil, nil, err
		}
		ev, err := commands.Tick(rec, step, domain.TickRefused, "", "", err.Error(), actor, now)
		return ev, nil, err
	}
	store.Crash("schedule:submitted")
	ev, err := commands.Tick(rec, step, outcome, res.Job.ID, prev, "", actor, now)
	return ev, &submittedTick{tick: step.Tick, job: res.Job.ID, created: res.Created}, err
}

// refused reports whether a submit's error is a refusal of the job (its
// type, its payload: a problem of the client's kind), not a failure to
// write it.
func refused(err error) bool {
	p := problems.Of(err)
	return p.Status >= 400 && p.Status < 500 && p.Status != 409 && p.Status != 408
}

// running reports whether a job has not ended (one purged, or gone, has).
func (sc *Scheduler) running(ctx context.Context, id string) (bool, error) {
	snap, err := sc.store.Read(ctx, id)
	if errors.Is(err, commands.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return !snap.Job.State.Terminal(), nil
}

// exists reports whether a job exists (or existed: purged).
func (sc *Scheduler) exists(ctx context.Context, id string) (bool, error) {
	_, err := sc.store.Read(ctx, id)
	switch {
	case err == nil, errors.Is(err, commands.ErrGone):
		return true, nil
	case errors.Is(err, commands.ErrNotFound):
		return false, nil
	}
	return false, err
}
