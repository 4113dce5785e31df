package commands_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// decodeSchedule decodes a schedule body as the HTTP API does (strictly).
func decodeSchedule(t *testing.T, body string) *commands.ScheduleRequest {
	t.Helper()
	var r commands.ScheduleRequest
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
	return &r
}

func TestScheduleSpecDefaults(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	ns, spec, err := decodeSchedule(t, `{"name":"nightly","cron":"0 3 * * *","timezone":"Europe/Berlin",
		"job":{"type":"report.build","payload":{ "day" : "today" },"queue":"reports","max_retries":1,"timeout":"10m"}}`).Spec(now)
	if err != nil {
		t.Fatal(err)
	}
	want := domain.ScheduleSpec{Cron: "0 3 * * *", Timezone: "Europe/Berlin", Overlap: "skip", Misfire: "once",
		Job: []byte(`{"type":"report.build","payload":{"day":"today"},"queue":"reports","max_retries":1,"timeout":600}`)}
	if ns != "default" {
		t.Fatalf("namespace %q", ns)
	}
	if diff := cmp.Diff(want, spec); diff != "" {
		t.Fatalf("spec (-want +got):\n%s", diff)
	}
	// The stored job decodes into the request it was.
	job, err := commands.DecodeScheduleJob(spec.Job)
	if err != nil || job.Type != "report.build" || *job.MaxRetries != 1 || time.Duration(*job.Timeout) != 10*time.Minute {
		t.Fatalf("job %+v, %v", job, err)
	}
}

// Every bad input is refused naming its field, before anything is decided.
func TestScheduleSpecRefusals(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	job := `"job":{"type":"demo.echo"}`
	for _, tc := range []struct{ body, field string }{
		{`{"cron":"* * * * *",` + job + `}`, "name"},
		{`{"name":"a b","cron":"* * * * *",` + job + `}`, "name"},
		{`{"name":"` + strings.Repeat("n", 65) + `","cron":"* * * * *",` + job + `}`, "name"},
		{`{"name":"x","namespace":"a:b","cron":"* * * * *",` + job + `}`, "namespace"},
		{`{"name":"x",` + job + `}`, "cron"},
		{`{"name":"x","cron":"* * * * *","every":"1m",` + job + `}`, "every"},
		{`{"name":"x","cron":"61 * * * *",` + job + `}`, "cron"},
		{`{"name":"x","cron":"* * * *",` + job + `}`, "cron"},
		{`{"name":"x","cron":"0 0 0 * * *",` + job + `}`, "cron"}, // seconds: not the standard 5 fields
		{`{"name":"x","cron":"@fortnightly",` + job + `}`, "cron"},
		{`{"name":"x","cron":"0 0 30 2 *",` + job + `}`, "cron"}, // February 30th: never
		{`{"name":"x","cron":"CRON_TZ=UTC * * * * *",` + job + `}`, "cron"},
		{`{"name":"x","cron":"@every 500ms",` + job + `}`, "cron"},
		{`{"name":"x","cron":"` + strings.Repeat("*", 300) + `",` + job + `}`, "cron"},
		{`{"name":"x","cron":"* * * * *","timezone":"Mars/Olympus",` + job + `}`, "timezone"},
		{`{"name":"x","cron":"* * * * *","timezone":"Local",` + job + `}`, "timezone"},
		{`{"name":"x","every":"30s","timezone":"Europe/Berlin",` + job + `}`, "timezone"},
		{`{"name":"x","cron":"@every 30s","timezone":"Europe/Berlin",` + job + `}`, "timezone"},
		{`{"name":"x","every":"500ms",` + job + `}`, "every"},
		{`{"name":"x","every":0,` + job + `}`, "every"},
		{`{"name":"x","every":-5,` + job + `}`, "every"},
		{`{"name":"x","every":"9000h",` + job + `}`, "every"},
		{`{"name":"x","every":"1m","overlap":"queue",` + job + `}`, "overlap"},
		{`{"name":"x","every":"1m","misfire":"never",` + job + `}`, "misfire"},
		{`{"name":"x","every":"1m","jitter":-1,` + job + `}`, "jitter"},
		{`{"name":"x","every":"1m","jitter":"1m",` + job + `}`, "jitter"},
		{`{"name":"x","every":"24h","jitter":"2h",` + job + `}`, "jitter"},
		{`{"name":"x","cron":"*/5 * * * *","jitter":"5m",` + job + `}`, "jitter"},
		{`{"name":"x","every":"1m"}`, "job"},
		{`{"name":"x","every":"1m","job":{}}`, "job.type"},
		{`{"name":"x","every":"1m","job":{"type":"demo.echo","queue":"a.b"}}`, "job.queue"},
		{`{"name":"x","every":"1m","job":{"type":"demo.echo","max_retries":-1}}`, "job.max_retries"},
		{`{"name":"x","every":"1m","job":{"type":"demo.echo","payload":` + `"` + strings.Repeat("p", 70<<10) + `"}}`, "job"},
		{`{"name":"x","every":"1m","job":{"type":"demo.echo","namespace":"other"}}`, "job.namespace"},
		{`{"name":"x","every":"1m","job":{"type":"demo.echo","idempotency_key":"k"}}`, "job.idempotency_key"},
		{`{"name":"x","every":"1m","job":{"type":"demo.echo","run_at":"2030-01-01T00:00:00Z"}}`, "job.run_at"},
		{`{"name":"x","every":"1m","job":{"type":"demo.echo","parent":"01JD3K2Q4V8ZB7R1X9C0M5T6NA"}}`, "job.parent"},
		{`{"name":"x","every":"1m","job":{"type":"demo.echo","retry_of":"01JD3K2Q4V8ZB7R1X9C0M5T6NA"}}`, "job.retry_of"},
	} {
		_, _, err := decodeSchedule(t, tc.body).Spec(now)
		var in *commands.InputError
		if !errors.As(err, &in) || in.Field != tc.field || !errors.Is(err, commands.ErrInvalidInput) {
			t.Errorf("%s: got %v (%T), want an input error of %q", tc.body, err, err, tc.field)
		}
	}
	// The same job in the schedule's namespace is fine, and stored without it.
	_, spec, err := decodeSchedule(t, `{"name":"x","namespace":"shop","every":"1m","job":{"type":"demo.echo","namespace":"shop"}}`).Spec(now)
	if err != nil || string(spec.Job) != `{"type":"demo.echo","payload":null}` {
		t.Fatalf("%s, %v", spec.Job, err)
	}
}

func ticks(tt commands.Timetable, from time.Time, n int) []string {
	var out []string
	for t := from; len(out) < n; {
		t = tt.Next(t)
		out = append(out, t.Format(time.RFC3339))
	}
	return out
}

func TestTimetables(t *testing.T) {
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name string
		spec domain.ScheduleSpec
		from string
		want []string
	}{
		{"every counts from the epoch", domain.ScheduleSpec{Every: 90 * time.Second}, "2026-05-01T12:00:10Z",
			[]string{"2026-05-01T12:01:30Z", "2026-05-01T12:03:00Z", "2026-05-01T12:04:30Z"}},
		{"every from a tick", domain.ScheduleSpec{Every: time.Hour}, "2026-05-01T12:00:00Z",
			[]string{"2026-05-01T13:00:00Z", "2026-05-01T14:00:00Z"}},
		{"@every is every", domain.ScheduleSpec{Cron: "@every 90s"}, "2026-05-01T12:00:10Z",
			[]string{"2026-05-01T12:01:30Z", "2026-05-01T12:03:00Z"}},
		{"cron in UTC", domain.ScheduleSpec{Cron: "*/15 9-10 * * 1-5"}, "2026-05-01T10:40:00Z", // a Friday
			[]string{"2026-05-01T10:45:00Z", "2026-05-04T09:00:00Z", "2026-05-04T09:15:00Z"}},
		{"descriptor in a zone", domain.ScheduleSpec{Cron: "@daily", Timezone: "America/New_York"}, "2026-05-01T12:00:00Z",
			[]string{"2026-05-02T04:00:00Z", "2026-05-03T04:00:00Z"}},
		// Europe/Berlin springs forward on 2026-03-29 at 02:00 to 03:00:
		// 02:30 does not exist that day, and does not fire.
		{"spring forward skips", domain.ScheduleSpec{Cron: "30 2 * * *", Timezone: "Europe/Berlin"}, "2026-03-27T12:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"}},
		// It falls back on 2026-10-25 at 03:00 to 02:00: 02:30 happens
		// twice, and fires once (the first).
		{"fall back fires once", domain.ScheduleSpec{Cron: "30 2 * * *", Timezone: "Europe/Berlin"}, "2026-10-23T12:00:00Z",
			[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		// A wall-clock time fires at most once: the repeated hour is quiet.
		{"fall back, an interval in cron", domain.ScheduleSpec{Cron: "*/20 * * * *", Timezone: "Europe/Berlin"}, "2026-10-24T23:50:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T00:20:00Z", "2026-10-25T00:40:00Z", "2026-10-25T02:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tt, err := commands.ParseTimetable(tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, ticks(tt, at(tc.from), len(tc.want))); diff != "" {
				t.Fatalf("ticks (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTickJitterAndIDs(t *testing.T) {
	tick := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	j := commands.TickJitter("shop", "nightly", tick, time.Minute)
	if j < 0 || j >= time.Minute || j != commands.TickJitter("shop", "nightly", tick, time.Minute) {
		t.Fatalf("jitter %s", j)
	}
	if commands.TickJitter("shop", "nightly", tick, 0) != 0 {
		t.Fatal("jitter without a jitter")
	}
	spread := map[time.Duration]bool{}
	for i := range 20 {
		spread[commands.TickJitter("shop", "nightly", tick.Add(time.Duration(i)*time.Hour), time.Minute)] = true
	}
	if len(spread) < 15 {
		t.Fatalf("20 ticks, %d jitters", len(spread))
	}
	if k := commands.TickKey("nightly", tick); k != fmt.Sprintf("schedule:nightly:%d", tick.UnixNano()) {
		t.Fatal(k)
	}
	id := commands.TickJobID("shop", "nightly", tick)
	if id != domain.KeyedID("shop", commands.TickKey("nightly", tick)) || !domain.ValidID(id) ||
		id == commands.TickJobID("other", "nightly", tick) || id == commands.TickJobID("shop", "nightly", tick.Add(time.Second)) {
		t.Fatal(id)
	}
}

func record(spec domain.ScheduleSpec, next time.Time) *domain.ScheduleRecord {
	return &domain.ScheduleRecord{Namespace: "default", Name: "s", Spec: spec, Next: next}
}

func TestNextStep(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	sec := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }
	every := func(misfire string) domain.ScheduleSpec {
		return domain.ScheduleSpec{Every: time.Second, Misfire: misfire, Overlap: "skip"}
	}
	grace := 5 * time.Second
	for _, tc := range []struct {
		name string
		rec  *domain.ScheduleRecord
		now  time.Time
		want commands.TickStep
	}{
		{"paused", &domain.ScheduleRecord{Spec: every("skip"), Paused: true}, sec(10), commands.TickStep{}},
		{"not due", record(every("skip"), sec(3)), sec(2), commands.TickStep{Due: sec(3)}},
		{"due", record(every("skip"), sec(3)), sec(3), commands.TickStep{Kind: commands.StepFire, Tick: sec(3), Next: sec(4)}},
		{"late within the grace", record(every("skip"), sec(3)), sec(8), commands.TickStep{Kind: commands.StepFire, Tick: sec(3), Next: sec(4)}},
		// 3..10 passed: 8 ticks.
		{"misfire skip", record(every("skip"), sec(3)), sec(10).Add(500 * time.Millisecond),
			commands.TickStep{Kind: commands.StepMiss, First: sec(3), Tick: sec(10), Count: 8, Next: sec(11)}},
		{"misfire once", record(every("once"), sec(3)), sec(10).Add(500 * time.Millisecond),
			commands.TickStep{Kind: commands.StepMiss, First: sec(3), Tick: sec(9), Count: 7, Next: sec(10)}},
		{"misfire once, the newest", record(every("once"), sec(10)), sec(20),
			commands.TickStep{Kind: commands.StepMiss, First: sec(10), Tick: sec(19), Count: 10, Next: sec(20)}},
		{"misfire all, under the bound", record(every("all"), sec(3)), sec(10).Add(500 * time.Millisecond),
			commands.TickStep{Kind: commands.StepFire, Tick: sec(3), Next: sec(4)}},
		{"misfire all, over the bound", record(every("all"), sec(0)), sec(149),
			commands.TickStep{Kind: commands.StepMiss, First: sec(0), Tick: sec(49), Count: 50, Next: sec(50)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := commands.NextStep(tc.rec, tc.now, grace)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("step (-want +got):\n%s", diff)
			}
		})
	}
	// Misfire once or skip with one tick in the past, later than the
	// grace: once fires it, skip records it missed.
	minutely := domain.ScheduleSpec{Every: time.Minute, Misfire: "once", Overlap: "skip"}
	got, err := commands.NextStep(record(minutely, t0), sec(30), grace)
	if err != nil || got.Kind != commands.StepFire || !got.Tick.Equal(t0) || !got.Next.Equal(sec(60)) {
		t.Fatalf("%+v %v", got, err)
	}
	minutely.Misfire = "skip"
	got, err = commands.NextStep(record(minutely, t0), sec(30), grace)
	if err != nil || got.Kind != commands.StepMiss || got.Count != 1 || !got.Tick.Equal(t0) || !got.Next.Equal(sec(60)) {
		t.Fatalf("%+v %v", got, err)
	}
}

// A backlog of a cron schedule longer than one decision counts is
// recorded as missed in steps, then the policy applies to the rest.
func TestNextStepLongCronBacklog(t *testing.T) {
	spec := domain.ScheduleSpec{Cron: "* * * * *", Misfire: "all", Overlap: "allow"}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rec := record(spec, t0)
	now := t0.Add(100*24*time.Hour + 30*time.Second) // 144,001 minutes
	var missed int64
	for i := 0; ; i++ {
		step, err := commands.NextStep(rec, now, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if step.Kind != commands.StepMiss {
			// The newest 100 fire.
			if step.Kind != commands.StepFire || !step.Tick.Equal(t0.Add(144_001*time.Minute-100*time.Minute)) {
				t.Fatalf("step %+v", step)
			}
			break
		}
		if i > 3 || !step.First.Equal(rec.Next) {
			t.Fatalf("step %d: %+v", i, step)
		}
		missed += step.Count
		rec.Next = step.Next
	}
	if missed != 144_001-100 {
		t.Fatalf("%d missed", missed)
	}
}

func TestOverlap(t *testing.T) {
	for _, tc := range []struct {
		policy  string
		running bool
		outcome string
		cancel  bool
	}{
		{"skip", false, "fired", false},
		{"skip", true, "skipped-overlap", false},
		{"allow", true, "fired", false},
		{"cancel", false, "fired", false},
		{"cancel", true, "cancelled-previous", true},
	} {
		outcome, cancel := commands.Overlap(tc.policy, tc.running)
		if outcome != tc.outcome || cancel != tc.cancel {
			t.Errorf("%s, running %v: %s, %v", tc.policy, tc.running, outcome, cancel)
		}
	}
}

// The changes of a schedule decided on its record, and folded into it.
func TestScheduleLife(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 10, 0, time.UTC)
	_, spec, err := decodeSchedule(t, `{"name":"s","every":"1m","overlap":"allow","job":{"type":"demo.echo"}}`).Spec(now)
	if err != nil {
		t.Fatal(err)
	}
	var rec *domain.ScheduleRecord
	seq := uint64(0)
	apply := func(ev *domain.Event, err error) {
		t.Helper()
		if err != nil || ev == nil {
			t.Fatalf("event %v, %v", ev, err)
		}
		seq++
		ev.Seq = seq
		if rec, err = projections.FoldSchedule(rec, ev); err != nil {
			t.Fatal(err)
		}
	}
	change := func(typ string, s *domain.ScheduleSpec, at time.Time) (*domain.Event, error) {
		return commands.ScheduleEvent(rec, typ, "default", "s", s, "ann", at)
	}
	if _, err := change(domain.EvSchedulePaused, nil, now); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("pause of none: %v", err)
	}
	apply(change(domain.EvScheduleCreated, &spec, now))
	if !rec.Next.Equal(time.Date(2026, 5, 1, 12, 1, 0, 0, time.UTC)) || rec.CreatedBy != "ann" {
		t.Fatalf("%+v", rec)
	}
	if ev, err := change(domain.EvScheduleCreated, &spec, now); ev != nil || err != nil {
		t.Fatalf("the same again: %v, %v", ev, err)
	}
	other := spec
	other.Overlap = "skip"
	if _, err := change(domain.EvScheduleCreated, &other, now); !errors.Is(err, commands.ErrConflict) {
		t.Fatalf("another spec: %v", err)
	}
	// 25 ticks: the record keeps the newest 20.
	for i := range 25 {
		step, err := commands.NextStep(rec, rec.Next, time.Minute)
		if err != nil || step.Kind != commands.StepFire {
			t.Fatalf("%+v %v", step, err)
		}
		id := commands.TickJobID("default", "s", step.Tick)
		apply(commands.Tick(rec, step, domain.TickFired, id, "", "", "engine", step.Tick))
		if i == 0 {
			// A step decided on a record that moved on since is refused.
			if _, err := commands.Tick(rec, step, domain.TickFired, id, "", "", "engine", step.Tick); !errors.Is(err, commands.ErrConflict) {
				t.Fatalf("the same tick twice: %v", err)
			}
		}
	}
	if len(rec.LastRuns) != domain.MaxScheduleRuns || rec.Fired != 25 || rec.LastJob != rec.LastRuns[0].Job ||
		!rec.LastRuns[0].At.Equal(time.Date(2026, 5, 1, 12, 25, 0, 0, time.UTC)) || !rec.Next.Equal(time.Date(2026, 5, 1, 12, 26, 0, 0, time.UTC)) {
		t.Fatalf("%d runs, %d fired, next %s", len(rec.LastRuns), rec.Fired, rec.Next)
	}
	apply(change(domain.EvSchedulePaused, nil, now))
	if !rec.Paused || !rec.Next.IsZero() {
		t.Fatalf("%+v", rec)
	}
	if ev, err := change(domain.EvSchedulePaused, nil, now); ev != nil || err != nil {
		t.Fatalf("pause twice: %v %v", ev, err)
	}
	step := commands.TickStep{Kind: commands.StepFire, Tick: time.Date(2026, 5, 1, 12, 26, 0, 0, time.UTC)}
	if _, err := commands.Tick(rec, step, domain.TickFired, "x", "", "", "engine", now); !errors.Is(err, commands.ErrConflict) {
		t.Fatalf("tick of a paused one: %v", err)
	}
	// Resumed an hour later: ticks count from the resume, none of the pause is missed.
	later := now.Add(time.Hour)
	apply(change(domain.EvScheduleResumed, nil, later))
	if rec.Paused || !rec.Next.Equal(time.Date(2026, 5, 1, 13, 1, 0, 0, time.UTC)) {
		t.Fatalf("%+v", rec)
	}
	// A change of the job keeps the next tick; one of the timing moves it.
	job := spec
	job.Job = []byte(`{"type":"demo.sleep","payload":null}`)
	apply(change(domain.EvScheduleChanged, &job, later))
	if !rec.Next.Equal(time.Date(2026, 5, 1, 13, 1, 0, 0, time.UTC)) || string(rec.Spec.Job) != string(job.Job) {
		t.Fatalf("%+v", rec)
	}
	hourly := job
	hourly.Every = time.Hour
	apply(change(domain.EvScheduleChanged, &hourly, later))
	if !rec.Next.Equal(time.Date(2026, 5, 1, 14, 0, 0, 0, time.UTC)) {
		t.Fatalf("next %s", rec.Next)
	}
	apply(change(domain.EvScheduleDeleted, nil, later))
	if !rec.Deleted || !rec.Next.IsZero() || commands.TickDue(rec) != (time.Time{}) {
		t.Fatalf("%+v", rec)
	}
	if _, err := change(domain.EvScheduleDeleted, nil, later); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
	// Created again: a new schedule, nothing of before.
	apply(change(domain.EvScheduleCreated, &spec, later))
	if rec.Deleted || rec.Fired != 0 || len(rec.LastRuns) != 0 || rec.LastJob != "" {
		t.Fatalf("%+v", rec)
	}
	// A run of missed ticks is one, counted by its count.
	step, err = commands.NextStep(rec, rec.Next.Add(10*time.Minute+time.Second), time.Minute)
	if err != nil || step.Kind != commands.StepMiss || step.Count != 10 {
		t.Fatalf("%+v %v", step, err)
	}
	apply(commands.Tick(rec, step, "", "", "", "", "engine", later))
	if rec.Missed != 10 || rec.LastRuns[0].Outcome != domain.TickMissed || rec.LastRuns[0].Count != 10 || !rec.Next.Equal(step.Next) {
		t.Fatalf("%+v", rec)
	}
	v := projections.ViewSchedule(rec)
	if v.NextRunAt == nil || len(v.Upcoming) != 4 || !v.Upcoming[0].Equal(rec.Next.Add(time.Minute)) || v.Counts.Missed != 10 ||
		*v.Every != commands.Duration(time.Minute) {
		t.Fatalf("%+v", v)
	}
}

func TestSchedulePatch(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	_, cur, err := decodeSchedule(t, `{"name":"s","every":"1m","job":{"type":"demo.echo"}}`).Spec(now)
	if err != nil {
		t.Fatal(err)
	}
	patch := func(body string) (domain.ScheduleSpec, error) {
		var p commands.SchedulePatch
		dec := json.NewDecoder(strings.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		return p.Apply("default", "s", cur, now)
	}
	got, err := patch(`{"cron":"0 * * * *","timezone":"Asia/Tokyo","overlap":"cancel"}`)
	if err != nil || got.Cron != "0 * * * *" || got.Every != 0 || got.Timezone != "Asia/Tokyo" || got.Overlap != "cancel" ||
		got.Misfire != "once" || string(got.Job) != string(cur.Job) {
		t.Fatalf("%+v %v", got, err)
	}
	for body, field := range map[string]string{
		`{"name":"other"}`:                     "name",
		`{"cron":"* * * * *","every":"1m"}`:    "every",
		`{"timezone":"Europe/Paris"}`:          "timezone", // an interval has none
		`{"misfire":"later"}`:                  "misfire",
		`{"job":{"type":"a","priority":5000}}`: "job.priority",
	} {
		_, err := patch(body)
		var in *commands.InputError
		if !errors.As(err, &in) || in.Field != field {
			t.Errorf("%s: %v, want an input error of %s", body, err, field)
		}
	}
}

// FuzzTimetable: any cron expression, zone and interval is parsed or
// refused naming its field, and a timetable's next ticks move forward.
func FuzzTimetable(f *testing.F) {
	for _, s := range []string{"* * * * *", "*/15 9-17 * * MON-FRI", "@every 90s", "@daily", "0 0 29 2 *", "61 * * * *",
		"@every -1s", "CRON_TZ=UTC * * * * *", "* * * * * *", "@every 1000000h", ""} {
		f.Add(s, "Europe/Berlin", int64(0))
		f.Add(s, "", int64(time.Minute))
	}
	f.Fuzz(func(t *testing.T, expr, zone string, every int64) {
		spec := domain.ScheduleSpec{Cron: expr, Timezone: zone, Every: time.Duration(every)}
		tt, err := commands.ParseTimetable(spec)
		if err != nil {
			if !errors.Is(err, commands.ErrInvalidInput) {
				t.Fatalf("%+v: %v", spec, err)
			}
			return
		}
		now := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)
		n := tt.Next(now)
		if !n.IsZero() && !n.After(now) {
			t.Fatalf("%+v: next %s is not after %s", spec, n, now)
		}
	})
}
