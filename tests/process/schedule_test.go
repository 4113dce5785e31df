package process

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// An every-second schedule fired by engines that die at each instant of a
// tick, NATS living on: the leader SIGKILLed right after it submitted a
// tick's job (JETFLOW_CRASH_AT=schedule:submitted), the next one between
// that tick's append and its record (tick:appended), the next one right
// after it recorded the following tick (schedule:ticked), then three
// engines of which the leader is SIGKILLed just after a tick. Each tick is recorded
// once, as fired, naming the job its id derives from; the ticks follow
// each other second by second from the first to the last, gaps of the
// failovers included; there is exactly one job per tick (besides, when
// the closing pause lands between a tick's submit and its record, that
// tick's job, cancelled); replay --verify agrees.
func TestScheduleLeaderKilledAtTicks(t *testing.T) {
	start := time.Now()
	s := startOnNATS(t)
	s.client = testkit.Connect(t, s.url)
	ctx := testkit.Ctx(t)
	st := testkit.StoreOf(t, s.client)
	const name = "beat"
	req := jetflow.ScheduleRequest{Name: name, Every: time.Second, Overlap: jetflow.OverlapAllow, Misfire: jetflow.MisfireAll,
		Job: jetflow.SubmitRequest{Type: "proc.beat", Queue: "beats", Payload: []byte(`{"n":1}`)}}
	if _, created, err := s.client.CreateSchedule(ctx, req); err != nil || !created {
		t.Fatalf("create: %v (created %v)", err, created)
	}
	ticks := func() []*domain.ScheduleTick {
		t.Helper()
		var out []*domain.ScheduleTick
		_, err := streams.ReadSubject(ctx, st.NC, streams.EventsStream, streams.ScheduleSubject(domain.DefaultNS, name), 1,
			func(_ uint64, data []byte) error {
				ev, err := streams.DecodeEvent(data)
				if err == nil && ev.Type == domain.EvScheduleTick {
					out = append(out, ev.Schedule.Tick)
				}
				return err
			})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	jobs := func() map[string]*domain.Job {
		t.Helper()
		out := map[string]*domain.Job{}
		if err := st.Scan(ctx, func(j *domain.Job) {
			if strings.HasPrefix(j.Spec.Key, "schedule:"+name+":") {
				out[j.ID] = j
			}
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	// caughtUp waits until the schedule has recorded at least n ticks, the
	// newest of them a second old at most.
	caughtUp := func(n int, timeout time.Duration) []*domain.ScheduleTick {
		t.Helper()
		var got []*domain.ScheduleTick
		testkit.WaitFor(t, timeout, func() error {
			got = ticks()
			if len(got) < n {
				return testkit.Errorf("%d ticks, want %d", len(got), n)
			}
			if late := time.Since(got[len(got)-1].At); late > 1500*time.Millisecond {
				return testkit.Errorf("the newest tick is %s old", late)
			}
			return nil
		})
		return got
	}

	// 1. The leader dies between the submit of a tick's job and the tick.
	a := s.startEngineEnv("serve A (crash at schedule:submitted)", []string{"JETFLOW_CRASH_AT=schedule:submitted"})
	wantKilled(t, a)
	js := jobs()
	if len(js) != 1 || len(ticks()) != 0 {
		t.Fatalf("after A: %d jobs, %d ticks; want 1 and 0", len(js), len(ticks()))
	}
	var orphan *domain.Job
	for _, j := range js {
		orphan = j
	}

	// 2. The next leader records that tick with that job, and dies
	// between the tick's append and its record.
	b := s.startEngineEnv("serve B (crash at tick:appended)", []string{"JETFLOW_CRASH_AT=tick:appended"})
	wantKilled(t, b)
	tk := ticks()
	if len(tk) != 1 || tk[0].Outcome != domain.TickFired || tk[0].Job != orphan.ID || orphan.Spec.Key != commands.TickKey(name, tk[0].At) {
		t.Fatalf("after B: ticks %+v; want one, fired with job %s (%s)", tk, orphan.ID, orphan.Spec.Key)
	}
	if n := len(jobs()); n != 1 {
		t.Fatalf("after B: %d jobs, want 1", n)
	}

	// 3. The next leader decides on the log, not on the record left
	// behind: it fires the next tick, records it, and dies right after.
	c := s.startEngineEnv("serve C (crash at schedule:ticked)", []string{"JETFLOW_CRASH_AT=schedule:ticked"})
	wantKilled(t, c)
	tk = ticks()
	if len(tk) != 2 || tk[1].Outcome != domain.TickFired || !tk[1].At.Equal(tk[0].At.Add(time.Second)) ||
		tk[1].Job != commands.TickJobID(domain.DefaultNS, name, tk[1].At) {
		t.Fatalf("after C: ticks %+v; want two, the second the next second's, fired", tk)
	}
	if n := len(jobs()); n != 2 {
		t.Fatalf("after C: %d jobs, want 2", n)
	}

	// 4. Three engines; the leader is SIGKILLed just after a tick.
	engines := []*testkit.Proc{s.startEngine("serve D"), s.startEngine("serve E"), s.startEngine("serve F")}
	leader := s.leaderOf(engines...)
	before := caughtUp(len(tk)+3, 40*time.Second)
	testkit.WaitFor(t, 5*time.Second, func() error {
		if n := len(ticks()); n == len(before) {
			return testkit.Errorf("no new tick")
		}
		return nil
	})
	leader.Kill(t)
	killed := len(ticks())
	var rest []*testkit.Proc
	for _, p := range engines {
		if p != leader {
			rest = append(rest, p)
		}
	}
	next := s.leaderOf(rest...)
	caughtUp(killed+3, 40*time.Second)
	if _, err := s.client.PauseSchedule(ctx, "", name); err != nil {
		t.Fatal(err)
	}
	// A pause that lands between a tick's submit and its record wins:
	// the tick is not recorded and the leader cancels its job. Wait for
	// that before stopping the engines (at most one such job: the tick
	// after the last recorded one).
	var unrecorded *domain.Job
	testkit.WaitFor(t, 15*time.Second, func() error {
		tk, js := ticks(), jobs()
		named := map[string]bool{}
		for _, x := range tk {
			named[x.Job] = true
		}
		unrecorded = nil
		for id, j := range js {
			if named[id] {
				continue
			}
			if unrecorded != nil {
				t.Fatalf("two jobs named by no tick: %s and %s", unrecorded.ID, id)
			}
			if last := tk[len(tk)-1].At.Add(time.Second); id != commands.TickJobID(domain.DefaultNS, name, last) {
				t.Fatalf("job %s is named by no tick and is not the job of the tick after the last (%s)", id, last)
			}
			if unrecorded = j; j.State != domain.StateCancelled {
				return testkit.Errorf("the job of the unrecorded tick is %s, not cancelled yet", j.State)
			}
		}
		return nil
	})
	for _, p := range rest {
		p.Signal(t, syscall.SIGTERM)
		if code, sig := p.WaitExit(t, 30*time.Second); code != 0 || sig != 0 {
			t.Fatalf("%s exited with code %d, signal %v", p.Name, code, sig)
		}
	}

	// Each tick once, contiguous, fired, with its own job; one job a tick.
	tk = ticks()
	js = jobs()
	if unrecorded != nil {
		t.Logf("the pause landed between the submit of %s and its tick: the job was cancelled", unrecorded.ID)
		delete(js, unrecorded.ID)
	}
	for i, x := range tk {
		if x.Outcome != domain.TickFired {
			t.Fatalf("tick %d: %+v", i, x)
		}
		if i > 0 && !x.At.Equal(tk[i-1].At.Add(time.Second)) {
			t.Fatalf("tick %d at %s follows %s: not contiguous", i, x.At, tk[i-1].At)
		}
		j := js[x.Job]
		if x.Job != commands.TickJobID(domain.DefaultNS, name, x.At) || j == nil || j.Spec.Key != commands.TickKey(name, x.At) ||
			j.Spec.Type != "proc.beat" || j.Spec.Queue != "beats" {
			t.Fatalf("tick %d (%s) names job %s: %+v", i, x.At, x.Job, j)
		}
	}
	if len(js) != len(tk) {
		t.Fatalf("%d jobs for %d ticks", len(js), len(tk))
	}
	if tk[0].Job != orphan.ID {
		t.Fatalf("the first tick names %s, not the job A submitted (%s)", tk[0].Job, orphan.ID)
	}
	s.verify()
	t.Logf("%d ticks, one job each, over %s; leaders: A, B, C, %s, %s", len(tk), time.Since(start).Round(time.Second), leader.Name, next.Name)
}

// One engine fires three every-second schedules, one per misfire policy,
// then is stopped for a few seconds (SIGTERM: it gives up the lead at
// once) and another starts (serve --misfire-grace 1s: a tick found more
// than a second late is a misfire). The ticks of the downtime: skip fires
// none of them (one missed run, recorded when the new leader found them),
// once fires one, for the newest, right after the missed run of the
// others; all fires each. Every schedule's ticks stay contiguous, each
// fired one with its own job, one job a tick.
func TestScheduleMisfirePolicies(t *testing.T) {
	s := startOnNATS(t)
	s.client = testkit.Connect(t, s.url)
	ctx := testkit.Ctx(t)
	st := testkit.StoreOf(t, s.client)
	policies := []string{jetflow.MisfireSkip, jetflow.MisfireOnce, jetflow.MisfireAll}
	for _, p := range policies {
		req := jetflow.ScheduleRequest{Name: "m-" + p, Every: time.Second, Overlap: jetflow.OverlapAllow, Misfire: p,
			Job: jetflow.SubmitRequest{Type: "proc.misfire"}}
		if _, _, err := s.client.CreateSchedule(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	type tickEv struct {
		*domain.ScheduleTick
		at time.Time // when it was recorded
	}
	ticks := func(name string) []tickEv {
		t.Helper()
		var out []tickEv
		_, err := streams.ReadSubject(ctx, st.NC, streams.EventsStream, streams.ScheduleSubject(domain.DefaultNS, name), 1,
			func(_ uint64, data []byte) error {
				ev, err := streams.DecodeEvent(data)
				if err == nil && ev.Type == domain.EvScheduleTick {
					out = append(out, tickEv{ev.Schedule.Tick, ev.Time})
				}
				return err
			})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	serve := func(name string) *testkit.Proc {
		p := testkit.StartProc(t, name, nil, binary, "serve", "--nats", s.url, "--http", "off", "--projector-lag", "300ms", "--misfire-grace", "1s")
		p.WaitOutput(t, 30*time.Second, "jetflow is running")
		return p
	}
	waitFired := func(after time.Time) {
		t.Helper()
		testkit.WaitFor(t, 30*time.Second, func() error {
			for _, p := range policies {
				tk := ticks("m-" + p)
				if n := len(tk); n < 2 || !tk[n-1].At.After(after) || tk[n-1].Outcome != domain.TickFired {
					return testkit.Errorf("m-%s: %d ticks, none fired after %s yet", p, n, after)
				}
			}
			return nil
		})
	}

	first := serve("serve 1")
	waitFired(time.Now().Add(time.Second))
	first.Signal(t, syscall.SIGTERM)
	if code, sig := first.WaitExit(t, 30*time.Second); code != 0 || sig != 0 {
		t.Fatalf("serve 1 exited with code %d, signal %v", code, sig)
	}
	down := time.Now()
	// The downtime is the test's input: no engine runs over these ticks.
	time.Sleep(5 * time.Second)
	up := time.Now()
	second := serve("serve 2")
	waitFired(time.Now().Add(2 * time.Second))
	for _, p := range policies {
		if _, err := s.client.PauseSchedule(ctx, "", "m-"+p); err != nil {
			t.Fatal(err)
		}
	}
	second.Signal(t, syscall.SIGTERM)
	if code, sig := second.WaitExit(t, 30*time.Second); code != 0 || sig != 0 {
		t.Fatalf("serve 2 exited with code %d, signal %v", code, sig)
	}

	jobs := map[string]*domain.Job{}
	if err := st.Scan(ctx, func(j *domain.Job) {
		if j.Spec.Type == "proc.misfire" {
			jobs[j.ID] = j
		}
	}); err != nil {
		t.Fatal(err)
	}
	fired := 0
	for _, p := range policies {
		name := "m-" + p
		tk := ticks(name)
		// Contiguous, each fired tick with its own job.
		var prev time.Time
		var missed *tickEv // the missed run of the downtime
		for i, x := range tk {
			from := x.At
			if x.Outcome == domain.TickMissed {
				from = x.First
				if n := int64(x.At.Sub(x.First)/time.Second) + 1; n != x.Count {
					t.Fatalf("%s: tick %d: missed %s..%s counts %d, want %d", name, i, x.First, x.At, x.Count, n)
				}
				if x.First.Before(up) && x.At.After(down) && x.Count >= 3 {
					missed = &tk[i]
				}
			}
			if i > 0 && !from.Equal(prev.Add(time.Second)) {
				t.Fatalf("%s: tick %d at %s follows %s: not contiguous", name, i, from, prev)
			}
			prev = x.At
			if commands.FiresJob(x.Outcome) {
				fired++
				if j := jobs[x.Job]; j == nil || x.Job != commands.TickJobID(domain.DefaultNS, name, x.At) {
					t.Fatalf("%s: tick %d (%s) names job %s, not its own or none", name, i, x.At, x.Job)
				}
			} else if x.Job != "" {
				t.Fatalf("%s: tick %d %s names job %s", name, i, x.Outcome, x.Job)
			}
		}
		// What became of the ticks no engine fired.
		firedIn := func(from, to time.Time) int {
			n := 0
			for _, x := range tk {
				if x.Outcome == domain.TickFired && x.At.After(from) && !x.At.After(to) {
					n++
				}
			}
			return n
		}
		switch p {
		case jetflow.MisfireSkip:
			if missed == nil {
				t.Fatalf("%s: no missed run over the downtime", name)
			}
			if n := firedIn(down, missed.at); n != 0 {
				t.Fatalf("%s: %d ticks of the downtime fired; want none", name, n)
			}
		case jetflow.MisfireOnce:
			if missed == nil {
				t.Fatalf("%s: no missed run over the downtime", name)
			}
			// The tick after the missed run fires, the newest then due;
			// unless it became later than the grace while the scheduler
			// recorded the run (a second boundary passed between its two
			// looks): then it is missed too, in a run of its own, and the
			// next one fires. Either way nothing of the downtime fired.
			next := 0
			for i := range tk {
				if &tk[i] == missed {
					next = i + 1
				}
			}
			for next < len(tk) && tk[next].Outcome == domain.TickMissed && tk[next].Count <= 2 {
				next++
			}
			if firedIn(down, missed.At) != 0 || next >= len(tk) || tk[next].Outcome != domain.TickFired {
				t.Fatalf("%s: missed run %+v; want it followed by one fired tick, the newest", name, *missed.ScheduleTick)
			}
		case jetflow.MisfireAll:
			if missed != nil || firedIn(down, up) < 4 {
				t.Fatalf("%s: a missed run (%v), %d ticks of the downtime fired; want none missed, each fired", name, missed != nil, firedIn(down, up))
			}
		}
		n := int64(0)
		if missed != nil {
			n = missed.Count
		}
		t.Logf("%s: %d tick events, %d ticks of the downtime missed", name, len(tk), n)
	}
	if len(jobs) != fired {
		t.Fatalf("%d jobs for %d fired ticks", len(jobs), fired)
	}
	s.verify()
}
