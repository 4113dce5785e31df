package engine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// schedSystem is one embedded server and a client store, with engines
// started when a test says.
type schedSystem struct {
	t   *testing.T
	srv *server.Server
	st  *engine.Store
	ctx context.Context
}

func newSchedSystem(t *testing.T) *schedSystem {
	t.Helper()
	srv := testkit.Server(t)
	return &schedSystem{t: t, srv: srv, st: testkit.Store(t, testkit.Conn(t, srv), "client"), ctx: testkit.Ctx(t)}
}

// engine starts an engine on a connection of its own, stopped at the end
// of the test (or by the returned func).
func (s *schedSystem) engine(name string, grace time.Duration) (*engine.Engine, func()) {
	s.t.Helper()
	e := engine.NewEngine(testkit.Store(s.t, testkit.Conn(s.t, s.srv), name), engine.EngineConfig{
		ProjectorLag: 100 * time.Millisecond, LeaderTTL: 2 * time.Second, MisfireGrace: grace, Log: testkit.Logger(s.t)})
	if err := e.Start(s.ctx); err != nil {
		s.t.Fatal(err)
	}
	stop := func() { e.Stop(context.Background()) }
	s.t.Cleanup(stop)
	return e, stop
}

func (s *schedSystem) create(body string) *domain.ScheduleRecord {
	s.t.Helper()
	req := decodeScheduleBody(s.t, body)
	rec, created, err := s.st.Schedules.Create(s.ctx, req)
	if err != nil || !created {
		s.t.Fatalf("create %s: %v (created %v)", body, err, created)
	}
	return rec
}

func decodeScheduleBody(t *testing.T, body string) *commands.ScheduleRequest {
	t.Helper()
	var req commands.ScheduleRequest
	if err := jsonUnmarshal([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	return &req
}

// scheduleEvents is a schedule's history from the log.
func (s *schedSystem) scheduleEvents(ns, name string) []*domain.Event {
	s.t.Helper()
	var out []*domain.Event
	_, err := streams.ReadSubject(s.ctx, s.st.NC, streams.EventsStream, streams.ScheduleSubject(ns, name), 1, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return err
		}
		ev.Seq = seq
		out = append(out, ev)
		return nil
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// ticks are the schedule's tick events from the log, oldest first.
func (s *schedSystem) ticks(ns, name string) []*domain.ScheduleTick {
	var out []*domain.ScheduleTick
	for _, ev := range s.scheduleEvents(ns, name) {
		if ev.Type == domain.EvScheduleTick {
			out = append(out, ev.Schedule.Tick)
		}
	}
	return out
}

// waitTicks waits until the schedule has recorded at least n ticks.
func (s *schedSystem) waitTicks(ns, name string, n int, timeout time.Duration) []*domain.ScheduleTick {
	s.t.Helper()
	var ticks []*domain.ScheduleTick
	testkit.WaitFor(s.t, timeout, func() error {
		ticks = s.ticks(ns, name)
		if len(ticks) < n {
			return fmt.Errorf("%d ticks, want %d", len(ticks), n)
		}
		return nil
	})
	return ticks
}

// wantContiguous fails unless the ticks follow each other by step, each
// missed run counting its ticks, and each fired tick names the job its
// id derives from, which exists with the tick's key.
func (s *schedSystem) wantContiguous(ns, name string, ticks []*domain.ScheduleTick, step time.Duration) {
	s.t.Helper()
	var prev time.Time
	for i, tk := range ticks {
		first := tk.At
		if tk.Outcome == domain.TickMissed {
			first = tk.First
			if n := int64(tk.At.Sub(tk.First)/step) + 1; n != tk.Count {
				s.t.Fatalf("tick %d: missed %s..%s counts %d, want %d", i, tk.First, tk.At, tk.Count, n)
			}
		}
		if i > 0 && !first.Equal(prev.Add(step)) {
			s.t.Fatalf("tick %d at %s follows %s: not contiguous (%+v)", i, first, prev, ticks)
		}
		prev = tk.At
		if !commands.FiresJob(tk.Outcome) {
			if tk.Job != "" {
				s.t.Fatalf("tick %d %s names job %s", i, tk.Outcome, tk.Job)
			}
			continue
		}
		if tk.Job != commands.TickJobID(ns, name, tk.At) {
			s.t.Fatalf("tick %d names job %s, not its own", i, tk.Job)
		}
		snap, err := s.st.Read(s.ctx, tk.Job)
		if err != nil {
			s.t.Fatalf("tick %d's job %s: %v", i, tk.Job, err)
		}
		if snap.Job.Spec.Key != commands.TickKey(name, tk.At) || snap.Job.Spec.Namespace != ns {
			s.t.Fatalf("tick %d's job has key %q in %s", i, snap.Job.Spec.Key, snap.Job.Spec.Namespace)
		}
	}
}

// jobsOf counts the jobs whose idempotency key is one of the schedule's
// ticks'.
func (s *schedSystem) jobsOf(name string) int {
	s.t.Helper()
	n := 0
	err := s.st.Scan(s.ctx, func(j *domain.Job) {
		if strings.HasPrefix(j.Spec.Key, "schedule:"+name+":") {
			n++
		}
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return n
}

func (s *schedSystem) verify() {
	s.t.Helper()
	rep, err := engine.Verify(s.ctx, s.st.JS, 2*time.Second)
	if err != nil {
		s.t.Fatal(err)
	}
	if len(rep.Diffs) > 0 {
		s.t.Fatalf("the log and the records differ: %+v", rep.Diffs)
	}
}

func scheduleTypes(evs []*domain.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

// A schedule's changes are events on its subject, folded into its
// record; a creation of the same spec again writes nothing, one of
// another spec is a conflict; a job its submit would refuse (unknown
// type, a payload against the type's schema) is refused at creation and
// nothing is written; a deleted schedule can be created again; replay
// --verify rebuilds the schedules.
func TestScheduleChanges(t *testing.T) {
	t.Parallel()
	s := newSchedSystem(t)
	ctx := s.ctx
	sch := s.st.Schedules
	body := `{"name":"nightly","namespace":"shop","cron":"0 3 * * *","timezone":"Europe/Berlin","job":{"type":"report.build","payload":{"day":1}}}`
	rec := s.create(body)
	if rec.Namespace != "shop" || rec.Spec.Cron != "0 3 * * *" || rec.Paused || rec.Next.IsZero() || rec.Spec.Misfire != "once" {
		t.Fatalf("%+v", rec)
	}
	again, created, err := sch.Create(ctx, decodeScheduleBody(t, body))
	if err != nil || created || again.Seq != rec.Seq {
		t.Fatalf("created again: %+v, %v, %v", again, created, err)
	}
	_, _, err = sch.Create(ctx, decodeScheduleBody(t, strings.Replace(body, "0 3", "0 4", 1)))
	if !errors.Is(err, commands.ErrConflict) {
		t.Fatalf("another spec: %v", err)
	}

	// Refused by the registry: nothing is written.
	if _, _, err := s.st.Types.Register(ctx, commands.TypeDef{Name: typeName(t, "shop:billing:invoice"),
		Schema: []byte(`{"type":"object","required":["amount"]}`)}, "t"); err != nil {
		t.Fatal(err)
	}
	for b, slug := range map[string]error{
		`{"name":"bad","namespace":"shop","every":"1m","job":{"type":"billing:invoice","payload":{}}}`:   commands.ErrSchemaViolation,
		`{"name":"bad","namespace":"shop","every":"1m","job":{"type":"billing:refund","payload":{}}}`:    commands.ErrUnknownType,
		`{"name":"bad","namespace":"shop","every":"0.5s","job":{"type":"billing:invoice","payload":{}}}`: commands.ErrInvalidInput,
	} {
		if _, _, err := sch.Create(ctx, decodeScheduleBody(t, b)); !errors.Is(err, slug) {
			t.Errorf("%s: %v, want %v", b, err, slug)
		}
	}
	if evs := s.scheduleEvents("shop", "bad"); len(evs) != 0 {
		t.Fatalf("a refused schedule wrote %v", scheduleTypes(evs))
	}
	if _, err := sch.Get(ctx, "shop", "bad"); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("get a refused one: %v", err)
	}
	s.create(`{"name":"invoices","namespace":"shop","every":"1h","job":{"type":"billing:invoice","payload":{"amount":1}}}`)

	list, err := sch.List(ctx, "shop")
	if err != nil || len(list) != 2 || list[0].Name != "invoices" || list[1].Name != "nightly" {
		t.Fatalf("list %v, %v", list, err)
	}
	if list, _ := sch.List(ctx, "other"); len(list) != 0 {
		t.Fatalf("another namespace lists %d", len(list))
	}

	paused, err := sch.Pause(ctx, "shop", "nightly")
	if err != nil || !paused.Paused || !paused.Next.IsZero() {
		t.Fatalf("pause: %+v %v", paused, err)
	}
	if again, err := sch.Pause(ctx, "shop", "nightly"); err != nil || again.Seq != paused.Seq {
		t.Fatalf("pause twice: %+v %v", again, err)
	}
	resumed, err := sch.Resume(ctx, "shop", "nightly")
	if err != nil || resumed.Paused || resumed.Next.IsZero() {
		t.Fatalf("resume: %+v %v", resumed, err)
	}
	every := commands.Duration(90 * time.Second)
	changed, err := sch.Update(ctx, "shop", "nightly", &commands.SchedulePatch{Every: &every})
	if err != nil || changed.Spec.Cron != "" || changed.Spec.Timezone != "" || changed.Spec.Every != 90*time.Second ||
		changed.Next.UnixNano()%int64(90*time.Second) != 0 {
		t.Fatalf("update: %+v %v", changed, err)
	}
	if _, err := sch.Update(ctx, "shop", "nightly", &commands.SchedulePatch{Job: &commands.SubmitRequest{Type: "billing:invoice"}}); !errors.Is(err, commands.ErrSchemaViolation) {
		t.Fatalf("update to a job the schema refuses: %v", err)
	}
	if _, err := sch.Update(ctx, "shop", "none", &commands.SchedulePatch{Every: &every}); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("update of none: %v", err)
	}
	if _, err := sch.Delete(ctx, "shop", "nightly"); err != nil {
		t.Fatal(err)
	}
	if _, err := sch.Get(ctx, "shop", "nightly"); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("get a deleted one: %v", err)
	}
	if _, err := sch.Delete(ctx, "shop", "nightly"); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	s.create(body)
	want := []string{domain.EvScheduleCreated, domain.EvSchedulePaused, domain.EvScheduleResumed, domain.EvScheduleChanged,
		domain.EvScheduleDeleted, domain.EvScheduleCreated}
	if got := scheduleTypes(s.scheduleEvents("shop", "nightly")); !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	// Another store (another process) reads what this one wrote.
	other := testkit.Store(t, testkit.Conn(t, s.srv), "other")
	got, err := other.Schedules.Get(ctx, "shop", "nightly")
	if err != nil || got.Spec.Cron != "0 3 * * *" || got.Deleted {
		t.Fatalf("%+v %v", got, err)
	}
	s.verify()
}

// The leader fires each tick of an every-second schedule once: each tick
// event names the job its id derives from, the ticks follow each other,
// and there is one job per fired tick.
func TestSchedulerFiresEachTickOnce(t *testing.T) {
	t.Parallel()
	s := newSchedSystem(t)
	s.engine("engine", 0)
	s.create(`{"name":"beat","every":"1s","overlap":"allow","job":{"type":"sched.beat","payload":{"n":1},"queue":"beats"}}`)
	ticks := s.waitTicks(domain.DefaultNS, "beat", 4, 20*time.Second)
	if _, err := s.st.Schedules.Pause(s.ctx, domain.DefaultNS, "beat"); err != nil {
		t.Fatal(err)
	}
	ticks = s.ticks(domain.DefaultNS, "beat")
	for i, tk := range ticks {
		if tk.Outcome != domain.TickFired {
			t.Fatalf("tick %d: %+v", i, tk)
		}
	}
	s.wantContiguous(domain.DefaultNS, "beat", ticks, time.Second)
	if n := s.jobsOf("beat"); n != len(ticks) {
		t.Fatalf("%d jobs for %d ticks", n, len(ticks))
	}
	j, err := s.st.Read(s.ctx, ticks[0].Job)
	if err != nil || j.Job.Spec.Type != "sched.beat" || j.Job.Spec.Queue != "beats" || string(j.Job.Spec.Payload) != `{"n":1}` {
		t.Fatalf("%+v %v", j.Job, err)
	}
	rec, err := s.st.Schedules.Get(s.ctx, domain.DefaultNS, "beat")
	if err != nil || rec.Fired != int64(len(ticks)) || rec.LastJob != ticks[len(ticks)-1].Job {
		t.Fatalf("%+v %v", rec, err)
	}
	s.verify()
}

// Two schedulers (two leaders at once, as a frozen leader coming back
// would make) fire the same schedule: each tick is recorded once and has
// one job.
func TestTwoSchedulersRecordEachTickOnce(t *testing.T) {
	t.Parallel()
	s := newSchedSystem(t)
	s.create(`{"name":"race","every":"1s","overlap":"allow","job":{"type":"sched.race"}}`)
	var scs []*maintenance.Scheduler
	for i := range 3 {
		st := testkit.Store(t, testkit.Conn(t, s.srv), fmt.Sprintf("leader-%d", i))
		sc := maintenance.NewScheduler(engine.Internal(st), maintenance.SchedulerConfig{Schedules: st.Schedules, Log: testkit.Logger(t)})
		if err := sc.Start(s.ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sc.Stop(context.Background()) })
		scs = append(scs, sc)
	}
	s.waitTicks(domain.DefaultNS, "race", 5, 20*time.Second)
	if _, err := s.st.Schedules.Pause(s.ctx, domain.DefaultNS, "race"); err != nil {
		t.Fatal(err)
	}
	for _, sc := range scs {
		sc.Stop(s.ctx)
	}
	ticks := s.ticks(domain.DefaultNS, "race")
	s.wantContiguous(domain.DefaultNS, "race", ticks, time.Second)
	recorded := int64(0)
	for _, sc := range scs {
		recorded += sc.Ticks()
	}
	if recorded != int64(len(ticks)) || s.jobsOf("race") != len(ticks) {
		t.Fatalf("%d ticks in the log, %d recorded by the schedulers, %d jobs", len(ticks), recorded, s.jobsOf("race"))
	}
	s.verify()
}

// Overlap: skip records a tick as skipped while the previous tick's job
// has not ended; cancel cancels it and fires.
func TestSchedulerOverlap(t *testing.T) {
	t.Parallel()
	s := newSchedSystem(t)
	s.engine("engine", 0)
	// No worker serves the type: every job stays queued.
	s.create(`{"name":"skipper","every":"1s","overlap":"skip","job":{"type":"sched.unserved"}}`)
	s.create(`{"name":"canceller","every":"1s","overlap":"cancel","job":{"type":"sched.unserved"}}`)
	skip := s.waitTicks(domain.DefaultNS, "skipper", 3, 20*time.Second)
	cancel := s.waitTicks(domain.DefaultNS, "canceller", 3, 20*time.Second)
	for _, name := range []string{"skipper", "canceller"} {
		if _, err := s.st.Schedules.Pause(s.ctx, domain.DefaultNS, name); err != nil {
			t.Fatal(err)
		}
	}
	skip, cancel = s.ticks(domain.DefaultNS, "skipper"), s.ticks(domain.DefaultNS, "canceller")
	first := skip[0]
	if first.Outcome != domain.TickFired {
		t.Fatalf("first tick %+v", first)
	}
	for i, tk := range skip[1:] {
		if tk.Outcome != domain.TickSkippedOverlap || tk.Previous != first.Job {
			t.Fatalf("tick %d: %+v", i+1, tk)
		}
	}
	s.wantContiguous(domain.DefaultNS, "skipper", skip, time.Second)
	if n := s.jobsOf("skipper"); n != 1 {
		t.Fatalf("skip: %d jobs", n)
	}
	if cancel[0].Outcome != domain.TickFired {
		t.Fatalf("first tick %+v", cancel[0])
	}
	for i, tk := range cancel[1:] {
		if tk.Outcome != domain.TickCancelledPrevious || tk.Previous != cancel[i].Job {
			t.Fatalf("tick %d: %+v", i+1, tk)
		}
		prev, err := s.st.Read(s.ctx, tk.Previous)
		if err != nil || prev.Job.State != domain.StateCancelled {
			t.Fatalf("previous job %s: %+v %v", tk.Previous, prev.Job, err)
		}
	}
	s.wantContiguous(domain.DefaultNS, "canceller", cancel, time.Second)
	last, err := s.st.Read(s.ctx, cancel[len(cancel)-1].Job)
	if err != nil || last.Job.State != domain.StateQueued {
		t.Fatalf("last job %+v %v", last.Job, err)
	}
	s.verify()
}

// Ticks that passed while no engine ran, later than the misfire grace:
// skip records them missed and fires none; once fires one, for the newest;
// all fires each. Then the schedule goes on from now.
func TestSchedulerMisfire(t *testing.T) {
	for _, policy := range []string{"skip", "once", "all"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			s := newSchedSystem(t)
			rec := s.create(`{"name":"m","every":"1s","overlap":"allow","misfire":"` + policy + `","job":{"type":"sched.m"}}`)
			// Five ticks pass with no engine, the oldest beyond the grace.
			testkit.WaitFor(t, 20*time.Second, func() error {
				if time.Since(rec.Next) < 5*time.Second {
					return errors.New("waiting for ticks to pass")
				}
				return nil
			})
			downUntil := time.Now()
			s.engine("engine", time.Second)
			ticks := s.waitTicks(domain.DefaultNS, "m", 3, 20*time.Second)
			testkit.WaitFor(t, 20*time.Second, func() error {
				ticks = s.ticks(domain.DefaultNS, "m")
				if len(ticks) == 0 || ticks[len(ticks)-1].At.Before(downUntil.Add(2*time.Second)) {
					return errors.New("not on time again yet")
				}
				return nil
			})
			if _, err := s.st.Schedules.Pause(s.ctx, domain.DefaultNS, "m"); err != nil {
				t.Fatal(err)
			}
			ticks = s.ticks(domain.DefaultNS, "m")
			s.wantContiguous(domain.DefaultNS, "m", ticks, time.Second)
			if !ticks[0].At.Equal(rec.Next) && !(ticks[0].Outcome == domain.TickMissed && ticks[0].First.Equal(rec.Next)) {
				t.Fatalf("first tick %+v, the schedule's next was %s", ticks[0], rec.Next)
			}
			// The backlog: the ticks that passed while no engine ran.
			var missed []*domain.ScheduleTick
			fired := 0
			for _, tk := range ticks {
				switch {
				case tk.Outcome == domain.TickMissed:
					missed = append(missed, tk)
				case tk.Outcome == domain.TickFired && tk.At.Before(downUntil.Add(-time.Second)):
					fired++
				}
			}
			switch policy {
			case "skip": // one run of missed ticks, first; the ticks after it fire on time
				if len(missed) != 1 || ticks[0] != missed[0] || missed[0].Count < 4 {
					t.Fatalf("skip: %s", tickList(ticks))
				}
			case "once": // one run of missed ticks, then the newest of the backlog fires
				// The backlog ends where the scheduler first looks, which a
				// loaded machine puts a second or two past downUntil (when
				// the engine began to start).
				if len(missed) != 1 || ticks[0] != missed[0] || missed[0].Count < 3 || ticks[1].Outcome != domain.TickFired ||
					!ticks[1].At.Before(downUntil.Add(3*time.Second)) {
					t.Fatalf("once: %s", tickList(ticks))
				}
			case "all": // none missed: each fires
				if len(missed) != 0 || fired < 4 {
					t.Fatalf("all: %d fired late, %s", fired, tickList(ticks))
				}
			}
			// On time again: every tick after the backlog fired.
			for _, tk := range ticks {
				if tk.At.After(downUntil.Add(time.Second)) && tk.Outcome != domain.TickFired {
					t.Fatalf("a tick after the engine started: %+v", tk)
				}
			}
			s.verify()
		})
	}
}

// A leader that died after it submitted a tick's job, before it recorded
// the tick: the next leader finds the job by its id and records the tick
// as fired with it, even where the tick would not fire now (overlap skip,
// a misfire).
func TestSchedulerRecordsATickItsLeaderFired(t *testing.T) {
	t.Parallel()
	s := newSchedSystem(t)
	for _, tc := range []struct{ name, body string }{
		{"overlapping", `{"name":"overlapping","every":"1h","overlap":"skip","job":{"type":"sched.x"}}`},
		{"late", `{"name":"late","every":"1s","misfire":"skip","job":{"type":"sched.x"}}`},
	} {
		rec := s.create(tc.body)
		tick := rec.Next
		if tc.name == "overlapping" {
			// The previous tick's job still runs: a new record's last job.
			prev, err := s.st.Submit(s.ctx, &commands.SubmitRequest{Type: "sched.x"})
			if err != nil {
				t.Fatal(err)
			}
			rec.LastJob = prev.Job.ID
			// Its tick is now.
			rec.Next = time.Now().Add(-200 * time.Millisecond).UTC()
			tick = rec.Next
			if err := forceRecord(s, rec); err != nil {
				t.Fatal(err)
			}
		} else {
			testkit.WaitFor(t, 10*time.Second, func() error {
				if time.Since(tick) < 3*time.Second {
					return errors.New("waiting for the tick to be late")
				}
				return nil
			})
		}
		// What the dead leader did: the tick's job.
		job, err := commands.DecodeScheduleJob(rec.Spec.Job)
		if err != nil {
			t.Fatal(err)
		}
		job.Namespace, job.IdempotencyKey = domain.DefaultNS, commands.TickKey(tc.name, tick)
		dead, err := s.st.Submit(s.ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		sc := maintenance.NewScheduler(engine.Internal(s.st), maintenance.SchedulerConfig{Schedules: s.st.Schedules, MisfireGrace: time.Second, Log: testkit.Logger(t)})
		if err := sc.Fire(s.ctx, domain.DefaultNS, tc.name); err != nil {
			t.Fatal(err)
		}
		var got *domain.ScheduleTick
		for _, tk := range s.ticks(domain.DefaultNS, tc.name) {
			if tk.At.Equal(tick) || (tk.Outcome == domain.TickMissed && !tk.First.After(tick)) {
				got = tk
			}
		}
		if got == nil || got.Outcome != domain.TickFired || got.Job != dead.Job.ID {
			t.Fatalf("%s: tick %+v, want the dead leader's job %s fired", tc.name, got, dead.Job.ID)
		}
		if n := s.jobsOf(tc.name); n != 1 {
			t.Fatalf("%s: %d jobs", tc.name, n)
		}
	}
}

// forceRecord writes a schedule's record as a test wants it (its next
// tick, its last job), as a fold of events would have left it: through a
// tick event on its subject.
func forceRecord(s *schedSystem, rec *domain.ScheduleRecord) error {
	v, err := s.st.Schedules.Current(s.ctx, rec.Namespace, rec.Name)
	if err != nil {
		return err
	}
	step := commands.TickStep{Kind: commands.StepFire, Tick: v.Rec.Next, Next: rec.Next}
	ev, err := commands.Tick(v.Rec, step, domain.TickFired, rec.LastJob, "", "", "test", time.Now())
	if err != nil {
		return err
	}
	_, lost, err := s.st.Schedules.Tick(s.ctx, v, ev)
	if lost {
		return errors.New("lost")
	}
	return err
}

// A tick whose job the submit refuses now (the namespace became strict
// about types since) is recorded as refused, with the reason, and the
// schedule goes on.
func TestSchedulerRefusedTick(t *testing.T) {
	t.Parallel()
	s := newSchedSystem(t)
	s.create(`{"name":"loose","namespace":"strict","every":"1s","job":{"type":"free.form"}}`)
	if _, err := s.st.Types.SetNamespace(s.ctx, "strict", domain.NamespaceSettings{StrictTypes: true}, "t"); err != nil {
		t.Fatal(err)
	}
	s.engine("engine", 0)
	ticks := s.waitTicks("strict", "loose", 2, 20*time.Second)
	for _, tk := range ticks[:2] {
		if tk.Outcome != domain.TickRefused || tk.Job != "" || !strings.Contains(tk.Error, "free.form") {
			t.Fatalf("%+v", tk)
		}
	}
	if n := s.jobsOf("loose"); n != 0 {
		t.Fatalf("%d jobs", n)
	}
}

func tickList(ticks []*domain.ScheduleTick) string {
	var b strings.Builder
	for _, tk := range ticks {
		fmt.Fprintf(&b, "\n  %s %s", tk.At.Format("15:04:05.000"), tk.Outcome)
		if tk.Count > 0 {
			fmt.Fprintf(&b, " %d from %s", tk.Count, tk.First.Format("15:04:05.000"))
		}
	}
	return b.String()
}
