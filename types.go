package jetflow

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// The types a user of jetflow touches. They are jetflow's own, with
// standard field types; the engine's records and the wire's views are
// converted into them here, at the edge. Their JSON is the HTTP API's and
// the CLI's (`--json`), field for field.

// State is where a job is in its lifecycle.
type State string

// The states of a job. Succeeded, Failed and Cancelled are terminal.
const (
	Pending   State = "pending"
	Scheduled State = "scheduled"
	Queued    State = "queued"
	Claimed   State = "claimed"
	Running   State = "running"
	Waiting   State = "waiting"
	Succeeded State = "succeeded"
	Failed    State = "failed"
	Cancelled State = "cancelled"
)

// Terminal reports whether nothing can leave s.
func (s State) Terminal() bool { return domain.State(s).Terminal() }

// JobError is why an attempt or a job failed: the error's code (WithCode,
// or one of jetflow's: TIMEOUT, LEASE_EXPIRED, ...), its message and, for a
// panic, the stack.
type JobError struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message"`
	Stack   string `json:"stack,omitempty"`
}

// Progress is a job's last reported progress; Percent is set when Total is.
type Progress struct {
	Current int64    `json:"current"`
	Total   int64    `json:"total"`
	Message string   `json:"message,omitempty"`
	Percent *float64 `json:"percent"`
}

// FanoutInfo is a coordinator's pieces (children or batches): how many, and
// how they ended so far.
type FanoutInfo struct {
	Kind            string       `json:"kind"` // "children" or "batches"
	Total           int          `json:"total"`
	Succeeded       int          `json:"succeeded"`
	Failed          int          `json:"failed"`
	Cancelled       int          `json:"cancelled"`
	Finished        int          `json:"finished"`
	Percent         float64      `json:"percent"`
	Policy          string       `json:"policy"`
	MaxFailureRatio float64      `json:"max_failure_ratio,omitempty"`
	BatchType       string       `json:"batch_type,omitempty"`
	Errors          []ErrorCount `json:"errors,omitempty"`
}

// ErrorCount is one failure message and how many pieces failed with it.
type ErrorCount struct {
	Message string `json:"message"`
	Count   int    `json:"count"`
}

// HoldInfo is why a pending job waits: the limit of its queue that held it
// when admission last looked (max_running, max_running_per_user,
// max_running_per_key or rate_limit), its value, the key it holds (for a
// key's limit), since when, when a rate limit lets it start, and that said
// for people.
type HoldInfo struct {
	Reason  string     `json:"reason"` // quota, key or rate
	Limit   string     `json:"limit"`
	Max     int        `json:"max"`
	Key     string     `json:"key,omitempty"`
	Since   time.Time  `json:"since"`
	Until   *time.Time `json:"until,omitempty"`
	Message string     `json:"message"`
}

// UniqueInfo is what makes a job unique (UniqueKey, UniqueFields): its
// key, the payload fields it was derived from (none: given), its window
// in seconds (0: none) and when it ends, its state scope, and whether it
// held its key when it was read.
type UniqueInfo struct {
	Key        string      `json:"key"`
	Fields     []string    `json:"fields,omitempty"`
	ForSeconds float64     `json:"for_seconds"`
	While      UniqueScope `json:"while"`
	Until      *time.Time  `json:"until,omitempty"`
	Holds      bool        `json:"holds"`
}

// FileInfo is one of a job's files: its name in the job's directory, its
// size and its digest ("SHA-256=<base64url>"). JobInfo.Files lists a job's
// input files.
type FileInfo struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// JobInfo is a job as clients see it (the JSON object of the CLI and the
// HTTP API). Optional times are nil until they happen.
type JobInfo struct {
	ID        string          `json:"id"`
	Namespace string          `json:"namespace"`
	Type      string          `json:"type"`
	Queue     string          `json:"queue"`
	State     State           `json:"state"`
	Payload   json.RawMessage `json:"payload"`
	Result    json.RawMessage `json:"result"`
	// ResultRef names a result too large for the job's record (over 256
	// KiB), kept in the files bucket. Get and Wait read it into Result;
	// List leaves Result null.
	ResultRef        *FileInfo   `json:"result_ref,omitempty"`
	Error            *JobError   `json:"error"`
	Attempts         int         `json:"attempts"`
	MaxRetries       int         `json:"max_retries"`
	Retries          int         `json:"retries"`
	LeaseRequeues    int         `json:"lease_requeues"`
	MaxLeaseRequeues int         `json:"max_lease_requeues"`
	TimeoutSeconds   float64     `json:"timeout_seconds"`
	BackoffSeconds   float64     `json:"backoff_seconds"`
	Tags             []string    `json:"tags"`
	Files            []FileInfo  `json:"files,omitempty"`
	IdempotencyKey   string      `json:"idempotency_key,omitempty"`
	ParentID         string      `json:"parent_id,omitempty"`
	RetryOf          string      `json:"retry_of,omitempty"`
	FailedPieces     bool        `json:"failed_pieces,omitempty"` // a retry of RetryOf's failed pieces only
	Priority         int         `json:"priority"`
	Worker           string      `json:"worker,omitempty"`
	Progress         *Progress   `json:"progress,omitempty"`
	Fanout           *FanoutInfo `json:"fanout,omitempty"`
	QueuePosition    *int        `json:"queue_position,omitempty"`
	User             string      `json:"user,omitempty"`
	ConcurrencyKey   string      `json:"concurrency_key,omitempty"`
	Hold             *HoldInfo   `json:"hold,omitempty"`
	PendingPosition  *int        `json:"pending_position,omitempty"`
	Unique           *UniqueInfo `json:"unique,omitempty"`
	Duplicates       int         `json:"duplicates,omitempty"` // submits of its unique key it answered
	CreatedAt        time.Time   `json:"created_at"`
	RunAt            *time.Time  `json:"run_at"`
	QueuedAt         *time.Time  `json:"queued_at"`
	StartedAt        *time.Time  `json:"started_at"`
	Deadline         *time.Time  `json:"deadline,omitempty"` // a claimed or running job: when its attempt's execution timeout ends
	FinishedAt       *time.Time  `json:"finished_at"`
	UpdatedAt        time.Time   `json:"updated_at"`
	DurationSeconds  *float64    `json:"duration_seconds"`
	Seq              uint64      `json:"seq"`
	Events           int         `json:"events"`
	// TraceParent and TraceState are the job's W3C trace context (that of
	// its submit), or, while an attempt holds it, that attempt's span's
	// (docs/tracing.md). Empty: none.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// EventInfo is one event of a job's history.
type EventInfo struct {
	Seq     uint64          `json:"seq"`
	Type    string          `json:"type"`
	Name    string          `json:"name,omitempty"`
	JobID   string          `json:"job_id"`
	Time    time.Time       `json:"time"`
	Attempt int             `json:"attempt"`
	Actor   string          `json:"actor,omitempty"`
	Token   string          `json:"token,omitempty"` // the token the actor wrote it for (token:<name>/<id>), when the actor is not the token
	Level   string          `json:"level,omitempty"`
	Message string          `json:"message,omitempty"`
	Fields  map[string]any  `json:"fields,omitempty"`
	From    State           `json:"from,omitempty"`
	To      State           `json:"to,omitempty"` // empty: no state change
	Error   *JobError       `json:"error,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	// ResultRef: a job.succeeded whose result is kept in the files bucket
	// (JobInfo.ResultRef).
	ResultRef *FileInfo       `json:"result_ref,omitempty"`
	RunAt     *time.Time      `json:"run_at,omitempty"`
	Progress  *ProgressReport `json:"progress,omitempty"`
	Counts    *PieceCounts    `json:"counts,omitempty"` // job.fanin and a fan-out's outcome: its pieces so far
	// The job's namespace, queue and type: set in a Tail of many jobs'
	// events.
	Namespace string `json:"namespace,omitempty"`
	Queue     string `json:"queue,omitempty"`
	JobType   string `json:"job_type,omitempty"`
}

// ProgressReport is the progress a job.progress event reports.
type ProgressReport struct {
	Current int64  `json:"current"`
	Total   int64  `json:"total"`
	Message string `json:"message,omitempty"`
}

// PieceCounts is how a fan-out's pieces ended so far.
type PieceCounts struct {
	Succeeded int          `json:"succeeded"`
	Failed    int          `json:"failed"`
	Cancelled int          `json:"cancelled"`
	Errors    []ErrorCount `json:"errors,omitempty"`
}

// ListFilter selects jobs; empty fields match everything.
type ListFilter struct {
	State     State  `json:"state,omitempty"`
	Queue     string `json:"queue,omitempty"`
	Type      string `json:"type,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Parent    string `json:"parent,omitempty"`
	Limit     int    `json:"limit,omitempty"` // 0: all
	// Before is a job's Cursor: only the jobs after it in List's order
	// (older ones), for the next page of a list.
	Before string `json:"before,omitempty"`

	// Search: IDPrefix, the beginning of the id; Tag, one of the job's
	// tags; ErrorCode, the last error's code; Error, text of the last
	// error's code or message (any case); Payload, conditions on payload
	// fields, "customer=42" or "customer.id=42" (at most 4);
	// FinishedAfter and FinishedBefore, when the job ended.
	IDPrefix       string    `json:"id,omitempty"`
	Tag            string    `json:"tag,omitempty"`
	ErrorCode      string    `json:"error_code,omitempty"`
	Error          string    `json:"error,omitempty"`
	Payload        []string  `json:"payload,omitempty"`
	FinishedAfter  time.Time `json:"finished_after,omitzero"`
	FinishedBefore time.Time `json:"finished_before,omitzero"`
}

// QueueLimits are a queue's quotas: the most jobs running at once in all
// (MaxRunning), per user (MaxRunningPerUser) and per concurrency key
// (MaxRunningPerKey; 1: one at a time per key, in submit order); and the
// most jobs started (admitted) in any period of RatePeriod (RateLimit),
// of the whole queue, or of each rate key when RateKey says where a job's
// comes from ("user", "concurrency_key" or a payload field
// "payload.<name>[.<name>...]"). 0 is no limit. Priorities sends every
// job of the queue through admission, which starts the pending ones by
// priority (every 10th start goes to the job pending longest), keeping at
// most MaxQueued admitted jobs waiting for a worker (0: 100). docs/quotas.md.
type QueueLimits struct {
	MaxRunning        int           `json:"max_running"`
	MaxRunningPerUser int           `json:"max_running_per_user"`
	MaxRunningPerKey  int           `json:"max_running_per_key"`
	RateLimit         int           `json:"rate_limit"`
	RatePeriod        time.Duration `json:"rate_period"` // JSON: seconds
	RateKey           string        `json:"rate_key,omitempty"`
	Priorities        bool          `json:"priorities,omitempty"`
	MaxQueued         int           `json:"max_queued,omitempty"`
}

// MarshalJSON writes the rate period in seconds, as the HTTP API does.
func (l QueueLimits) MarshalJSON() ([]byte, error) {
	type plain QueueLimits
	return json.Marshal(struct {
		plain
		RatePeriod float64 `json:"rate_period"`
	}{plain(l), l.RatePeriod.Seconds()})
}

// UnmarshalJSON reads the rate period in seconds.
func (l *QueueLimits) UnmarshalJSON(b []byte) error {
	type plain QueueLimits
	var w struct {
		plain
		RatePeriod float64 `json:"rate_period"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*l = QueueLimits(w.plain)
	l.RatePeriod = time.Duration(w.RatePeriod * float64(time.Second))
	return nil
}

func (l QueueLimits) domain() domain.QueueLimits {
	return domain.QueueLimits{MaxRunning: l.MaxRunning, MaxRunningPerUser: l.MaxRunningPerUser, MaxRunningPerKey: l.MaxRunningPerKey,
		RateLimit: l.RateLimit, RatePeriod: l.RatePeriod, RateKey: l.RateKey, Priorities: l.Priorities, MaxQueued: l.MaxQueued}
}

func queueLimits(l domain.QueueLimits) QueueLimits {
	return QueueLimits{MaxRunning: l.MaxRunning, MaxRunningPerUser: l.MaxRunningPerUser, MaxRunningPerKey: l.MaxRunningPerKey,
		RateLimit: l.RateLimit, RatePeriod: l.RatePeriod, RateKey: l.RateKey, Priorities: l.Priorities, MaxQueued: l.MaxQueued}
}

// QueueInfo is a queue: its settings and what it holds.
type QueueInfo struct {
	Name      string    `json:"name"`
	Paused    bool      `json:"paused"`
	Depth     uint64    `json:"depth"`   // runnable jobs waiting for a worker
	Held      int       `json:"held"`    // work items held by workers (claimed or running jobs)
	Delayed   uint64    `json:"delayed"` // scheduled jobs and retries in backoff
	CreatedAt time.Time `json:"created_at"`
	// Jobs counts the queue's jobs by state, when an index knows them (the
	// HTTP API's).
	Jobs              map[State]int `json:"jobs,omitempty"`
	Running           int           `json:"running"`
	MaxRunning        int           `json:"max_running"`
	MaxRunningPerUser int           `json:"max_running_per_user"`
	MaxRunningPerKey  int           `json:"max_running_per_key"`
	RateLimit         int           `json:"rate_limit"`
	RatePeriodSeconds float64       `json:"rate_period"`
	RateKey           string        `json:"rate_key,omitempty"`
	Priorities        bool          `json:"priorities,omitempty"`
	MaxQueued         int           `json:"max_queued,omitempty"` // the window of a queue with priorities or max_queued
	// Slots are, for a queue with limits, what its admitter counts (nil
	// when none answered).
	Slots *QueueSlots `json:"slots,omitempty"`
}

// QueueSlots are the jobs of a queue with limits that hold a slot (queued
// after admission, claimed or running) and those that wait for one, in all,
// by user ("namespace/user") and by concurrency key ("namespace/key").
type QueueSlots struct {
	Running int                  `json:"running"`
	Pending int                  `json:"pending"`
	Users   map[string]SlotCount `json:"users,omitempty"`
	Keys    map[string]SlotCount `json:"keys,omitempty"`
}

// SlotCount is one user's share of a queue's slots.
type SlotCount struct {
	Running int `json:"running"`
	Pending int `json:"pending"`
}

// WorkerInfo is a worker of the registry (SDK or HTTP) with its heartbeat.
type WorkerInfo struct {
	ID          string   `json:"id"`
	Name        string   `json:"name"`
	Kind        string   `json:"kind"` // "sdk", "shell" (jetflow worker --exec) or "http"
	Types       []string `json:"types"`
	BatchTypes  []string `json:"batch_types"` // the batch types an HTTP worker runs
	Queues      []string `json:"queues"`      // empty: every queue
	Concurrency int      `json:"concurrency"`
	// QueueConcurrency is a Go worker's handlers at once on each of its
	// queues (Concurrency is their sum).
	QueueConcurrency map[string]int `json:"queue_concurrency,omitempty"`
	RegisteredAt     time.Time      `json:"registered_at"`
	LastHeartbeat    time.Time      `json:"last_heartbeat"`
	Claims           []string       `json:"claims"` // the jobs it holds as of LastHeartbeat
	Namespace        string         `json:"namespace,omitempty"`
	Token            string         `json:"token,omitempty"` // the token that registered it, with access control
	// Live is false once the worker missed its heartbeats for a lease.
	Live                     bool    `json:"live"`
	LeaseSeconds             float64 `json:"lease_seconds"`
	HeartbeatIntervalSeconds float64 `json:"heartbeat_interval_seconds"`
}

// VerifyDiff is one job (or registry record, or queue) whose projection
// differs from its rebuild from the log.
type VerifyDiff struct {
	ID     string   `json:"id"`
	Reason string   `json:"reason"`
	Fields []string `json:"fields,omitempty"`
}

// VerifyReport is what Verify found: jobs rebuilt from the log, records
// read, and every difference.
type VerifyReport struct {
	Jobs         int                   `json:"jobs"`     // jobs in the log
	Records      int                   `json:"records"`  // records in the bucket
	LastSeq      uint64                `json:"last_seq"` // events up to here were rebuilt
	Registry     int                   `json:"registry"` // types, namespaces, tokens and queue limits compared
	Purged       int                   `json:"purged"`   // jobs of the log purged by retention
	Slots        map[string]QueueSlots `json:"slots,omitempty"`
	SlotsChecked bool                  `json:"slots_checked"` // the live admitter's counts were compared
	Schedules    int                   `json:"schedules"`     // schedules compared
	// RateAdmissions is how many admissions of queues with a rate limit
	// were checked against it (no period with more than the limit).
	RateAdmissions int `json:"rate_admissions_checked"`
	// UniqueJobs is how many unique jobs were checked against the jobs of
	// their key before them (none held the key when it was created).
	UniqueJobs int          `json:"unique_jobs_checked"`
	Diffs      []VerifyDiff `json:"diffs"`
}

// TypeInfo is a registered job type: scope:category:name, its payload's
// JSON Schema (null: any), and whether it is soft-deleted.
type TypeInfo struct {
	FullName     string          `json:"full_name"`
	Scope        string          `json:"scope"`
	Category     string          `json:"category"`
	Name         string          `json:"name"`
	Schema       json.RawMessage `json:"schema"`
	Description  string          `json:"description,omitempty"`
	Deleted      bool            `json:"deleted"`
	RegisteredAt time.Time       `json:"registered_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
}

// TypeName is a registered type's full name: Scope:Category:Name, the
// scope a namespace, "@global" or "@internal".
type TypeName struct {
	Scope, Category, Name string
}

func (n TypeName) String() string { return n.Scope + ":" + n.Category + ":" + n.Name }

// NamespaceSettings are a namespace's settings.
type NamespaceSettings struct {
	// StrictTypes accepts only registered types in the namespace.
	StrictTypes bool
	// Retention is how long the namespace's terminal jobs are kept before
	// they are purged; zero: the engine's default.
	Retention time.Duration
}

// Role is what a token may do.
type Role string

// Roles of tokens, and the namespace of a token valid in every one.
const (
	RoleAdmin     Role = "admin"
	RoleProducer  Role = "producer"
	RoleWorker    Role = "worker"
	RoleReader    Role = "reader"
	AllNamespaces      = commands.AllNamespaces
)

// TokenSpec is what a token is created with.
type TokenSpec struct {
	Name      string        `json:"name"`
	Namespace string        `json:"namespace"` // AllNamespaces for every one; required
	Role      Role          `json:"role"`
	TTL       time.Duration `json:"ttl,omitempty"` // 0: never expires
}

// TokenInfo is a token as an admin sees it (never its hash); Token, the
// secret, is set only in what CreateToken returns.
type TokenInfo struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Namespace string     `json:"namespace"`
	Role      Role       `json:"role"`
	CreatedAt time.Time  `json:"created_at"`
	CreatedBy string     `json:"created_by,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Revoked   bool       `json:"revoked"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	RevokedBy string     `json:"revoked_by,omitempty"`
	Token     string     `json:"token,omitempty"`
}

// Problem is an error as the HTTP API and the command protocol answer it
// (RFC 9457): a stable Type slug (schema-violation, schema-conflict,
// unknown-type, ...), its HTTP Status, the Detail, the Field refused, and
// for a payload refused by its type's schema, each Violation. It matches
// (errors.Is) the sentinel errors of its slug: ErrNotFound, ErrInvalidInput,
// ErrInvalidTransition, ...
type Problem struct {
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Status     int         `json:"status"`
	Detail     string      `json:"detail,omitempty"`
	Instance   string      `json:"instance,omitempty"`
	JobID      string      `json:"job_id,omitempty"`
	WorkerID   string      `json:"worker_id,omitempty"`
	Field      string      `json:"field,omitempty"`
	State      string      `json:"state,omitempty"`
	PurgedAt   *time.Time  `json:"purged_at,omitempty"`
	Violations []Violation `json:"violations,omitempty"`
}

// Violation is one way a payload breaks its type's schema: a JSON pointer
// into the payload and the message.
type Violation struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

func (p *Problem) Error() string { return p.Type + ": " + p.Detail }

// Is matches the sentinel errors of the problem's slug.
func (p *Problem) Is(target error) bool { return p.wire().Is(target) }

func (p *Problem) wire() *engine.Problem {
	w := &engine.Problem{Type: p.Type, Title: p.Title, Status: p.Status, Detail: p.Detail, Instance: p.Instance,
		JobID: p.JobID, WorkerID: p.WorkerID, Field: p.Field, State: p.State, PurgedAt: p.PurgedAt}
	for _, v := range p.Violations {
		w.Violations = append(w.Violations, engine.Violation{Pointer: v.Pointer, Message: v.Message})
	}
	return w
}

// TransitionError is a refused move of a job (errors.As): which job, which
// event, from which state to which. It matches ErrInvalidTransition, and
// ErrTerminal when the job is terminal.
type TransitionError struct {
	JobID string
	Event string
	From  State
	To    State
	err   error
}

func (e *TransitionError) Error() string { return e.err.Error() }
func (e *TransitionError) Unwrap() error { return e.err }

// InputError is a refused input (errors.As): which field, and why. It
// matches ErrInvalidInput.
type InputError struct {
	Field  string
	Reason string
	Value  string // the refused value as given, when Reason does not say it
	err    error
}

func (e *InputError) Error() string { return e.err.Error() }
func (e *InputError) Unwrap() error { return e.err }

// publicErr is err with the engine's typed errors in it given as jetflow's
// own (TransitionError, InputError, Problem), keeping its message and what
// it matches.
func publicErr(err error) error {
	if err == nil {
		return nil
	}
	var te *commands.TransitionError
	if errors.As(err, &te) {
		return &TransitionError{JobID: te.JobID, Event: te.Event, From: State(te.From), To: State(te.To), err: err}
	}
	var ie *commands.InputError
	if errors.As(err, &ie) {
		return &InputError{Field: ie.Field, Reason: ie.Reason, Value: ie.Value, err: err}
	}
	var p *engine.Problem
	if errors.As(err, &p) {
		return problemOf(p)
	}
	return err
}

func problemOf(p *engine.Problem) *Problem {
	out := &Problem{Type: p.Type, Title: p.Title, Status: p.Status, Detail: p.Detail, Instance: p.Instance,
		JobID: p.JobID, WorkerID: p.WorkerID, Field: p.Field, State: p.State, PurgedAt: p.PurgedAt}
	for _, v := range p.Violations {
		out.Violations = append(out.Violations, Violation{Pointer: v.Pointer, Message: v.Message})
	}
	return out
}

// --- conversions from the engine's records and views ---

func jobError(e *domain.JobError) *JobError {
	if e == nil {
		return nil
	}
	return &JobError{Code: e.Code, Message: e.Message, Stack: e.Stack}
}

func errorCounts(es []domain.ErrorCount) []ErrorCount {
	if es == nil {
		return nil
	}
	out := make([]ErrorCount, len(es))
	for i, e := range es {
		out[i] = ErrorCount{Message: e.Message, Count: e.Count}
	}
	return out
}

// jobInfo converts the wire view of a job.
func jobInfo(v *projections.JobView) *JobInfo {
	if v == nil {
		return nil
	}
	j := &JobInfo{ID: v.ID, Namespace: v.Namespace, Type: v.Type, Queue: v.Queue, State: State(v.State),
		Payload: v.Payload, Result: v.Result, Error: jobError(v.Error), Attempts: v.Attempts,
		MaxRetries: v.MaxRetries, Retries: v.Retries, LeaseRequeues: v.LeaseRequeues,
		MaxLeaseRequeues: v.MaxLeaseRequeues, TimeoutSeconds: v.TimeoutSeconds, BackoffSeconds: v.BackoffSeconds,
		Tags: v.Tags, IdempotencyKey: v.IdempotencyKey, ParentID: v.ParentID, RetryOf: v.RetryOf, FailedPieces: v.FailedPieces,
		Priority: v.Priority, Worker: v.Worker, QueuePosition: v.QueuePosition, User: v.User, ConcurrencyKey: v.ConcurrencyKey,
		PendingPosition: v.PendingPosition, CreatedAt: v.CreatedAt, RunAt: v.RunAt, QueuedAt: v.QueuedAt,
		StartedAt: v.StartedAt, Deadline: v.Deadline, FinishedAt: v.FinishedAt, UpdatedAt: v.UpdatedAt,
		DurationSeconds: v.DurationSeconds, Seq: v.Seq, Events: v.Events, TraceParent: v.TraceParent, TraceState: v.TraceState}
	j.ResultRef = fileInfo(v.ResultRef)
	if v.Files != nil {
		j.Files = make([]FileInfo, len(v.Files))
		for i, f := range v.Files {
			j.Files[i] = FileInfo{Name: f.Name, Size: f.Size, Digest: f.Digest}
		}
	}
	if p := v.Progress; p != nil {
		j.Progress = &Progress{Current: p.Current, Total: p.Total, Message: p.Message, Percent: p.Percent}
	}
	if f := v.Fanout; f != nil {
		j.Fanout = &FanoutInfo{Kind: f.Kind, Total: f.Total, Succeeded: f.Succeeded, Failed: f.Failed,
			Cancelled: f.Cancelled, Finished: f.Finished, Percent: f.Percent, Policy: f.Policy,
			MaxFailureRatio: f.MaxFailureRatio, BatchType: f.BatchType, Errors: errorCounts(f.Errors)}
	}
	if h := v.Hold; h != nil {
		j.Hold = &HoldInfo{Reason: h.Reason, Limit: h.Limit, Max: h.Max, Key: h.Key, Since: h.Since, Until: h.Until, Message: h.Message}
	}
	if u := v.Unique; u != nil {
		j.Unique = &UniqueInfo{Key: u.Key, Fields: u.Fields, ForSeconds: u.ForSeconds, While: UniqueScope(u.While), Until: u.Until, Holds: u.Holds}
	}
	j.Duplicates = v.Duplicates
	return j
}

func fileInfo(f *domain.FileRef) *FileInfo {
	if f == nil {
		return nil
	}
	return &FileInfo{Name: f.Name, Size: f.Size, Digest: f.Digest}
}

// viewOf renders a job record as clients see it.
func viewOf(j *domain.Job) *JobInfo { return jobInfo(projections.View(j)) }

// eventInfo converts the wire view of an event.
func eventInfo(v *projections.EventView) *EventInfo {
	e := &EventInfo{Seq: v.Seq, Type: v.Type, Name: v.Name, JobID: v.JobID, Time: v.Time, Attempt: v.Attempt,
		Actor: v.Actor, Token: v.Token, Level: v.Level, Message: v.Message, Fields: v.Fields, From: State(v.From), To: State(v.To),
		Error: jobError(v.Error), Result: v.Result, RunAt: v.RunAt, Namespace: v.Namespace, Queue: v.Queue, JobType: v.JobType}
	e.ResultRef = fileInfo(v.ResultRef)
	if p := v.Progress; p != nil {
		e.Progress = &ProgressReport{Current: p.Current, Total: p.Total, Message: p.Message}
	}
	if c := v.Counts; c != nil {
		e.Counts = &PieceCounts{Succeeded: c.Succeeded, Failed: c.Failed, Cancelled: c.Cancelled, Errors: errorCounts(c.Errors)}
	}
	return e
}

func queueSlots(c commands.Counts) QueueSlots {
	s := QueueSlots{Running: c.Holding, Pending: c.Pending, Users: slotCounts(c.Users), Keys: slotCounts(c.Keys)}
	return s
}

func slotCounts(c map[string]commands.Count) map[string]SlotCount {
	if c == nil {
		return nil
	}
	out := make(map[string]SlotCount, len(c))
	for u, n := range c {
		out[u] = SlotCount{Running: n.Holding, Pending: n.Pending}
	}
	return out
}

func queueInfo(q *engine.QueueInfo) *QueueInfo {
	out := &QueueInfo{Name: q.Name, Paused: q.Paused, Depth: q.Depth, Held: q.Held, Delayed: q.Delayed,
		CreatedAt: q.CreatedAt, Running: q.Running, MaxRunning: q.MaxRunning, MaxRunningPerUser: q.MaxRunningPerUser,
		MaxRunningPerKey: q.MaxRunningPerKey, RateLimit: q.RateLimit, RatePeriodSeconds: time.Duration(q.RatePeriod).Seconds(),
		RateKey: q.RateKey, Priorities: q.Priorities, MaxQueued: q.MaxQueued}
	if q.Jobs != nil {
		out.Jobs = make(map[State]int, len(q.Jobs))
		for s, n := range q.Jobs {
			out.Jobs[State(s)] = n
		}
	}
	if q.Slots != nil {
		s := queueSlots(*q.Slots)
		out.Slots = &s
	}
	return out
}

func workerInfo(w *engine.WorkerView) *WorkerInfo {
	return &WorkerInfo{ID: w.ID, Name: w.Name, Kind: w.Kind, QueueConcurrency: w.QueueConcurrency, Types: w.Types, BatchTypes: w.BatchTypes, Queues: w.Queues, Token: w.Token,
		Concurrency: w.Concurrency, RegisteredAt: w.RegisteredAt, LastHeartbeat: w.LastHeartbeat,
		Claims: w.Claims, Namespace: w.Namespace, Live: w.Live, LeaseSeconds: w.LeaseSeconds,
		HeartbeatIntervalSeconds: w.HeartbeatIntervalSeconds}
}

func verifyReport(r *projections.Report) *VerifyReport {
	out := &VerifyReport{Jobs: r.Jobs, Records: r.Records, LastSeq: r.LastSeq, Registry: r.Registry,
		Purged: r.Purged, SlotsChecked: r.SlotsChecked, RateAdmissions: r.RateAdmissions, UniqueJobs: r.UniqueJobs, Diffs: make([]VerifyDiff, len(r.Diffs)),
		Schedules: r.Schedules}
	for i, d := range r.Diffs {
		out.Diffs[i] = VerifyDiff{ID: d.ID, Reason: d.Reason, Fields: d.Fields}
	}
	if r.Slots != nil {
		out.Slots = make(map[string]QueueSlots, len(r.Slots))
		for q, c := range r.Slots {
			out.Slots[q] = queueSlots(c)
		}
	}
	return out
}

func typeInfo(t *projections.TypeView) *TypeInfo {
	return &TypeInfo{FullName: t.FullName, Scope: t.Scope, Category: t.Category, Name: t.Name, Schema: t.Schema,
		Description: t.Description, Deleted: t.Deleted, RegisteredAt: t.RegisteredAt, UpdatedAt: t.UpdatedAt}
}

func tokenInfo(t *projections.TokenView) *TokenInfo {
	return &TokenInfo{ID: t.ID, Name: t.Name, Namespace: t.Namespace, Role: Role(t.Role), CreatedAt: t.CreatedAt,
		CreatedBy: t.CreatedBy, ExpiresAt: t.ExpiresAt, Revoked: t.Revoked, RevokedAt: t.RevokedAt,
		RevokedBy: t.RevokedBy, Token: t.Token}
}

func (f ListFilter) engine() engine.Filter {
	return engine.Filter{State: domain.State(f.State), Queue: f.Queue, Type: f.Type, Namespace: f.Namespace,
		Parent: f.Parent, Limit: f.Limit, Search: engine.Search{ID: f.IDPrefix, Tag: f.Tag, ErrorCode: f.ErrorCode,
			Error: f.Error, Payload: f.Payload, FinishedAfter: f.FinishedAfter, FinishedBefore: f.FinishedBefore}}
}

// Validate checks a filter's fields (an *InputError naming the field).
func (f ListFilter) Validate() error {
	e := f.engine()
	if err := e.Validate(); err != nil {
		return publicErr(err)
	}
	_, err := parseCursor(f.Before)
	return publicErr(err)
}

func (s TokenSpec) command() commands.TokenSpec {
	return commands.TokenSpec{Name: s.Name, Namespace: s.Namespace, Role: commands.Role(s.Role), TTL: s.TTL}
}

// Check refuses a spec out of range (an *InputError naming the field), as
// CreateToken would, without asking the engine.
func (s TokenSpec) Check() error { return publicErr(s.command().Check()) }

// ErrBadEvent is the error (errors.Is) of bytes that are not an event of
// jetflow's log.
var ErrBadEvent = streams.ErrBadRecord

// DecodeEvent decodes an event as the event log stores it (the data of a
// message of the events stream) into its EventInfo, with seq, its sequence
// in the log. Bytes that are not an event are an error matching
// ErrBadEvent.
func DecodeEvent(data []byte, seq uint64) (*EventInfo, error) {
	e, err := streams.DecodeEvent(data)
	if err != nil {
		return nil, err
	}
	e.Seq = seq
	return eventInfo(projections.ViewEvent(e)), nil
}
