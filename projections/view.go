package projections

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// JobView is a job as the outside world sees it: the object `jetflow get
// --json`, the SDK and the HTTP API all return, from this one encoder.
type JobView struct {
	ID        string          `json:"id"`
	Namespace string          `json:"namespace"`
	Type      string          `json:"type"`
	Queue     string          `json:"queue"`
	State     domain.State    `json:"state"`
	Payload   json.RawMessage `json:"payload"`
	Result    json.RawMessage `json:"result"`
	// ResultRef names a result too large for the record
	// (commands.MaxInlineResult), kept in the files bucket: result is then
	// null and GET /api/v1/jobs/{id}/result gives it.
	ResultRef        *domain.FileRef  `json:"result_ref,omitempty"`
	Error            *domain.JobError `json:"error"`
	Attempts         int              `json:"attempts"`
	MaxRetries       int              `json:"max_retries"`
	Retries          int              `json:"retries"`
	LeaseRequeues    int              `json:"lease_requeues"`
	MaxLeaseRequeues int              `json:"max_lease_requeues"`
	TimeoutSeconds   float64          `json:"timeout_seconds"`
	BackoffSeconds   float64          `json:"backoff_seconds"`
	Tags             []string         `json:"tags"`
	Files            []domain.FileRef `json:"files,omitempty"` // input files (GET /jobs/{id}/files adds the outputs)
	IdempotencyKey   string           `json:"idempotency_key,omitempty"`
	ParentID         string           `json:"parent_id,omitempty"`
	RetryOf          string           `json:"retry_of,omitempty"`
	FailedPieces     bool             `json:"failed_pieces,omitempty"` // a retry of retry_of's failed pieces only
	Priority         int              `json:"priority"`
	Worker           string           `json:"worker,omitempty"`
	Progress         *ProgressView    `json:"progress,omitempty"`
	Fanout           *fanoutView      `json:"fanout,omitempty"`
	QueuePosition    *int             `json:"queue_position,omitempty"`   // set by readers that ask the queue (engine.Store.QueuePosition)
	User             string           `json:"user,omitempty"`             // who the job runs for (quotas)
	ConcurrencyKey   string           `json:"concurrency_key,omitempty"`  // its slots count with its key's (max_running_per_key)
	Unique           *uniqueView      `json:"unique,omitempty"`           // a unique job: its key and how long it holds it
	Duplicates       int              `json:"duplicates,omitempty"`       // submits of its unique key it answered
	Hold             *HoldView        `json:"hold,omitempty"`             // a pending job: the limit that holds it; a scheduled one: its run_at
	PendingPosition  *int             `json:"pending_position,omitempty"` // pending jobs of its queue admitted before it: set by readers that ask the admitter (engine.Store.View)
	CreatedAt        time.Time        `json:"created_at"`
	RunAt            *time.Time       `json:"run_at"`
	QueuedAt         *time.Time       `json:"queued_at"`
	StartedAt        *time.Time       `json:"started_at"`
	Deadline         *time.Time       `json:"deadline,omitempty"` // a claimed or running job: when its attempt's execution timeout ends
	FinishedAt       *time.Time       `json:"finished_at"`
	UpdatedAt        time.Time        `json:"updated_at"`
	DurationSeconds  *float64         `json:"duration_seconds"`
	Seq              uint64           `json:"seq"`
	Events           int              `json:"events"`

	Workflow *workflowRef `json:"workflow,omitempty"` // a workflow's job: its name and steps
	Step     *stepRef     `json:"step,omitempty"`     // a step of a workflow: its name and dependencies
	// Inputs are a step's dependencies' results by step name, in the job a
	// worker claims over HTTP; InputRefs the paths of those left out of it
	// for their size (GET them with ?worker_id=).
	Inputs    map[string]json.RawMessage `json:"inputs,omitempty"`
	InputRefs map[string]string          `json:"input_refs,omitempty"`
	// TraceParent and TraceState are the W3C trace context a worker
	// continues: while an attempt that recorded a span holds the job, that
	// span's; else the job's own (its submit's). Empty: none
	// (docs/tracing.md).
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// uniqueView is what makes a job unique: its key (given, or derived from
// the payload fields Fields), its window (ForSeconds, 0: none; Until, when
// it ends) and its state scope (While: active, not-succeeded, any), and
// whether it holds its key now (as of the view: a submit decides on the
// log).
type uniqueView struct {
	Key        string     `json:"key"`
	Fields     []string   `json:"fields,omitempty"`
	ForSeconds float64    `json:"for_seconds"`
	While      string     `json:"while"`
	Until      *time.Time `json:"until,omitempty"`
	Holds      bool       `json:"holds"`
}

// HoldView is why a pending job waits: the limit of its queue that held
// it when admission last looked, since when, and that said for people.
type HoldView struct {
	// Reason is the kind of limit: quota (max_running,
	// max_running_per_user), key (max_running_per_key), rate (rate_limit),
	// priority (max_queued), dependencies (depends_on, steps); schedule
	// (run_at) for a scheduled job, which waits for its time.
	Reason string    `json:"reason"`
	Limit  string    `json:"limit"` // max_running, max_running_per_user, max_running_per_key or rate_limit; depends_on (a step), steps (a workflow being created)
	Max    int       `json:"max"`
	Key    string    `json:"key,omitempty"` // the concurrency or rate key that holds it
	Since  time.Time `json:"since"`
	// Until is when a rate limit lets it start at the earliest.
	Until   *time.Time `json:"until,omitempty"`
	Message string     `json:"message"`
	Steps   []string   `json:"steps,omitempty"` // depends_on: the steps it waits for
}

// ViewHold renders why pending job j waits: h, the hold its record says
// (job.pending) or the one its admitter tells now.
func ViewHold(j *domain.Job, h domain.Hold) *HoldView {
	return &HoldView{Reason: commands.HoldReason(h), Limit: h.Limit, Max: h.Max, Key: h.Key, Since: h.Since.UTC(),
		Until: timePtr(h.Until), Message: commands.HoldMessage(j.Spec.Queue, j.Spec.User, h), Steps: h.Steps}
}

// fanoutView is a coordinator's pieces: how many, and how they ended.
type fanoutView struct {
	Kind            string              `json:"kind"`
	Total           int                 `json:"total"`
	Succeeded       int                 `json:"succeeded"`
	Failed          int                 `json:"failed"`
	Cancelled       int                 `json:"cancelled"`
	Finished        int                 `json:"finished"`
	Percent         float64             `json:"percent"`
	Policy          string              `json:"policy"`
	MaxFailureRatio float64             `json:"max_failure_ratio,omitempty"`
	BatchType       string              `json:"batch_type,omitempty"`
	Errors          []domain.ErrorCount `json:"errors,omitempty"`
}

// ProgressView is a job's last reported progress.
type ProgressView struct {
	Current int64    `json:"current"`
	Total   int64    `json:"total"`
	Message string   `json:"message,omitempty"`
	Percent *float64 `json:"percent"`
}

// View renders a job record.
func View(j *domain.Job) *JobView {
	v := &JobView{
		ID: j.ID, Namespace: j.Spec.Namespace, Type: j.Spec.Type, Queue: j.Spec.Queue, State: j.State,
		Payload: rawJSON(j.Spec.Payload), Result: rawJSON(j.Result), ResultRef: j.ResultRef, Error: j.Error,
		Attempts: j.Attempt, MaxRetries: j.Spec.MaxRetries, Retries: j.Retries,
		LeaseRequeues: j.LeaseRequeues, MaxLeaseRequeues: j.Spec.MaxLeaseRequeues,
		TimeoutSeconds: j.Spec.Timeout.Seconds(), BackoffSeconds: j.Spec.Backoff.Seconds(),
		Tags: j.Spec.Tags, Files: j.Spec.Files, IdempotencyKey: j.Spec.Key, ParentID: j.Spec.Parent, RetryOf: j.Spec.RetryOf, FailedPieces: j.Spec.FailedPieces,
		Priority: j.Spec.Priority, Worker: j.Worker, User: j.Spec.User, ConcurrencyKey: j.Spec.ConcurrencyKey,
		CreatedAt: j.CreatedAt.UTC(), RunAt: timePtr(j.RunAt), QueuedAt: timePtr(j.QueuedAt),
		StartedAt: timePtr(j.StartedAt), FinishedAt: timePtr(j.FinishedAt), UpdatedAt: j.UpdatedAt.UTC(),
		Seq: j.Seq, Events: j.Events, Duplicates: j.Duplicates,
	}
	if u := j.Spec.Unique; u != nil {
		v.Unique = &uniqueView{Key: u.Key, Fields: u.Fields, ForSeconds: u.For.Seconds(), While: u.While,
			Until: timePtr(commands.UniqueUntil(j)), Holds: commands.UniqueHolds(j, u.Key, time.Now())}
	}
	if v.Tags == nil {
		v.Tags = []string{}
	}
	v.TraceParent, v.TraceState = j.Spec.TraceParent, j.Spec.TraceState
	if j.AttemptTrace != "" && commands.Held(j) {
		v.TraceParent = j.AttemptTrace
	}
	if j.Progress != nil {
		p := &ProgressView{Current: j.Progress.Current, Total: j.Progress.Total, Message: j.Progress.Message}
		if p.Total > 0 {
			pct := float64(p.Current) * 100 / float64(p.Total)
			p.Percent = &pct
		}
		v.Progress = p
	}
	if f := j.Fanout; f != nil {
		c := f.Counts
		fv := &fanoutView{Kind: f.Plan.Kind, Total: f.Plan.Total, Succeeded: c.Succeeded, Failed: c.Failed,
			Cancelled: c.Cancelled, Finished: c.Finished(), Policy: f.Plan.Policy, MaxFailureRatio: f.Plan.MaxFailureRatio,
			BatchType: f.Plan.BatchType, Errors: c.Errors}
		if fv.Total > 0 {
			fv.Percent = float64(fv.Finished) * 100 / float64(fv.Total)
		}
		v.Fanout = fv
		// A waiting parent's progress is its pieces'.
		pct := fv.Percent
		v.Progress = &ProgressView{Current: int64(fv.Finished), Total: int64(fv.Total), Percent: &pct,
			Message: fmt.Sprintf("%d succeeded, %d failed, %d cancelled of %d %s", c.Succeeded, c.Failed, c.Cancelled, fv.Total, fv.Kind)}
	}
	viewWorkflow(j, v)
	if d, ok := commands.Deadline(j); ok {
		v.Deadline = timePtr(d)
	}
	switch {
	case j.Hold != nil && j.State == domain.StatePending:
		v.Hold = ViewHold(j, *j.Hold)
	case j.State == domain.StateScheduled && !j.RunAt.IsZero():
		v.Hold = ViewHold(j, domain.Hold{Limit: domain.LimitRunAt, Since: j.UpdatedAt, Until: j.RunAt})
	}
	if !j.StartedAt.IsZero() && !j.FinishedAt.IsZero() {
		d := j.FinishedAt.Sub(j.StartedAt).Seconds()
		v.DurationSeconds = &d
	}
	return v
}

func rawJSON(b []byte) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return json.RawMessage(b)
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// EventView is one event of a job's history, as JSON.
type EventView struct {
	Seq     uint64           `json:"seq"`
	Type    string           `json:"type"`
	Name    string           `json:"name,omitempty"`
	JobID   string           `json:"job_id"`
	Time    time.Time        `json:"time"`
	Attempt int              `json:"attempt"`
	Actor   string           `json:"actor,omitempty"`
	Token   string           `json:"token,omitempty"` // the token the actor wrote it for (token:<name>/<id>), when the actor is not the token
	Level   string           `json:"level,omitempty"`
	Message string           `json:"message,omitempty"`
	Fields  map[string]any   `json:"fields,omitempty"`
	From    domain.State     `json:"from,omitempty"`
	To      domain.State     `json:"to,omitempty"`
	Error   *domain.JobError `json:"error,omitempty"`
	Result  json.RawMessage  `json:"result,omitempty"`
	// ResultRef: a job.succeeded whose result is kept in the files bucket.
	ResultRef *domain.FileRef  `json:"result_ref,omitempty"`
	RunAt     *time.Time       `json:"run_at,omitempty"`
	Progress  *domain.Progress `json:"progress,omitempty"`
	Counts    *countsView      `json:"counts,omitempty"` // job.fanin and a fan-out's outcome: its pieces so far
	// The job's namespace, queue and type: in a tail of many jobs' events.
	Namespace string `json:"namespace,omitempty"`
	Queue     string `json:"queue,omitempty"`
	JobType   string `json:"job_type,omitempty"`
}

// countsView is how a fan-out's pieces ended so far.
type countsView struct {
	Succeeded int                 `json:"succeeded"`
	Failed    int                 `json:"failed"`
	Cancelled int                 `json:"cancelled"`
	Errors    []domain.ErrorCount `json:"errors,omitempty"`
}

// ViewEvent renders an event.
// ViewTailEvent is ViewEvent with the job's namespace, queue and type, for
// a tail of many jobs' events.
func ViewTailEvent(e *domain.Event, ns, queue, jobType string) *EventView {
	v := ViewEvent(e)
	v.Namespace, v.Queue, v.JobType = ns, queue, jobType
	return v
}

func ViewEvent(e *domain.Event) *EventView {
	v := &EventView{Seq: e.Seq, Type: e.Type, Name: e.Name, JobID: e.JobID, Time: e.Time.UTC(), Attempt: e.Attempt,
		Actor: e.Actor, Token: e.By, Level: e.Level, Message: e.Message, Fields: e.Fields, From: e.From, To: e.To,
		Error: e.Error, ResultRef: e.ResultRef, RunAt: timePtr(e.RunAt), Progress: e.Progress}
	if len(e.Result) > 0 {
		v.Result = json.RawMessage(e.Result)
	}
	if c := e.Counts; c != nil {
		v.Counts = &countsView{Succeeded: c.Succeeded, Failed: c.Failed, Cancelled: c.Cancelled, Errors: c.Errors}
	}
	return v
}

// LeavesQueue reports whether ev takes a job out of its queue to a worker
// (claimed or started from queued): the end of its wait.
func LeavesQueue(ev *domain.Event) bool {
	return ev.From == domain.StateQueued && (ev.Type == domain.EvStarted || ev.Type == domain.EvClaimed)
}

// EndsRun reports whether ev moves a running job elsewhere: the end of its
// run.
func EndsRun(ev *domain.Event) bool {
	return ev.From == domain.StateRunning && ev.To != domain.StateNew && ev.To != domain.StateRunning
}

// EntersQueue reports whether ev puts a job in its queue.
func EntersQueue(ev *domain.Event) bool { return ev.To == domain.StateQueued }
