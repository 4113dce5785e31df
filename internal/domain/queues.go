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
// queued after admission, claimed or running) at once: in all, and per
// user. Zero is no limit.
type QueueLimits struct {
	MaxRunning        int `msgpack:"max_running,omitempty" json:"max_running"`
	MaxRunningPerUser int `msgpack:"max_running_per_user,omitempty" json:"max_running_per_user"`
}

// Limited reports whether any limit is set: jobs of the queue then go
// through admission (pending) before they are queued.
func (l QueueLimits) Limited() bool { return l.MaxRunning > 0 || l.MaxRunningPerUser > 0 }

// QueueChange is what a queue.set event carries.
type QueueChange struct {
	Name   string      `msgpack:"name"`
	Limits QueueLimits `msgpack:"limits"`
}

// Hold is why a pending job waits: the limit that held it when admission
// last looked at it (job.pending).
type Hold struct {
	Limit string    `msgpack:"limit" json:"limit"` // LimitQueue or LimitUser
	Max   int       `msgpack:"max" json:"max"`     // the limit's value then
	Since time.Time `msgpack:"since" json:"since"`
	// Steps are the steps a workflow's step waits for (LimitDeps).
	Steps []string `msgpack:"steps,omitempty" json:"steps,omitempty"`
}

// The limits a Hold names.
const (
	LimitQueue = "max_running"
	LimitUser  = "max_running_per_user"
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
	LimitsAt  time.Time   `msgpack:"limits_at,omitempty" json:"limits_updated_at,omitempty"`
	LimitsBy  string      `msgpack:"limits_by,omitempty" json:"limits_updated_by,omitempty"`
}
