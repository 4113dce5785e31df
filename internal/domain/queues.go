package domain

import "time"

// Queue limits (quotas) are event-sourced like the registry: a queue.set
// event on the queue's subject, folded into its record in QueuesBucket.
//
//	jetflow.reg.queue.<queue>   a queue's limits
const EvQueueSet = "queue.set"

// Events of admission (a job in a queue with limits).
const (
	EvPending  = "job.pending"  // scheduled -> pending (due, waiting for a slot); on a pending job: why it waits
	EvAdmitted = "job.admitted" // pending -> queued: a slot was free
)

// QueueLimits are the most jobs of a queue that may hold a slot (be
// queued after admission, claimed or running) at once: in all, per user
// and per key (a job's concurrency key); and the most that may be
// admitted (start) in any period of RatePeriod, in all or per rate key.
// Zero is no limit.
type QueueLimits struct {
	MaxRunning        int `msgpack:"max_running,omitempty" json:"max_running"`
	MaxRunningPerUser int `msgpack:"max_running_per_user,omitempty" json:"max_running_per_user"`
	// MaxRunningPerKey bounds the slots of the jobs of one concurrency key
	// (Spec.ConcurrencyKey, within its namespace); 1: one at a time, in
	// submit order. Jobs without a key are not limited by it.
	MaxRunningPerKey int `msgpack:"max_running_per_key,omitempty" json:"max_running_per_key"`
	// RateLimit admissions at most in any window of RatePeriod: of the
	// whole queue when RateKey is empty, else of each rate key (RateKey
	// says where a job's comes from: RateKeyUser, RateKeyConcurrency, or a
	// payload field "payload.<name>[.<name>...]").
	RateLimit  int           `msgpack:"rate_limit,omitempty" json:"rate_limit"`
	RatePeriod time.Duration `msgpack:"rate_period,omitempty" json:"rate_period"`
	RateKey    string        `msgpack:"rate_key,omitempty" json:"rate_key"`
	// Priorities sends every job of the queue through admission, which
	// orders the pending ones by priority; MaxQueued bounds the admitted
	// jobs that wait for a worker (the rest wait in pending, in order).
	// Priorities with MaxQueued 0 bounds them at DefaultMaxQueued.
	Priorities bool `msgpack:"priorities,omitempty" json:"priorities"`
	MaxQueued  int  `msgpack:"max_queued,omitempty" json:"max_queued"`
}

// DefaultMaxQueued is the bound of a queue with priorities and no
// max_queued of its own on the admitted jobs waiting for a worker.
const DefaultMaxQueued = 100

// Limited reports whether any limit is set: jobs of the queue then go
// through admission (pending) before they are queued.
func (l QueueLimits) Limited() bool {
	return l.MaxRunning > 0 || l.MaxRunningPerUser > 0 || l.MaxRunningPerKey > 0 || l.RateLimit > 0 ||
		l.Priorities || l.MaxQueued > 0
}

// Window is the most admitted jobs of the queue that may wait for a worker
// (queued) at once; 0: no bound.
func (l QueueLimits) Window() int {
	if l.MaxQueued > 0 || !l.Priorities {
		return l.MaxQueued
	}
	return DefaultMaxQueued
}

// Where a rate key comes from (QueueLimits.RateKey), besides a payload
// field (RateKeyPayload followed by its path).
const (
	RateKeyUser        = "user"
	RateKeyConcurrency = "concurrency_key"
	RateKeyPayload     = "payload."
)

// QueueChange is what a queue.set event carries.
type QueueChange struct {
	Name   string      `msgpack:"name"`
	Limits QueueLimits `msgpack:"limits"`
}

// Hold is why a pending job waits: the limit that held it when admission
// last looked at it (job.pending).
type Hold struct {
	Limit string    `msgpack:"limit" json:"limit"` // LimitQueue, LimitUser, LimitKey or LimitRate
	Max   int       `msgpack:"max" json:"max"`     // the limit's value then
	Since time.Time `msgpack:"since" json:"since"`
	// Steps are the steps a workflow's step waits for (LimitDeps).
	Steps []string `msgpack:"steps,omitempty" json:"steps,omitempty"`
	// Key is the concurrency key (LimitKey) or rate key (LimitRate, when
	// per key) that holds it, without its namespace.
	Key string `msgpack:"key,omitempty" json:"key,omitempty"`
	// Until is when a rate limit lets it start at the earliest (LimitRate).
	Until time.Time `msgpack:"until,omitempty" json:"until,omitempty"`
}

// The limits a Hold names.
const (
	LimitQueue = "max_running"
	LimitUser  = "max_running_per_user"
	LimitKey   = "max_running_per_key"
	LimitRate  = "rate_limit"
	// LimitQueued: the queue's admitted jobs waiting for a worker are at
	// its window (Window): pending jobs are admitted by priority as they
	// start.
	LimitQueued = "max_queued"
	// LimitRunAt: not a limit but a time: a scheduled job waits for its
	// run_at (a delay, a retry's backoff, a retry-later); Until says when.
	// Only in views (projections.View), never in a job.pending.
	LimitRunAt = "run_at"
)

// QueueRecord is a queue's entry in QueuesBucket.
type QueueRecord struct {
	Name      string    `msgpack:"name" json:"name"`
	CreatedAt time.Time `msgpack:"created_at" json:"created_at"`
	Paused    bool      `msgpack:"paused" json:"paused"`
	// Limits are the queue's quotas, the fold of its last queue.set
	// (LimitsSeq; 0: never set).
	Limits    QueueLimits `msgpack:"limits" json:"limits"`
	LimitsSeq uint64      `msgpack:"limits_seq,omitempty" json:"-"`
	// LimitsHash is the chain hash of the queue.set at LimitsSeq.
	LimitsHash []byte    `msgpack:"limits_hash,omitempty" json:"-"`
	LimitsAt   time.Time `msgpack:"limits_at,omitempty" json:"limits_updated_at,omitempty"`
	LimitsBy   string    `msgpack:"limits_by,omitempty" json:"limits_updated_by,omitempty"`
}
