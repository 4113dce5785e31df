package commands

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	_ "time/tzdata" // every engine of a build knows the same zones, whatever its machine has

	"github.com/robfig/cron/v3"

	"github.com/jetflow/jetflow/internal/domain"
)

// Schedules: cron expressions and intervals that submit a job at each
// tick (docs/schedules.md). The rules are here: what a schedule may say,
// when its ticks are, which tick is due, what a due tick does (overlap,
// misfire), and the id of a tick's job.

// Limits and defaults of schedules.
const (
	// minEvery and maxEvery bound an interval.
	minEvery = time.Second
	maxEvery = 366 * 24 * time.Hour
	// maxJitter bounds a schedule's jitter (which must also be shorter
	// than the gap between two of its ticks).
	maxJitter = time.Hour
	// maxCronLen bounds a cron expression.
	maxCronLen = 256
	// maxScheduleJobBytes bounds the body of a schedule's job (JSON).
	maxScheduleJobBytes = 64 << 10
	// MaxSchedulesPerNamespace is how many schedules one namespace holds
	// (deleted ones count until they are created again).
	MaxSchedulesPerNamespace = 1000
	// MaxMissedFires is the most missed ticks misfire "all" fires: older
	// ones are recorded as missed.
	MaxMissedFires = 100
	// maxBacklogScan bounds the ticks one decision counts of a backlog
	// (ticks in the past); a longer backlog is recorded as missed in
	// steps of that many.
	maxBacklogScan = 100_000
	// DefaultMisfireGrace is how late a tick may fire and still count as
	// on time; a tick found later than that is a misfire.
	DefaultMisfireGrace = time.Minute
	// defaultOverlap and defaultMisfire are the policies of a schedule
	// that names none.
	defaultOverlap = domain.OverlapSkip
	defaultMisfire = domain.MisfireOnce
)

// ScheduleRequest creates a schedule: the body of POST /api/v1/schedules
// and of jetflow.cmd.schedule.create. Exactly one of Cron and Every.
type ScheduleRequest struct {
	// Namespace is the schedule's (and its jobs'); the HTTP API takes it
	// from the token or ?namespace= too.
	Namespace string    `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Name      string    `json:"name" msgpack:"name"`
	Cron      string    `json:"cron,omitempty" msgpack:"cron,omitempty"`
	Every     *Duration `json:"every,omitempty" msgpack:"every,omitempty"`
	Timezone  string    `json:"timezone,omitempty" msgpack:"timezone,omitempty"`
	// Job is the job each tick submits: the body of POST /api/v1/jobs,
	// without namespace (the schedule's), idempotency_key (each tick's job
	// has its own), run_at, parent and retry_of.
	Job     *SubmitRequest `json:"job" msgpack:"job"`
	Overlap string         `json:"overlap,omitempty" msgpack:"overlap,omitempty"`
	Misfire string         `json:"misfire,omitempty" msgpack:"misfire,omitempty"`
	Jitter  *Duration      `json:"jitter,omitempty" msgpack:"jitter,omitempty"`
}

// SchedulePatch changes a schedule: the body of PATCH
// /api/v1/schedules/{name} and of jetflow.cmd.schedule.update. A field
// given replaces the schedule's (job: the whole job); cron and every
// replace each other; timezone goes with cron.
type SchedulePatch struct {
	Namespace string         `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Name      string         `json:"name,omitempty" msgpack:"name,omitempty"`
	Cron      *string        `json:"cron,omitempty" msgpack:"cron,omitempty"`
	Every     *Duration      `json:"every,omitempty" msgpack:"every,omitempty"`
	Timezone  *string        `json:"timezone,omitempty" msgpack:"timezone,omitempty"`
	Job       *SubmitRequest `json:"job,omitempty" msgpack:"job,omitempty"`
	Overlap   *string        `json:"overlap,omitempty" msgpack:"overlap,omitempty"`
	Misfire   *string        `json:"misfire,omitempty" msgpack:"misfire,omitempty"`
	Jitter    *Duration      `json:"jitter,omitempty" msgpack:"jitter,omitempty"`
}

// CheckScheduleName refuses a name that cannot name a schedule.
func CheckScheduleName(name string) error {
	if name == "" {
		return inputErr("name", "is required")
	}
	if !domain.ValidScheduleName(name) {
		return valueErr("name", name, "want 1-64 of [A-Za-z0-9_-]")
	}
	return nil
}

// Spec validates a request and resolves it into the spec a schedule is
// created with, its namespace filled in ("" is the default one). The job
// is checked as a submit would check it, but for its type's registration
// and schema (the registry's, at the caller). Nothing is refused with a
// default: a field given is taken as it is or refused, naming it.
func (r *ScheduleRequest) Spec(now time.Time) (string, domain.ScheduleSpec, error) {
	ns := r.Namespace
	if ns == "" {
		ns = domain.DefaultNS
	}
	if err := CheckNamespace(ns); err != nil {
		return ns, domain.ScheduleSpec{}, err
	}
	if err := CheckScheduleName(r.Name); err != nil {
		return ns, domain.ScheduleSpec{}, err
	}
	spec := domain.ScheduleSpec{Cron: strings.TrimSpace(r.Cron), Timezone: r.Timezone,
		Overlap: r.Overlap, Misfire: r.Misfire}
	if r.Every != nil {
		spec.Every = time.Duration(*r.Every)
	}
	if r.Jitter != nil {
		if *r.Jitter < 0 {
			return ns, spec, valueErr("jitter", time.Duration(*r.Jitter), "must not be negative")
		}
		spec.Jitter = time.Duration(*r.Jitter)
	}
	if spec.Overlap == "" {
		spec.Overlap = defaultOverlap
	}
	if spec.Misfire == "" {
		spec.Misfire = defaultMisfire
	}
	if err := checkTiming(&spec, r.Every != nil, now); err != nil {
		return ns, spec, err
	}
	job, err := scheduleJob(r.Job, ns, now)
	if err != nil {
		return ns, spec, err
	}
	spec.Job = job
	return ns, spec, nil
}

// checkTiming checks a spec's cron or interval, zone, policies and
// jitter.
func checkTiming(spec *domain.ScheduleSpec, everyGiven bool, now time.Time) error {
	switch {
	case spec.Cron != "" && everyGiven:
		return inputErr("every", "give cron or every, not both")
	case spec.Cron == "" && !everyGiven:
		return inputErr("cron", `give cron (a 5-field expression such as "*/5 * * * *", or @hourly, @every 90s) or every (an interval such as "90s")`)
	case len(spec.Cron) > maxCronLen:
		return inputErr("cron", "%d bytes: at most %d", len(spec.Cron), maxCronLen)
	}
	if everyGiven && (spec.Every < minEvery || spec.Every > maxEvery) {
		return valueErr("every", spec.Every, "must be %s to %s", minEvery, maxEvery)
	}
	switch spec.Overlap {
	case domain.OverlapSkip, domain.OverlapAllow, domain.OverlapCancel:
	default:
		return valueErr("overlap", spec.Overlap, `want "skip", "allow" or "cancel"`)
	}
	switch spec.Misfire {
	case domain.MisfireSkip, domain.MisfireOnce, domain.MisfireAll:
	default:
		return valueErr("misfire", spec.Misfire, `want "skip", "once" or "all"`)
	}
	tt, err := ParseTimetable(*spec)
	if err != nil {
		return err
	}
	// The gap between two ticks: the shortest of the next few.
	gap, t := time.Duration(0), tt.Next(now)
	if t.IsZero() {
		return valueErr("cron", spec.Cron, "has no tick in the next five years")
	}
	for range 10 {
		n := tt.Next(t)
		if n.IsZero() {
			break
		}
		if d := n.Sub(t); gap == 0 || d < gap {
			gap = d
		}
		t = n
	}
	if spec.Jitter > maxJitter || (gap > 0 && spec.Jitter >= gap) {
		limit := maxJitter
		if gap > 0 && gap <= limit {
			return valueErr("jitter", spec.Jitter, "must be shorter than the %s between two ticks", gap)
		}
		return valueErr("jitter", spec.Jitter, "must be at most %s", limit)
	}
	return nil
}

// scheduleJob checks the job of a schedule of namespace ns as a submit
// would (but for its type's registration and schema) and returns its body
// as stored: compact JSON, without the namespace.
func scheduleJob(job *SubmitRequest, ns string, now time.Time) ([]byte, error) {
	if job == nil {
		return nil, inputErr("job", `is required: the job each tick submits, as the body of POST /api/v1/jobs ({"type": ..., "payload": ...})`)
	}
	j := *job
	switch {
	case j.Namespace != "" && j.Namespace != ns:
		return nil, valueErr("job.namespace", j.Namespace, "a schedule's jobs are of its namespace (%s): leave it out", ns)
	case j.IdempotencyKey != "":
		return nil, inputErr("job.idempotency_key", "each tick's job has a key of its own (schedule:NAME:TICK)")
	case j.UniqueKey != "" || len(j.UniqueFields) > 0 || j.UniqueFor != nil || j.UniqueWhile != "":
		return nil, inputErr("job.unique_key", "each tick's job is one of its tick already: the schedule's overlap policy says what runs beside the previous one")
	case j.RunAt != nil:
		return nil, inputErr("job.run_at", "a tick's job is submitted at its tick: give delay for later")
	case j.Parent != "":
		return nil, inputErr("job.parent", "a schedule's jobs have no parent")
	case j.RetryOf != "":
		return nil, inputErr("job.retry_of", "a schedule's jobs are not retries")
	case j.ID != "" || j.Piece != 0 || len(j.Files) > 0 || len(j.Uploads) > 0:
		return nil, inputErr("job", "a schedule's jobs have no files")
	}
	j.Namespace = ns
	spec, err := j.Spec(now)
	if err != nil {
		var in *InputError
		if errors.As(err, &in) {
			named := *in
			named.Field = "job." + strings.TrimPrefix(in.Field, "job.")
			if in.Field == "" {
				named.Field = "job"
			}
			return nil, &named
		}
		return nil, err
	}
	j.Namespace = ""
	j.Payload = RawJSON(spec.Payload)
	b, err := json.Marshal(&j)
	if err != nil {
		return nil, inputErr("job", "%v", err)
	}
	if len(b) > maxScheduleJobBytes {
		return nil, inputErr("job", "%d bytes: at most %d", len(b), maxScheduleJobBytes)
	}
	return b, nil
}

// Request is the schedule spec as a request again: what PATCH changes.
func scheduleRequest(ns, name string, s domain.ScheduleSpec) (*ScheduleRequest, error) {
	r := &ScheduleRequest{Namespace: ns, Name: name, Cron: s.Cron, Timezone: s.Timezone,
		Overlap: s.Overlap, Misfire: s.Misfire}
	if s.Cron == "" {
		d := Duration(s.Every)
		r.Every = &d
	}
	if s.Jitter > 0 {
		d := Duration(s.Jitter)
		r.Jitter = &d
	}
	job, err := DecodeScheduleJob(s.Job)
	if err != nil {
		return nil, err
	}
	r.Job = job
	return r, nil
}

// DecodeScheduleJob reads the job body of a spec.
func DecodeScheduleJob(b []byte) (*SubmitRequest, error) {
	var job SubmitRequest
	if err := json.Unmarshal(b, &job); err != nil {
		return nil, fmt.Errorf("schedule job: %w", err)
	}
	return &job, nil
}

// Apply is the spec a patch makes of cur (the schedule's spec now),
// validated as a new one would be.
func (p *SchedulePatch) Apply(ns, name string, cur domain.ScheduleSpec, now time.Time) (domain.ScheduleSpec, error) {
	if p.Name != "" && p.Name != name {
		return cur, valueErr("name", p.Name, "a schedule is not renamed: create another")
	}
	r, err := scheduleRequest(ns, name, cur)
	if err != nil {
		return cur, err
	}
	if p.Cron != nil && p.Every != nil {
		return cur, inputErr("every", "give cron or every, not both")
	}
	if p.Cron != nil {
		r.Cron, r.Every = *p.Cron, nil
	}
	if p.Every != nil {
		r.Every, r.Cron, r.Timezone = p.Every, "", ""
	}
	if p.Timezone != nil {
		r.Timezone = *p.Timezone
	}
	if p.Job != nil {
		r.Job = p.Job
	}
	if p.Overlap != nil {
		r.Overlap = *p.Overlap
	}
	if p.Misfire != nil {
		r.Misfire = *p.Misfire
	}
	if p.Jitter != nil {
		r.Jitter = p.Jitter
	}
	_, spec, err := r.Spec(now)
	return spec, err
}

// A timetable says when a schedule's ticks are.
type timetable interface {
	// Next is the first tick after t (zero: none within five years).
	Next(t time.Time) time.Time
}

// everyTable ticks at the multiples of an interval since the Unix epoch,
// so that every engine, and every change of the schedule, keeps the same
// ticks.
type everyTable time.Duration

func (e everyTable) Next(t time.Time) time.Time {
	d := int64(e)
	n := t.UnixNano()
	next := (n/d + 1) * d
	if n < 0 && n%d != 0 {
		next = (n / d) * d
	}
	return time.Unix(0, next).UTC()
}

// cronTable ticks as a cron expression says, in its zone. A wall-clock
// time fires at most once: in the hour the fall-back of daylight saving
// time repeats, the times that fired already do not fire again (robfig's
// schedule would fire them twice); a time the spring-forward skips does
// not fire that day.
type cronTable struct {
	s   cron.Schedule
	loc *time.Location
}

func (c cronTable) Next(t time.Time) time.Time {
	n := c.s.Next(t)
	for i := 0; !n.IsZero() && i < 10_000 && !wall(n, c.loc).After(wall(t, c.loc)); i++ {
		n = c.s.Next(n)
	}
	return n.UTC()
}

// wall is t's wall-clock time in loc, as if it were UTC (comparable
// across an offset change).
func wall(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), l.Second(), l.Nanosecond(), time.UTC)
}

var (
	zonesMu sync.Mutex
	zones   = map[string]*time.Location{} // LoadLocation reads a file each time
)

// zone returns the location of an IANA zone name ("" is UTC); an unknown
// one, or "Local" (the engine machine's), is refused naming the field.
func zone(name string) (*time.Location, error) {
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	zonesMu.Lock()
	defer zonesMu.Unlock()
	if loc, ok := zones[name]; ok {
		return loc, nil
	}
	if name == "Local" || len(name) > 64 {
		return nil, valueErr("timezone", name, `want an IANA zone such as "Europe/Berlin" or "UTC"`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, valueErr("timezone", name, `not a known IANA zone (such as "Europe/Berlin" or "America/New_York")`)
	}
	zones[name] = loc
	return loc, nil
}

// cronParser reads the standard 5 fields and the descriptors (@hourly,
// @daily, @every 90s, ...).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseTimetable returns a spec's timetable: its cron expression in its
// zone, or its interval. "@every D" is an interval, as every D is.
func ParseTimetable(spec domain.ScheduleSpec) (timetable, error) {
	if spec.Cron == "" {
		if spec.Timezone != "" {
			return nil, inputErr("timezone", "only with cron: an interval counts from the Unix epoch, in no zone")
		}
		if spec.Every < minEvery {
			return nil, valueErr("every", spec.Every, "must be at least %s", minEvery)
		}
		return everyTable(spec.Every), nil
	}
	expr := spec.Cron
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, valueErr("cron", expr, "give the zone as timezone, not in the expression")
	}
	if d, ok := strings.CutPrefix(expr, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || every < minEvery || every > maxEvery {
			return nil, valueErr("cron", expr, "@every wants an interval of %s to %s", minEvery, maxEvery)
		}
		if spec.Timezone != "" {
			return nil, inputErr("timezone", "not with @every: an interval counts from the Unix epoch, in no zone")
		}
		return everyTable(every), nil
	}
	loc, err := zone(spec.Timezone)
	if err != nil {
		return nil, err
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, valueErr("cron", expr, "%v (want 5 fields: minute hour day-of-month month day-of-week, or @hourly, @daily, @weekly, @monthly, @yearly, @every D)", err)
	}
	if ss, ok := s.(*cron.SpecSchedule); ok {
		ss.Location = loc
	}
	return cronTable{s: s, loc: loc}, nil
}

// tickJitter is how long after tick it fires: a point of [0, jitter)
// chosen by a hash of the schedule and the tick, so that every engine
// picks the same.
func tickJitter(ns, name string, tick time.Time, jitter time.Duration) time.Duration {
	if jitter <= 0 {
		return 0
	}
	h := fnv64(ns + "\x00" + name + "\x00" + tick.UTC().Format(time.RFC3339Nano))
	return time.Duration(h % uint64(jitter))
}

func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// TickKey is the idempotency key of a tick's job: a second submit of it
// (another leader, or one that died before recording the tick) is the
// same job.
func TickKey(name string, tick time.Time) string {
	return fmt.Sprintf("schedule:%s:%d", name, tick.UnixNano())
}

// TickJobID is the id of a tick's job.
func TickJobID(ns, name string, tick time.Time) string {
	return domain.KeyedID(ns, TickKey(name, tick))
}

// TickDue is when the record's next tick fires (zero: none).
func TickDue(rec *domain.ScheduleRecord) time.Time {
	if rec == nil || rec.Deleted || rec.Paused || rec.Next.IsZero() {
		return time.Time{}
	}
	return rec.Next.Add(tickJitter(rec.Namespace, rec.Name, rec.Next, rec.Spec.Jitter))
}

// stepKind is what a schedule's next step is.
type stepKind int

const (
	StepNone stepKind = iota // nothing is due: wait for Due (or nothing, if it is zero)
	StepFire                 // fire Tick
	StepMiss                 // record the ticks First..Tick as missed
)

// TickStep is the next thing the scheduler does for a schedule.
type TickStep struct {
	Kind  stepKind
	Due   time.Time // StepNone: when the next tick fires (zero: never, paused)
	Tick  time.Time // StepFire: the tick; StepMiss: the newest missed
	First time.Time // StepMiss: the oldest missed (the record's Next)
	Count int64     // StepMiss: how many
	Next  time.Time // the tick after this step's: the record's Next once it is recorded
}

// NextStep decides what is due of a schedule at now: nothing (and when
// its next tick is); its next tick (fire it), when it is due and late by
// at most grace; or, when it is later than that (a misfire), what the
// misfire policy makes of every tick that passed: missed ticks to record
// (skip: all of them; once: all but the newest; all: all but the newest
// MaxMissedFires), then, at the next steps, the ticks to fire.
func NextStep(rec *domain.ScheduleRecord, now time.Time, grace time.Duration) (TickStep, error) {
	due := TickDue(rec)
	if due.IsZero() {
		return TickStep{}, nil
	}
	if now.Before(due) {
		return TickStep{Due: due}, nil
	}
	tt, err := ParseTimetable(rec.Spec)
	if err != nil {
		return TickStep{}, err
	}
	first := rec.Next
	if now.Sub(due) <= grace {
		return TickStep{Kind: StepFire, Tick: first, Next: tt.Next(first)}, nil
	}
	newest, count, complete := backlog(tt, first, now)
	keep := 0 // of the newest ticks, how many fire
	if complete {
		switch rec.Spec.Misfire {
		case domain.MisfireOnce:
			keep = 1
		case domain.MisfireAll:
			keep = MaxMissedFires
		}
	}
	if count <= int64(keep) {
		return TickStep{Kind: StepFire, Tick: first, Next: tt.Next(first)}, nil
	}
	// newest holds the newest ticks of the backlog (up to keep+1 of them):
	// the missed run ends at the one before those that fire.
	missedTo := len(newest) - 1 - keep
	last := newest[missedTo]
	return TickStep{Kind: StepMiss, First: first, Tick: last, Count: count - int64(keep), Next: tt.Next(last)}, nil
}

// FireNext is the step that fires the record's next tick, whatever its
// misfire policy says: for a tick whose job exists already (a leader
// fired it, then died before recording it).
func FireNext(rec *domain.ScheduleRecord) (TickStep, error) {
	tt, err := ParseTimetable(rec.Spec)
	if err != nil {
		return TickStep{}, err
	}
	return TickStep{Kind: StepFire, Tick: rec.Next, Next: tt.Next(rec.Next)}, nil
}

// backlog finds the ticks from first up to now: how many, and the newest
// MaxMissedFires+1 of them, oldest first. complete is false when it
// stopped counting (maxBacklogScan) before it reached now: there are more.
func backlog(tt timetable, first, now time.Time) (newest []time.Time, count int64, complete bool) {
	const ring = MaxMissedFires + 1
	if e, ok := tt.(everyTable); ok {
		d := time.Duration(e)
		count = int64(now.Sub(first)/d) + 1
		complete = true
		if count > maxBacklogScan {
			count, complete = maxBacklogScan, false
		}
		for i := max(count-ring, 0); i < count; i++ {
			newest = append(newest, first.Add(time.Duration(i)*d))
		}
		return newest, count, complete
	}
	buf := make([]time.Time, 0, ring)
	t := first
	for !t.IsZero() && !t.After(now) {
		if count == maxBacklogScan {
			return buf, count, false
		}
		if len(buf) == ring {
			copy(buf, buf[1:])
			buf = buf[:ring-1]
		}
		buf = append(buf, t)
		count++
		t = tt.Next(t)
	}
	return buf, count, true
}

// Overlap decides what a due tick does about the job of the previous
// fired tick: running (not ended) or not. cancel: cancel that job first.
func Overlap(policy string, previousRunning bool) (outcome string, cancel bool) {
	if !previousRunning {
		return domain.TickFired, false
	}
	switch policy {
	case domain.OverlapAllow:
		return domain.TickFired, false
	case domain.OverlapCancel:
		return domain.TickCancelledPrevious, true
	}
	return domain.TickSkippedOverlap, false
}

// FiresJob reports whether a tick of this outcome has a job.
func FiresJob(outcome string) bool {
	return outcome == domain.TickFired || outcome == domain.TickCancelledPrevious
}

// ScheduleEvent decides a schedule's creation, change, pause, resume or
// deletion on its record now (nil: none), and returns the event, nil
// when there is nothing to write (a pause of a paused schedule, a
// creation of one that exists with this very spec), or the refusal. spec
// is the new spec (created, changed).
func ScheduleEvent(cur *domain.ScheduleRecord, typ, ns, name string, spec *domain.ScheduleSpec, actor string, now time.Time) (*domain.Event, error) {
	exists := cur != nil && !cur.Deleted
	ch := &domain.ScheduleChange{Namespace: ns, Name: name}
	next := func(s domain.ScheduleSpec) (time.Time, error) {
		tt, err := ParseTimetable(s)
		if err != nil {
			return time.Time{}, err
		}
		return tt.Next(now), nil
	}
	switch typ {
	case domain.EvScheduleCreated:
		if exists {
			if sameSpec(cur.Spec, *spec) {
				return nil, nil
			}
			return nil, fmt.Errorf("schedule %s exists (in namespace %s) with another spec: change it (PATCH) or delete it first: %w", name, ns, ErrConflict)
		}
		n, err := next(*spec)
		if err != nil {
			return nil, err
		}
		ch.Spec, ch.Next = spec, n
	case domain.EvScheduleChanged:
		if !exists {
			return nil, unknownSchedule(ns, name)
		}
		if sameSpec(cur.Spec, *spec) {
			return nil, nil
		}
		ch.Spec, ch.Next = spec, cur.Next
		if !sameTiming(cur.Spec, *spec) && !cur.Paused {
			n, err := next(*spec)
			if err != nil {
				return nil, err
			}
			ch.Next = n
		}
	case domain.EvSchedulePaused:
		if !exists {
			return nil, unknownSchedule(ns, name)
		}
		if cur.Paused {
			return nil, nil
		}
	case domain.EvScheduleResumed:
		if !exists {
			return nil, unknownSchedule(ns, name)
		}
		if !cur.Paused {
			return nil, nil
		}
		n, err := next(cur.Spec)
		if err != nil {
			return nil, err
		}
		ch.Next = n
	case domain.EvScheduleDeleted:
		if !exists {
			return nil, unknownSchedule(ns, name)
		}
	default:
		return nil, fmt.Errorf("%s is not a change of a schedule", typ)
	}
	return &domain.Event{Type: typ, JobID: ns + "/" + name, Time: now, Actor: actor, Level: domain.LevelInfo, Schedule: ch}, nil
}

// Tick decides the event of a tick step on the schedule's record now: it
// must be the record's next tick (a record that moved on, was paused or
// deleted since the step was decided refuses it: ErrConflict). outcome,
// job, previous and reason say what became of it (a StepMiss is missed).
func Tick(cur *domain.ScheduleRecord, step TickStep, outcome, job, previous, reason, actor string, now time.Time) (*domain.Event, error) {
	if cur == nil || cur.Deleted {
		return nil, fmt.Errorf("tick of a deleted schedule: %w", ErrConflict)
	}
	first := step.Tick
	if step.Kind == StepMiss {
		first, outcome = step.First, domain.TickMissed
	}
	if cur.Paused || !cur.Next.Equal(first) {
		return nil, fmt.Errorf("schedule %s/%s: tick %s is not its next (%s, paused %v): %w",
			cur.Namespace, cur.Name, first.Format(time.RFC3339Nano), cur.Next.Format(time.RFC3339Nano), cur.Paused, ErrConflict)
	}
	tick := &domain.ScheduleTick{At: step.Tick, Outcome: outcome}
	switch outcome {
	case domain.TickFired, domain.TickCancelledPrevious:
		tick.Job, tick.Previous = job, previous
	case domain.TickSkippedOverlap:
		tick.Previous = previous
	case domain.TickMissed:
		tick.First, tick.Count = step.First, step.Count
	case domain.TickRefused:
		tick.Error = reason
	default:
		return nil, fmt.Errorf("tick outcome %q", outcome)
	}
	level := domain.LevelInfo
	if outcome == domain.TickMissed || outcome == domain.TickRefused {
		level = domain.LevelWarning
	}
	return &domain.Event{Type: domain.EvScheduleTick, JobID: cur.Namespace + "/" + cur.Name, Time: now, Actor: actor, Level: level,
		Schedule: &domain.ScheduleChange{Namespace: cur.Namespace, Name: cur.Name, Tick: tick, Next: step.Next}}, nil
}

func unknownSchedule(ns, name string) error {
	return fmt.Errorf("schedule %s (namespace %s): %w", name, ns, ErrNotFound)
}

func sameTiming(a, b domain.ScheduleSpec) bool {
	return a.Cron == b.Cron && a.Every == b.Every && a.Timezone == b.Timezone
}

func sameSpec(a, b domain.ScheduleSpec) bool {
	return sameTiming(a, b) && a.Overlap == b.Overlap && a.Misfire == b.Misfire && a.Jitter == b.Jitter && bytes.Equal(a.Job, b.Job)
}
