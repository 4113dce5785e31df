package domain

import (
	"time"
)

// State is where a job is in its lifecycle. The transitions between states
// are decided in package commands (commands.Lifecycle).
type State string

const (
	StateNew       State = "" // before the first event
	StatePending   State = "pending"
	StateScheduled State = "scheduled"
	StateQueued    State = "queued"
	StateClaimed   State = "claimed"
	StateRunning   State = "running"
	StateWaiting   State = "waiting"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
)

// States lists every state a job can be in, in lifecycle order.
var States = []State{StatePending, StateScheduled, StateQueued, StateClaimed, StateRunning,
	StateWaiting, StateSucceeded, StateFailed, StateCancelled}

// Terminal reports whether nothing can leave s.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}

// Valid reports whether s is one of States.
func (s State) Valid() bool {
	for _, x := range States {
		if s == x {
			return true
		}
	}
	return false
}

// Event types. The event log is the source of truth: every state change is
// exactly one of these, appended to the job's subject.
const (
	EvSubmitted           = "job.submitted"             // new -> pending|scheduled|queued
	EvDue                 = "job.due"                   // scheduled -> queued (EvPending in a queue with limits)
	EvClaimed             = "job.claimed"               // queued -> claimed (HTTP workers)
	EvStarted             = "job.started"               // queued|claimed -> running
	EvSucceeded           = "job.succeeded"             // running|waiting -> succeeded
	EvFailed              = "job.failed"                // -> failed
	EvCancelled           = "job.cancelled"             // -> cancelled
	EvRetryScheduled      = "job.retry_scheduled"       // running -> scheduled|queued, uses a retry
	EvRetryLater          = "job.retry_later"           // running -> scheduled|queued, no retry used
	EvRequeued            = "job.requeued"              // running|claimed -> queued (worker shut down)
	EvLeaseExpiredRequeue = "job.lease_expired_requeue" // running|claimed -> queued
	EvLeaseExpired        = "job.lease_expired"         // running|claimed -> failed
	EvWaiting             = "job.waiting"               // running -> waiting (deferred to children)
	EvStalled             = "job.stalled"               // waiting -> failed: no piece finished for stall_seconds
	EvProgress            = "job.progress"              // no state change
	EvCustom              = "job.event"                 // no state change: a handler's own event
	EvFanIn               = "job.fanin"                 // no state change: a waiting parent's counts so far
	EvPurged              = "job.purged"                // no state change: a terminal job's record and files deleted (retention)
	EvReprioritized       = "job.reprioritized"         // no state change: a job not started yet given another priority
)

// Piece events, on a parent's piece subject (PieceSubject): what became of
// each of its children or batches, and its plan. They are facts about
// pieces, not transitions of the parent, so they are not sequence-checked;
// the fan-in counter takes the first event of each piece number and
// ignores repeats.
const (
	PcPlanned   = "piece.planned" // the parent is waiting for Fields["total"] pieces
	PcSucceeded = "piece.succeeded"
	PcFailed    = "piece.failed"
	PcCancelled = "piece.cancelled"
	// PcLinked: a job was submitted with this parent (not as a piece of
	// its fan-out): Fields["child"] names it. Its end is a piece event
	// with piece 0 and the same child, like every child's.
	PcLinked = "piece.linked"
	// PcMaking: a coordinator's attempt is about to make its fan-out's
	// children, Plan.Total of them (Plan.Kind children), before it waits
	// for them. Written before the first child, so that the cascade of a
	// coordinator that ends before it waits (its worker died between)
	// finds the children it made.
	PcMaking = "piece.making"
)

// Fan-out kinds and failure policies.
const (
	FanoutChildren = "children"
	FanoutBatches  = "batches"

	PolicyAll      = "all"       // the parent fails once all pieces finished and any did not succeed
	PolicyFailFast = "fail_fast" // the first failed piece fails the parent and cancels the rest
	PolicyTolerate = "tolerate"  // the parent fails once more than MaxFailureRatio of pieces failed
)

// FanoutPlan is what a waiting parent waits for.
type FanoutPlan struct {
	Kind            string        `msgpack:"kind" json:"kind"`
	Total           int           `msgpack:"total" json:"total"`
	Policy          string        `msgpack:"policy" json:"policy"`
	MaxFailureRatio float64       `msgpack:"max_failure_ratio,omitempty" json:"max_failure_ratio,omitempty"`
	BatchType       string        `msgpack:"batch_type,omitempty" json:"batch_type,omitempty"`
	BatchQueue      string        `msgpack:"batch_queue,omitempty" json:"batch_queue,omitempty"`
	StallTimeout    time.Duration `msgpack:"stall,omitempty" json:"-"`
}

// FanoutCounts is how the pieces of a fan-out ended so far.
type FanoutCounts struct {
	Succeeded int          `msgpack:"succeeded" json:"succeeded"`
	Failed    int          `msgpack:"failed" json:"failed"`
	Cancelled int          `msgpack:"cancelled" json:"cancelled"`
	Errors    []ErrorCount `msgpack:"errors,omitempty" json:"errors,omitempty"` // the most common failure messages
	// UpTo is the last piece event (stream sequence) these counts include:
	// recounting the parent's piece events up to it gives the same counts.
	UpTo uint64 `msgpack:"upto,omitempty" json:"-"`
}

// Finished is the number of pieces that ended.
func (c FanoutCounts) Finished() int { return c.Succeeded + c.Failed + c.Cancelled }

// ErrorCount is one failure message and how many pieces failed with it.
type ErrorCount struct {
	Message string `msgpack:"message" json:"message"`
	Count   int    `msgpack:"count" json:"count"`
}

// Fanout is a parent's plan and counts in its record.
type Fanout struct {
	Plan   FanoutPlan   `msgpack:"plan"`
	Counts FanoutCounts `msgpack:"counts"`
}

// BatchItem is a batch of a fan-out on its queue's stream: a piece of work
// with no job record of its own (BatchSubject).
type BatchItem struct {
	Parent     string        `msgpack:"parent"`
	Piece      int           `msgpack:"piece"` // 1-based
	Type       string        `msgpack:"type"`
	Queue      string        `msgpack:"queue"`
	Payload    []byte        `msgpack:"payload,omitempty"` // JSON
	MaxRetries int           `msgpack:"max_retries"`
	Backoff    time.Duration `msgpack:"backoff"`
	Timeout    time.Duration `msgpack:"timeout"`
	// Trace is the W3C traceparent its attempts continue: the span of the
	// fan-out that made it (docs/tracing.md). Empty: none.
	Trace string `msgpack:"trace,omitempty"`
}

// EnvelopeVersion is the version of the Event envelope written by this code.
const EnvelopeVersion = 1

// Spec is what a job was submitted with. It never changes after job.submitted.
// Every option is resolved at submit time (defaults filled in), so that the
// fold of the log never needs to know today's defaults.
type Spec struct {
	Namespace string   `msgpack:"ns"`
	Type      string   `msgpack:"type"`
	Queue     string   `msgpack:"queue"`
	Payload   []byte   `msgpack:"payload,omitempty"` // JSON
	Tags      []string `msgpack:"tags,omitempty"`
	Key       string   `msgpack:"key,omitempty"` // idempotency key
	Parent    string   `msgpack:"parent,omitempty"`
	RetryOf   string   `msgpack:"retry_of,omitempty"`
	// FailedPieces: this retry of RetryOf, a fan-out, runs only the pieces
	// that did not succeed there; the others are carried over as succeeded
	// (docs/http.md, POST /jobs/{id}/retry).
	FailedPieces     bool          `msgpack:"failed_pieces,omitempty"`
	Priority         int           `msgpack:"prio,omitempty"`
	MaxRetries       int           `msgpack:"max_retries"`
	Backoff          time.Duration `msgpack:"backoff"`     // base delay of retry 1
	BackoffCap       time.Duration `msgpack:"backoff_cap"` // upper bound of a retry delay
	Jitter           float64       `msgpack:"jitter"`      // +- fraction of a retry delay
	RetryOn          []string      `msgpack:"retry_on,omitempty"`
	NoRetryOn        []string      `msgpack:"no_retry_on,omitempty"`
	Timeout          time.Duration `msgpack:"timeout"` // execution timeout of one attempt
	MaxLeaseRequeues int           `msgpack:"max_lease_requeues"`
	RunAt            time.Time     `msgpack:"run_at,omitempty"`
	Piece            int           `msgpack:"piece,omitempty"` // a child's number among its parent's pieces (1-based)
	QueueTimeout     time.Duration `msgpack:"queue_timeout,omitempty"`
	Files            []FileRef     `msgpack:"files,omitempty"` // input files, stored before the job was submitted
	// User is who the job runs for: its slots count against the user's
	// limit in a queue with limits (QueueLimits). Empty: no one in
	// particular (all such jobs are one user).
	User string `msgpack:"user,omitempty"`
	// Workflow is the graph of a workflow's job (Type WorkflowType).
	Workflow *Workflow `msgpack:"workflow,omitempty"`
	// Step is what a step of a workflow knows of it: its name and its
	// dependencies (Parent is the workflow, Piece its number).
	Step *StepSpec `msgpack:"step,omitempty"`
	// ConcurrencyKey groups jobs whose slots count together in a queue
	// with max_running_per_key (within the namespace); empty: none.
	ConcurrencyKey string `msgpack:"ckey,omitempty"`
	// TraceParent and TraceState are the W3C trace context the job was
	// submitted in (its submit's span, or the caller's context): every
	// attempt's span is its child (docs/tracing.md). Empty: none.
	TraceParent string `msgpack:"traceparent,omitempty"`
	TraceState  string `msgpack:"tracestate,omitempty"`
	// Unique, if set, makes the job the only one of its key while it
	// holds it (docs/unique.md).
	Unique *Unique `msgpack:"unique,omitempty"`
}

// JobError is why an attempt or a job failed.
type JobError struct {
	Code    string `msgpack:"code,omitempty" json:"code,omitempty"`
	Message string `msgpack:"message" json:"message"`
	Stack   string `msgpack:"stack,omitempty" json:"stack,omitempty"`
}

// Progress is the last progress a handler reported.
type Progress struct {
	Current int64  `msgpack:"current" json:"current"`
	Total   int64  `msgpack:"total" json:"total"`
	Message string `msgpack:"message,omitempty" json:"message,omitempty"`
}

// Job is the state of one job: the fold of its events (projections.Fold),
// stored in JobsBucket under its id. Seq is the stream sequence of the last
// event folded into it; a record is only ever replaced by one with a higher
// Seq.
type Job struct {
	ID            string `msgpack:"id"`
	Spec          Spec   `msgpack:"spec"`
	State         State  `msgpack:"state"`
	Attempt       int    `msgpack:"attempt"`        // attempts started
	Retries       int    `msgpack:"retries"`        // retries used (retry_later does not use one)
	LeaseRequeues int    `msgpack:"lease_requeues"` // times a lost lease put it back
	Worker        string `msgpack:"worker,omitempty"`
	LeaseItem     uint64 `msgpack:"lease_item,omitempty"` // work item (queue stream seq) that holds the lease
	LeaseAck      string `msgpack:"lease_ack,omitempty"`  // the item's ack subject, for workers outside the process that fetched it
	Result        []byte `msgpack:"result,omitempty"`     // JSON
	// ResultRef names a result too large for the record
	// (commands.MaxInlineResult): its JSON is an object of the files
	// bucket, written before the event that names it. Result is then empty.
	ResultRef  *FileRef  `msgpack:"result_ref,omitempty"`
	Error      *JobError `msgpack:"error,omitempty"` // last attempt's error
	Progress   *Progress `msgpack:"progress,omitempty"`
	Fanout     *Fanout   `msgpack:"fanout,omitempty"` // a coordinator's plan and counts
	CreatedAt  time.Time `msgpack:"created_at"`
	RunAt      time.Time `msgpack:"run_at,omitempty"` // when a scheduled job is due
	QueuedAt   time.Time `msgpack:"queued_at,omitempty"`
	StartedAt  time.Time `msgpack:"started_at,omitempty"`
	FinishedAt time.Time `msgpack:"finished_at,omitempty"`
	UpdatedAt  time.Time `msgpack:"updated_at"`
	Seq        uint64    `msgpack:"seq"`    // last folded event
	Events     int       `msgpack:"events"` // events folded
	// LastHash is the chain hash of the last folded event (Event.Hash):
	// the next event's Prev, known to its writer without a read.
	LastHash []byte `msgpack:"last_hash,omitempty"`
	// PurgedAt is when retention purged the job (job.purged). Only a fold
	// of the log has it: a purged job has no record.
	PurgedAt time.Time `msgpack:"purged_at,omitempty"`
	// Hold is why a pending job waits (job.pending); nil once it left
	// pending.
	Hold *Hold `msgpack:"hold,omitempty"`

	// ClaimedAt is when a worker outside the process last claimed it
	// (job.claimed): a claimed job's deadline counts from it.
	ClaimedAt time.Time `msgpack:"claimed_at,omitempty"`

	// AttemptTrace is the W3C traceparent of the span of the attempt that
	// last claimed the job (job.started, job.claimed: Event.Trace), and
	// PrevAttemptTrace that of the attempt before it: a retry's span links
	// to it (docs/tracing.md). Empty: no span was recorded.
	AttemptTrace     string `msgpack:"attempt_trace,omitempty"`
	PrevAttemptTrace string `msgpack:"prev_attempt_trace,omitempty"`

	// Duplicates counts the submits of its unique key it answered
	// (job.duplicate).
	Duplicates int `msgpack:"dups,omitempty"`
}

// Event is the envelope of every entry in the events stream. The common part
// (type, job, time, attempt, actor, level, message, fields) is the same for
// all events; the typed part below it is set by the events that need it.
type Event struct {
	V       int            `msgpack:"v"`
	Type    string         `msgpack:"type"`
	JobID   string         `msgpack:"job"`
	Time    time.Time      `msgpack:"time"`
	Attempt int            `msgpack:"attempt,omitempty"`
	Actor   string         `msgpack:"actor,omitempty"`
	Level   string         `msgpack:"level,omitempty"` // info|warning|error
	Name    string         `msgpack:"name,omitempty"`  // job.event: the handler's own name for it
	Message string         `msgpack:"msg,omitempty"`
	Fields  map[string]any `msgpack:"fields,omitempty"`
	From    State          `msgpack:"from,omitempty"`
	To      State          `msgpack:"to,omitempty"` // empty: no state change

	Spec   *Spec  `msgpack:"spec,omitempty"`   // job.submitted
	Result []byte `msgpack:"result,omitempty"` // job.succeeded (JSON)
	// ResultRef: job.succeeded of a result kept in the files bucket
	// (Job.ResultRef), Result empty.
	ResultRef *FileRef      `msgpack:"result_ref,omitempty"`
	Error     *JobError     `msgpack:"error,omitempty"`     // failures and retries
	RunAt     time.Time     `msgpack:"run_at,omitempty"`    // -> scheduled
	Lease     uint64        `msgpack:"lease,omitempty"`     // job.started, job.claimed: the work item
	LeaseAck  string        `msgpack:"lease_ack,omitempty"` // job.started, job.claimed by remote workers: its ack subject
	Progress  *Progress     `msgpack:"progress,omitempty"`  // job.progress
	Plan      *FanoutPlan   `msgpack:"plan,omitempty"`      // job.waiting
	Counts    *FanoutCounts `msgpack:"counts,omitempty"`    // job.fanin, and a parent's outcome
	Piece     int           `msgpack:"piece,omitempty"`     // piece events: the piece number
	Trace     string        `msgpack:"trace,omitempty"`     // job.started, job.claimed: the W3C traceparent of the attempt's span

	TypeDef   *TypeDefinition  `msgpack:"typedef,omitempty"` // type.registered, type.deleted
	Namespace *NamespaceChange `msgpack:"ns,omitempty"`      // namespace.set
	Token     *TokenChange     `msgpack:"token,omitempty"`   // token.created, token.revoked
	Queue     *QueueChange     `msgpack:"queue,omitempty"`   // queue.set
	Hold      *Hold            `msgpack:"hold,omitempty"`    // job.pending, job.submitted of a job that waits for something
	// Steps are the specs of a workflow's steps, on its job.submitted, in
	// its graph's order: what its steps are created from, again after a
	// crash, and again when it is resumed. Not folded into the record.
	Steps    []Spec          `msgpack:"steps,omitempty"`
	Schedule *ScheduleChange `msgpack:"sched,omitempty"` // schedule.*
	// RateKey is the rate key (within the namespace: "ns/key") a job was
	// admitted under in a queue with a rate limit per key (job.admitted):
	// a new admitter counts the admissions of a period from the log.
	RateKey string `msgpack:"rate_key,omitempty"`
	// Priority is the job's new priority (job.reprioritized); a pointer,
	// since 0 is a priority.
	Priority *int `msgpack:"priority,omitempty"`

	// By is the access token (token:<name>/<id>) on whose behalf the actor
	// wrote it, when the actor is not the token itself (a worker writing
	// through a worker token).
	By string `msgpack:"by,omitempty"`

	Checkpoint *Checkpoint `msgpack:"ckpt,omitempty"` // audit.checkpoint

	// Prev is the chain hash (Hash) of the event before it on its subject
	// (empty: the first, or a piece event, which is not chained). It is
	// part of the bytes Hash is taken over (docs/audit.md).
	Prev []byte `msgpack:"prev,omitempty"`
	// Hash is sha256(Prev || the event's bytes as stored): set when read or
	// appended, and carried by the stored message in its Jetflow-Hash
	// header, never in the bytes themselves.
	Hash []byte `msgpack:"-"`

	Seq     uint64 `msgpack:"-"` // stream sequence, set when read or appended
	Subject string `msgpack:"-"` // set when read
}

// Levels of events.
const (
	LevelInfo    = "info"
	LevelWarning = "warning"
	LevelError   = "error"
)

// WorkItem is a runnable job on its queue's stream: the job record at the KV
// revision Rev, so that a worker can claim it without reading first. It is a
// hint: if the job moved on since, the claim conflicts and the worker reads
// the current state.
type WorkItem struct {
	Rev uint64 `msgpack:"rev"`
	Job Job    `msgpack:"job"`
}
