package domain

import "time"

// Schedules (cron and intervals) are event-sourced like the registry: the
// events of one schedule go to its subject of the event log, and their
// fold is its record in SchedulesBucket.
//
//	jetflow.reg.schedule.<namespace>.<name>   a schedule's changes and ticks
const (
	EvScheduleCreated = "schedule.created" // a new schedule (or one deleted before, created again)
	EvScheduleChanged = "schedule.changed" // its spec replaced
	EvSchedulePaused  = "schedule.paused"  // no tick fires until it is resumed
	EvScheduleResumed = "schedule.resumed" // ticks fire again, from the resume on
	EvScheduleDeleted = "schedule.deleted" // gone: its record stays as a tombstone
	EvScheduleTick    = "schedule.tick"    // one tick (or a run of missed ones) and what became of it
)

// Overlap policies: what a tick does while the job of the previous fired
// tick has not ended.
const (
	OverlapSkip   = "skip"   // the tick fires no job (skipped-overlap)
	OverlapAllow  = "allow"  // the tick fires its job all the same
	OverlapCancel = "cancel" // the previous job is cancelled, then the tick fires
)

// Misfire policies: what the scheduler does with ticks it finds too far
// in the past (the engines were down, or the schedule's leader was).
const (
	MisfireSkip = "skip" // fire none of them; go on from now
	MisfireOnce = "once" // fire one job, for the newest of them
	MisfireAll  = "all"  // fire each of them (the newest 100 at most)
)

// Outcomes of a tick.
const (
	TickFired             = "fired"              // its job was submitted
	TickSkippedOverlap    = "skipped-overlap"    // the previous job still ran (overlap skip): no job
	TickCancelledPrevious = "cancelled-previous" // the previous job was cancelled, then its job submitted (overlap cancel)
	TickMissed            = "missed"             // ticks from First to At passed while nothing fired them: no job
	TickRefused           = "refused"            // its job was refused (its type or schema changed since): no job
)

// ScheduleSpec is what a schedule fires and when: a cron expression (in
// Timezone) or an interval, the job to submit at each tick, and the
// policies. Every option is resolved when the schedule is created or
// changed, so that folding the log never needs today's defaults.
type ScheduleSpec struct {
	Cron     string        `msgpack:"cron,omitempty"`
	Every    time.Duration `msgpack:"every,omitempty"` // ticks at the multiples of Every since the Unix epoch
	Timezone string        `msgpack:"tz,omitempty"`    // IANA name of the cron's zone; "" is UTC
	// Job is the body of the job to submit (JSON, as POST /api/v1/jobs
	// takes it), compacted; its namespace is the schedule's.
	Job     []byte        `msgpack:"job"`
	Overlap string        `msgpack:"overlap"`
	Misfire string        `msgpack:"misfire"`
	Jitter  time.Duration `msgpack:"jitter,omitempty"` // a tick fires within [tick, tick+Jitter)
}

// ScheduleTick is one tick and what became of it. A run of missed ticks is
// one: First is the oldest, At the newest, Count how many.
type ScheduleTick struct {
	At       time.Time `msgpack:"at"`
	Outcome  string    `msgpack:"outcome"`
	Job      string    `msgpack:"job,omitempty"`  // fired, cancelled-previous: the tick's job
	Previous string    `msgpack:"prev,omitempty"` // skipped-overlap, cancelled-previous: the previous tick's job
	First    time.Time `msgpack:"first,omitempty"`
	Count    int64     `msgpack:"count,omitempty"`
	Error    string    `msgpack:"error,omitempty"` // refused: why
	// Recorded is when the tick was recorded (its event's time): in a
	// record only, set by the fold.
	Recorded time.Time `msgpack:"rec,omitempty"`
}

// ScheduleChange is what a schedule event carries: the schedule it is
// about; the spec (created, changed); the tick (schedule.tick); and the
// next tick due after it (zero when none is: paused, deleted).
type ScheduleChange struct {
	Namespace string        `msgpack:"ns"`
	Name      string        `msgpack:"name"`
	Spec      *ScheduleSpec `msgpack:"spec,omitempty"`
	Tick      *ScheduleTick `msgpack:"tick,omitempty"`
	Next      time.Time     `msgpack:"next,omitempty"`
}

// ScheduleRecord is a schedule: the fold of its events, in
// SchedulesBucket. A deleted schedule keeps its record (Deleted) until it
// is created again.
type ScheduleRecord struct {
	Namespace string       `msgpack:"ns"`
	Name      string       `msgpack:"name"`
	Spec      ScheduleSpec `msgpack:"spec"`
	Paused    bool         `msgpack:"paused,omitempty"`
	Deleted   bool         `msgpack:"deleted,omitempty"`
	// Next is the next tick not recorded yet (zero while paused or
	// deleted): the scheduler fires it, and only it, next.
	Next time.Time `msgpack:"next,omitempty"`
	// LastJob is the job of the last tick that fired one: the job an
	// overlap policy looks at.
	LastJob string `msgpack:"last_job,omitempty"`
	// LastRuns are the newest ticks, newest first (at most
	// MaxScheduleRuns).
	LastRuns []ScheduleTick `msgpack:"runs,omitempty"`
	// Counts of the ticks by outcome, since the schedule was created.
	Fired     int64     `msgpack:"fired,omitempty"`
	Skipped   int64     `msgpack:"skipped,omitempty"`
	Cancelled int64     `msgpack:"cancelled,omitempty"`
	Missed    int64     `msgpack:"missed,omitempty"`
	Refused   int64     `msgpack:"refused,omitempty"`
	CreatedAt time.Time `msgpack:"created_at"`
	CreatedBy string    `msgpack:"created_by,omitempty"`
	UpdatedAt time.Time `msgpack:"updated_at"`
	UpdatedBy string    `msgpack:"updated_by,omitempty"`
	Seq       uint64    `msgpack:"seq"`                          // the last event folded
	LastHash  []byte    `msgpack:"last_hash,omitempty" json:"-"` // its chain hash
}

// MaxScheduleRuns is how many of its newest ticks a schedule's record
// keeps.
const MaxScheduleRuns = 20

// ValidScheduleName reports whether s can name a schedule: 1-64 of
// [A-Za-z0-9_-], one subject token and KV key as it is.
func ValidScheduleName(s string) bool { return ValidQueue(s) }
