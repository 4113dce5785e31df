package projections

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// FoldSchedule folds a schedule event into the schedule's record (nil
// before its creation). Events at or below the record's Seq are ignored.
func FoldSchedule(r *domain.ScheduleRecord, ev *domain.Event) (*domain.ScheduleRecord, error) {
	c := ev.Schedule
	if c == nil {
		return nil, fmt.Errorf("%s event %d without a schedule", ev.Type, ev.Seq)
	}
	if r != nil && ev.Seq != 0 && ev.Seq <= r.Seq {
		return r, nil
	}
	exists := r != nil && !r.Deleted
	if ev.Type != domain.EvScheduleCreated && !exists {
		return nil, fmt.Errorf("schedule %s/%s: %s before it was created", c.Namespace, c.Name, ev.Type)
	}
	var n domain.ScheduleRecord
	if r != nil {
		n = *r
	}
	switch ev.Type {
	case domain.EvScheduleCreated:
		if exists {
			return nil, fmt.Errorf("schedule %s/%s: created twice", c.Namespace, c.Name)
		}
		if c.Spec == nil {
			return nil, fmt.Errorf("schedule %s/%s: created without a spec", c.Namespace, c.Name)
		}
		// A schedule deleted before starts again: nothing of before counts.
		n = domain.ScheduleRecord{Namespace: c.Namespace, Name: c.Name, Spec: *c.Spec, Next: c.Next.UTC(),
			CreatedAt: ev.Time.UTC(), CreatedBy: ev.Actor}
	case domain.EvScheduleChanged:
		if c.Spec == nil {
			return nil, fmt.Errorf("schedule %s/%s: changed without a spec", c.Namespace, c.Name)
		}
		n.Spec, n.Next = *c.Spec, c.Next.UTC()
	case domain.EvSchedulePaused:
		n.Paused, n.Next = true, time.Time{}
	case domain.EvScheduleResumed:
		n.Paused, n.Next = false, c.Next.UTC()
	case domain.EvScheduleDeleted:
		n.Deleted, n.Paused, n.Next = true, false, time.Time{}
	case domain.EvScheduleTick:
		if c.Tick == nil {
			return nil, fmt.Errorf("schedule %s/%s: tick without a tick", c.Namespace, c.Name)
		}
		t := *c.Tick
		t.Recorded = ev.Time.UTC()
		n.Next = c.Next.UTC()
		n.LastRuns = append([]domain.ScheduleTick{t}, r.LastRuns...)
		if len(n.LastRuns) > domain.MaxScheduleRuns {
			n.LastRuns = n.LastRuns[:domain.MaxScheduleRuns]
		}
		switch t.Outcome {
		case domain.TickFired:
			n.Fired++
			n.LastJob = t.Job
		case domain.TickCancelledPrevious:
			n.Fired++
			n.Cancelled++
			n.LastJob = t.Job
		case domain.TickSkippedOverlap:
			n.Skipped++
		case domain.TickMissed:
			n.Missed += t.Count
		case domain.TickRefused:
			n.Refused++
		}
	default:
		return nil, fmt.Errorf("schedule %s/%s: %s is not a schedule event", c.Namespace, c.Name, ev.Type)
	}
	if ev.Type != domain.EvScheduleTick {
		n.UpdatedAt, n.UpdatedBy = ev.Time.UTC(), ev.Actor
	}
	n.Seq, n.LastHash = ev.Seq, ev.Hash
	return &n, nil
}

// ScheduleView is a schedule as clients see it: its spec under the names
// of the body that creates it, its next tick and its newest ticks.
type ScheduleView struct {
	Name      string             `json:"name"`
	Namespace string             `json:"namespace"`
	Cron      string             `json:"cron,omitempty"`
	Every     *commands.Duration `json:"every,omitempty"` // seconds
	Timezone  string             `json:"timezone,omitempty"`
	Job       json.RawMessage    `json:"job"`
	Overlap   string             `json:"overlap"`
	Misfire   string             `json:"misfire"`
	Jitter    *commands.Duration `json:"jitter,omitempty"` // seconds
	Paused    bool               `json:"paused"`
	Deleted   bool               `json:"deleted,omitempty"`
	// NextRunAt is the next tick (nil while paused); it fires up to
	// jitter later. Upcoming are the ticks after it.
	NextRunAt *time.Time    `json:"next_run_at"`
	Upcoming  []time.Time   `json:"upcoming,omitempty"`
	LastRuns  []scheduleRun `json:"last_runs"`
	Counts    tickCounts    `json:"counts"`
	CreatedAt time.Time     `json:"created_at"`
	CreatedBy string        `json:"created_by,omitempty"`
	UpdatedAt time.Time     `json:"updated_at"`
	UpdatedBy string        `json:"updated_by,omitempty"`
}

// scheduleRun is one tick of a schedule as clients see it.
type scheduleRun struct {
	At         time.Time  `json:"at"` // the tick (of a run of missed ones, the newest)
	Outcome    string     `json:"outcome"`
	JobID      string     `json:"job_id,omitempty"`
	PreviousID string     `json:"previous_job_id,omitempty"`
	First      *time.Time `json:"first,omitempty"` // missed: the oldest
	Count      int64      `json:"count,omitempty"` // missed: how many
	Error      string     `json:"error,omitempty"` // refused: why
	RecordedAt time.Time  `json:"recorded_at"`
}

// tickCounts are a schedule's ticks by outcome.
type tickCounts struct {
	Fired     int64 `json:"fired"`
	Skipped   int64 `json:"skipped_overlap"`
	Cancelled int64 `json:"cancelled_previous"`
	Missed    int64 `json:"missed"`
	Refused   int64 `json:"refused"`
}

// upcomingTicks is how many ticks after the next one a view shows.
const upcomingTicks = 4

// ViewSchedule renders a schedule's record.
func ViewSchedule(r *domain.ScheduleRecord) *ScheduleView {
	s := r.Spec
	v := &ScheduleView{Name: r.Name, Namespace: r.Namespace, Cron: s.Cron, Timezone: s.Timezone,
		Job: json.RawMessage(s.Job), Overlap: s.Overlap, Misfire: s.Misfire, Paused: r.Paused, Deleted: r.Deleted,
		LastRuns:  make([]scheduleRun, len(r.LastRuns)),
		Counts:    tickCounts{Fired: r.Fired, Skipped: r.Skipped, Cancelled: r.Cancelled, Missed: r.Missed, Refused: r.Refused},
		CreatedAt: r.CreatedAt, CreatedBy: r.CreatedBy, UpdatedAt: r.UpdatedAt, UpdatedBy: r.UpdatedBy}
	if len(v.Job) == 0 {
		v.Job = json.RawMessage("null")
	}
	if s.Cron == "" {
		d := commands.Duration(s.Every)
		v.Every = &d
	}
	if s.Jitter > 0 {
		d := commands.Duration(s.Jitter)
		v.Jitter = &d
	}
	if !r.Next.IsZero() {
		next := r.Next
		v.NextRunAt = &next
		if tt, err := commands.ParseTimetable(s); err == nil {
			for t := tt.Next(next); !t.IsZero() && len(v.Upcoming) < upcomingTicks; t = tt.Next(t) {
				v.Upcoming = append(v.Upcoming, t)
			}
		}
	}
	for i, t := range r.LastRuns {
		run := scheduleRun{At: t.At, Outcome: t.Outcome, JobID: t.Job, PreviousID: t.Previous, Count: t.Count,
			Error: t.Error, RecordedAt: t.Recorded}
		if !t.First.IsZero() {
			first := t.First
			run.First = &first
		}
		v.LastRuns[i] = run
	}
	return v
}
