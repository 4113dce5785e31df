package jetflow

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// Schedules submit a job at each tick of a cron expression or an interval,
// fired by the leading engine exactly once per tick (docs/schedules.md).

// Overlap policies: what a tick does while the previous tick's job has
// not ended.
const (
	OverlapSkip   = domain.OverlapSkip   // fire no job (the tick is skipped-overlap)
	OverlapAllow  = domain.OverlapAllow  // fire all the same
	OverlapCancel = domain.OverlapCancel // cancel the previous job, then fire
)

// Misfire policies: what becomes of ticks found too late (the engines
// were down).
const (
	MisfireSkip = domain.MisfireSkip // fire none of them
	MisfireOnce = domain.MisfireOnce // fire one, for the newest
	MisfireAll  = domain.MisfireAll  // fire each (the newest 100 at most)
)

// DefaultMisfireGrace is how late a tick may fire and still count as on
// time (EngineConfig.MisfireGrace).
const DefaultMisfireGrace = commands.DefaultMisfireGrace

// Tick outcomes (ScheduleRun.Outcome).
const (
	TickFired             = domain.TickFired
	TickSkippedOverlap    = domain.TickSkippedOverlap
	TickCancelledPrevious = domain.TickCancelledPrevious
	TickMissed            = domain.TickMissed
	TickRefused           = domain.TickRefused
)

// ScheduleRequest creates a schedule: Cron (5 fields, or @hourly, @daily,
// @every 90s, ...) in Timezone (IANA; "" is UTC), or Every (at least a
// second, counted from the Unix epoch); the Job each tick submits (no
// idempotency key, run_at, parent or files: each tick's job has an id of
// its own); the Overlap and Misfire policies ("": skip and once); Jitter,
// a delay of each tick within [0, Jitter), the same on every engine.
type ScheduleRequest struct {
	Name      string
	Namespace string // "": default
	Cron      string
	Every     time.Duration
	Timezone  string
	Job       SubmitRequest
	Overlap   string
	Misfire   string
	Jitter    time.Duration
}

func (r *ScheduleRequest) command() *commands.ScheduleRequest {
	c := &commands.ScheduleRequest{Namespace: r.Namespace, Name: r.Name, Cron: r.Cron, Timezone: r.Timezone,
		Job: r.Job.command(), Overlap: r.Overlap, Misfire: r.Misfire, Jitter: nonZero(r.Jitter)}
	if r.Every != 0 {
		c.Every = duration(&r.Every)
	}
	return c
}

func nonZero(d time.Duration) *commands.Duration {
	if d == 0 {
		return nil
	}
	return duration(&d)
}

// Validate checks a request as its creation would, but for the job's
// type registration and schema (the engine's): an *InputError naming the
// field.
func (r *ScheduleRequest) Validate() error {
	if len(r.Job.Uploads) > 0 {
		return publicErr(&commands.InputError{Field: "job", Reason: "a schedule's jobs have no files"})
	}
	_, _, err := r.command().Spec(time.Now())
	return publicErr(err)
}

// ScheduleUpdate changes a schedule: each field set replaces the
// schedule's (Job: the whole job). Cron and Every replace each other.
type ScheduleUpdate struct {
	Cron     *string
	Every    *time.Duration
	Timezone *string
	Job      *SubmitRequest
	Overlap  *string
	Misfire  *string
	Jitter   *time.Duration
}

func (u *ScheduleUpdate) command(ns, name string) *commands.SchedulePatch {
	p := &commands.SchedulePatch{Namespace: ns, Name: name, Cron: u.Cron, Every: duration(u.Every),
		Timezone: u.Timezone, Overlap: u.Overlap, Misfire: u.Misfire, Jitter: duration(u.Jitter)}
	if u.Job != nil {
		p.Job = u.Job.command()
	}
	return p
}

// ScheduleInfo is a schedule as clients see it (the JSON of the HTTP API
// and the CLI: durations in seconds).
type ScheduleInfo struct {
	Name      string
	Namespace string
	Cron      string
	Every     time.Duration
	Timezone  string
	Job       json.RawMessage // the body of the job each tick submits
	Overlap   string
	Misfire   string
	Jitter    time.Duration
	Paused    bool
	// NextRunAt is the next tick (nil while paused); it fires up to Jitter
	// later. Upcoming are the ticks after it.
	NextRunAt *time.Time
	Upcoming  []time.Time
	LastRuns  []ScheduleRun // newest first, at most 20
	Counts    TickCounts
	CreatedAt time.Time
	CreatedBy string
	UpdatedAt time.Time
	UpdatedBy string
	view      *projections.ScheduleView
}

// MarshalJSON writes the schedule as the HTTP API does.
func (s *ScheduleInfo) MarshalJSON() ([]byte, error) { return json.Marshal(s.view) }

// ScheduleRun is one tick of a schedule and what became of it: fired (its
// job), skipped-overlap (the previous job was still running),
// cancelled-previous (that job was cancelled, then this one fired),
// missed (Count ticks from First to At, none fired) or refused (Error).
type ScheduleRun struct {
	At         time.Time  `json:"at"`
	Outcome    string     `json:"outcome"`
	JobID      string     `json:"job_id,omitempty"`
	PreviousID string     `json:"previous_job_id,omitempty"`
	First      *time.Time `json:"first,omitempty"`
	Count      int64      `json:"count,omitempty"`
	Error      string     `json:"error,omitempty"`
	RecordedAt time.Time  `json:"recorded_at"`
}

// TickCounts are a schedule's ticks by outcome since its creation.
type TickCounts struct {
	Fired     int64 `json:"fired"`
	Skipped   int64 `json:"skipped_overlap"`
	Cancelled int64 `json:"cancelled_previous"`
	Missed    int64 `json:"missed"`
	Refused   int64 `json:"refused"`
}

func scheduleInfo(v *projections.ScheduleView) *ScheduleInfo {
	if v == nil {
		return nil
	}
	s := &ScheduleInfo{Name: v.Name, Namespace: v.Namespace, Cron: v.Cron, Timezone: v.Timezone, Job: v.Job,
		Overlap: v.Overlap, Misfire: v.Misfire, Paused: v.Paused, NextRunAt: v.NextRunAt, Upcoming: v.Upcoming,
		LastRuns: make([]ScheduleRun, len(v.LastRuns)), Counts: TickCounts(v.Counts),
		CreatedAt: v.CreatedAt, CreatedBy: v.CreatedBy, UpdatedAt: v.UpdatedAt, UpdatedBy: v.UpdatedBy, view: v}
	if v.Every != nil {
		s.Every = time.Duration(*v.Every)
	}
	if v.Jitter != nil {
		s.Jitter = time.Duration(*v.Jitter)
	}
	for i, r := range v.LastRuns {
		s.LastRuns[i] = ScheduleRun(r)
	}
	return s
}

// scheduleBackend is what a Client's backend does with schedules.
type scheduleBackend interface {
	createSchedule(ctx context.Context, req *commands.ScheduleRequest) (*projections.ScheduleView, bool, error)
	schedules(ctx context.Context, ns string) ([]*projections.ScheduleView, error)
	schedule(ctx context.Context, verb, ns, name string) (*projections.ScheduleView, error)
	updateSchedule(ctx context.Context, p *commands.SchedulePatch) (*projections.ScheduleView, error)
}

func (c *Client) scheduleBackend() scheduleBackend {
	if b, ok := c.b.(scheduleBackend); ok {
		return b
	}
	return nil
}

var errNoScheduleBackend = errors.New("jetflow: this client's backend has no schedules")

// CreateSchedule creates a schedule. created is false when one of that
// name existed with the very same spec, which is returned as it is; one
// with another spec is an error matching ErrConflict. The job is checked
// as a submit would check it (its type, its payload against the type's
// schema) and nothing is written if it is refused.
func (c *Client) CreateSchedule(ctx context.Context, req ScheduleRequest) (info *ScheduleInfo, created bool, err error) {
	b := c.scheduleBackend()
	if b == nil {
		return nil, false, errNoScheduleBackend
	}
	if len(req.Job.Uploads) > 0 {
		return nil, false, publicErr(&commands.InputError{Field: "job", Reason: "a schedule's jobs have no files"})
	}
	v, created, err := b.createSchedule(ctx, req.command())
	if err != nil {
		return nil, false, publicErr(err)
	}
	return scheduleInfo(v), created, nil
}

// Schedules lists the schedules of a namespace ("": of every one the
// client may see), by namespace and name.
func (c *Client) Schedules(ctx context.Context, namespace string) ([]*ScheduleInfo, error) {
	b := c.scheduleBackend()
	if b == nil {
		return nil, errNoScheduleBackend
	}
	return allSchedules(b.schedules(ctx, namespace))
}

// Schedule returns a schedule of a namespace ("": default); one that does
// not exist matches ErrNotFound.
func (c *Client) Schedule(ctx context.Context, namespace, name string) (*ScheduleInfo, error) {
	return c.scheduleVerb(ctx, "get", namespace, name)
}

// UpdateSchedule changes a schedule as u says. A change of its timing
// moves its next tick to the first of the new timing from now; other
// changes keep it.
func (c *Client) UpdateSchedule(ctx context.Context, namespace, name string, u ScheduleUpdate) (*ScheduleInfo, error) {
	b := c.scheduleBackend()
	if b == nil {
		return nil, errNoScheduleBackend
	}
	if u.Job != nil && len(u.Job.Uploads) > 0 {
		return nil, publicErr(&commands.InputError{Field: "job", Reason: "a schedule's jobs have no files"})
	}
	v, err := b.updateSchedule(ctx, u.command(namespace, name))
	if err != nil {
		return nil, publicErr(err)
	}
	return scheduleInfo(v), nil
}

// PauseSchedule pauses a schedule: no tick fires until it is resumed (the
// ticks meanwhile are not missed: they are not there).
func (c *Client) PauseSchedule(ctx context.Context, namespace, name string) (*ScheduleInfo, error) {
	return c.scheduleVerb(ctx, "pause", namespace, name)
}

// ResumeSchedule resumes a paused schedule; its ticks count from now.
func (c *Client) ResumeSchedule(ctx context.Context, namespace, name string) (*ScheduleInfo, error) {
	return c.scheduleVerb(ctx, "resume", namespace, name)
}

// DeleteSchedule deletes a schedule; the jobs it fired are left as they
// are. Its name may be created again.
func (c *Client) DeleteSchedule(ctx context.Context, namespace, name string) (*ScheduleInfo, error) {
	return c.scheduleVerb(ctx, "delete", namespace, name)
}

func (c *Client) scheduleVerb(ctx context.Context, verb, namespace, name string) (*ScheduleInfo, error) {
	b := c.scheduleBackend()
	if b == nil {
		return nil, errNoScheduleBackend
	}
	v, err := b.schedule(ctx, verb, namespace, name)
	if err != nil {
		return nil, publicErr(err)
	}
	return scheduleInfo(v), nil
}

// allSchedules converts listed schedule views.
func allSchedules(vs []*projections.ScheduleView, err error) ([]*ScheduleInfo, error) {
	return all(vs, err, scheduleInfo)
}

// --- the direct backend: the engine's store ---

func orDefaultNS(ns string) string {
	if ns == "" {
		return domain.DefaultNS
	}
	return ns
}

func (d direct) createSchedule(ctx context.Context, req *commands.ScheduleRequest) (*projections.ScheduleView, bool, error) {
	rec, created, err := d.store.Schedules.Create(ctx, req)
	if err != nil {
		return nil, false, err
	}
	return projections.ViewSchedule(rec), created, nil
}

func (d direct) schedules(ctx context.Context, ns string) ([]*projections.ScheduleView, error) {
	recs, err := d.store.Schedules.List(ctx, ns)
	return views(recs, err, projections.ViewSchedule)
}

func (d direct) schedule(ctx context.Context, verb, ns, name string) (*projections.ScheduleView, error) {
	sch := d.store.Schedules
	ns = orDefaultNS(ns)
	var rec *domain.ScheduleRecord
	var err error
	switch verb {
	case "get":
		rec, err = sch.Get(ctx, ns, name)
	case "pause":
		rec, err = sch.Pause(ctx, ns, name)
	case "resume":
		rec, err = sch.Resume(ctx, ns, name)
	case "delete":
		rec, err = sch.Delete(ctx, ns, name)
	}
	if err != nil {
		return nil, err
	}
	return projections.ViewSchedule(rec), nil
}

func (d direct) updateSchedule(ctx context.Context, p *commands.SchedulePatch) (*projections.ScheduleView, error) {
	rec, err := d.store.Schedules.Update(ctx, orDefaultNS(p.Namespace), p.Name, p)
	if err != nil {
		return nil, err
	}
	return projections.ViewSchedule(rec), nil
}

// --- the command backend: jetflow.cmd.schedule.<verb> with a token ---

// scheduleRef names a schedule (or, without a name, a namespace's) in a
// command.
type scheduleRef struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
}

func (c command) createSchedule(ctx context.Context, req *commands.ScheduleRequest) (*projections.ScheduleView, bool, error) {
	out, err := c.do(ctx, "schedule.create", req)
	if err != nil {
		return nil, false, err
	}
	return out.Schedule, out.Created != nil && *out.Created, nil
}

func (c command) schedules(ctx context.Context, ns string) ([]*projections.ScheduleView, error) {
	out, err := c.do(ctx, "schedule.list", scheduleRef{Namespace: ns})
	if err != nil {
		return nil, err
	}
	if out.Schedules == nil {
		return []*projections.ScheduleView{}, nil
	}
	return out.Schedules, nil
}

func (c command) schedule(ctx context.Context, verb, ns, name string) (*projections.ScheduleView, error) {
	out, err := c.do(ctx, "schedule."+verb, scheduleRef{Namespace: ns, Name: name})
	if err != nil {
		return nil, err
	}
	return out.Schedule, nil
}

func (c command) updateSchedule(ctx context.Context, p *commands.SchedulePatch) (*projections.ScheduleView, error) {
	out, err := c.do(ctx, "schedule.update", p)
	if err != nil {
		return nil, err
	}
	return out.Schedule, nil
}
