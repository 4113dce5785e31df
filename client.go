package jetflow

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/clientstore"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Client submits jobs and follows them. It is safe for concurrent use.
type Client struct {
	b     backend       // direct (the store) or command (a token)
	store *engine.Store // nil for a token client: what workers and engines run on
	nc    *nats.Conn
	owned bool
}

// ClientOptions configure a Client. The zero value means defaults.
type ClientOptions struct {
	// Replicas of the streams and buckets jetflow provisions. Zero: those
	// of the system's event log if it exists, else 3 on a cluster and 1 on
	// a single server.
	Replicas int
	// EventsRetention is how long the event log keeps events (its MaxAge,
	// applied by JetStream). Zero leaves the log's as it is (forever for a
	// new one); serve sets it (--events-retention).
	EventsRetention time.Duration
	// Sync is the fsync mode of the server this process started ("always"
	// or "interval"; serve --sync), recorded on the event log so that every
	// other process writes to suit it (under "always" the log's appends are
	// group-committed). "": the mode recorded there.
	Sync string
	// Name identifies this process in the events it writes (the actor).
	// Default: the NATS user it connects as, if any, and its host and
	// process ("nats:<user>@<host>-<pid>"), else "<host>-<pid>".
	Name   string
	Logger *slog.Logger
	// Token, if set, makes a token client: it speaks the engine's command
	// service with this access token (serve --auth) instead of writing to
	// JetStream itself, and needs no more NATS permissions than that
	// (tokenclient.go).
	Token string
	// NATSOptions are added to Connect's own: credentials
	// (nats.UserCredentials, nats.UserInfo, nats.Token), TLS.
	NATSOptions []nats.Option
}

// Connect dials NATS at url (comma-separated for a cluster) and returns a
// Client that owns the connection.
func Connect(ctx context.Context, url string, o ClientOptions) (*Client, error) {
	name := o.Name
	if name == "" {
		name = defaultName()
	}
	opts := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond)}, o.NATSOptions...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", RedactURL(url), err)
	}
	c, err := NewClient(ctx, nc, o)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.owned = true
	return c, nil
}

// NewClient returns a Client on an existing connection, provisioning
// jetflow's streams and buckets if they do not exist.
func NewClient(ctx context.Context, nc *nats.Conn, o ClientOptions) (*Client, error) {
	if o.Token != "" {
		return &Client{b: command{nc: nc, token: o.Token}, nc: nc}, nil
	}
	name := o.Name
	if name == "" {
		name = defaultName()
		if u := nc.Opts.User; u != "" {
			name = "nats:" + u + "@" + name
		}
	}
	if o.Sync != "" && o.Sync != streams.SyncAlways && o.Sync != streams.SyncInterval {
		return nil, fmt.Errorf("sync mode %q: want %q, %q or none", o.Sync, streams.SyncAlways, streams.SyncInterval)
	}
	st, err := engine.OpenStore(ctx, nc, streams.Topology{Replicas: o.Replicas, EventsMaxAge: o.EventsRetention, Sync: o.Sync}, name)
	if err != nil {
		return nil, err
	}
	if o.Logger != nil {
		st.SetLogger(o.Logger)
	}
	return &Client{b: direct{st}, store: st, nc: nc}, nil
}

func defaultName() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}

// Close closes the connection if the Client opened it.
func (c *Client) Close() {
	if c.owned {
		c.nc.Close()
	}
}

// Conn is the client's NATS connection.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Replicas is how many replicas the system's streams and buckets have.
func (c *Client) Replicas() int {
	if c.store == nil {
		return 0
	}
	return c.store.Topo.Replicas
}

// SubmitRequest is a job to submit, with every option; see Submit for the
// short form and the options (Queue, Delay, MaxRetries, ...) for what each
// field means. A nil pointer leaves the option to its default.
type SubmitRequest struct {
	Type             string
	Payload          json.RawMessage // JSON; nil is null
	Namespace        string          // "" : "default"
	Queue            string          // "" : "default"
	Delay            *time.Duration
	RunAt            *time.Time
	MaxRetries       *int
	Backoff          *time.Duration
	BackoffCap       *time.Duration
	Jitter           *float64
	Timeout          *time.Duration
	QueueTimeout     *time.Duration
	MaxLeaseRequeues *int
	IdempotencyKey   string
	Tags             []string
	Parent           string
	Priority         int
	RetryOn          []string
	NoRetryOn        []string
	User             string
	ConcurrencyKey   string
	// UniqueKey or UniqueFields make the job unique: see the options
	// UniqueKey, UniqueFields, UniqueFor and UniqueWhile.
	UniqueKey    string
	UniqueFields []string
	UniqueFor    *time.Duration
	UniqueWhile  UniqueScope
	// Uploads are input files, stored with the job before it is submitted
	// (see Files).
	Uploads []FileUpload
}

// FileUpload is an input file to store with a job: its name in the job's
// directory (a relative, slash-separated path) and its content.
type FileUpload struct {
	Name   string
	Reader io.Reader
}

func duration(d *time.Duration) *commands.Duration {
	if d == nil {
		return nil
	}
	v := commands.Duration(*d)
	return &v
}

// command is the request as the engine takes it.
func (r *SubmitRequest) command() *commands.SubmitRequest {
	c := &commands.SubmitRequest{Namespace: r.Namespace, Type: r.Type, Payload: commands.RawJSON(r.Payload),
		Queue: r.Queue, Delay: duration(r.Delay), RunAt: r.RunAt, MaxRetries: r.MaxRetries,
		Backoff: duration(r.Backoff), BackoffCap: duration(r.BackoffCap), Jitter: r.Jitter,
		Timeout: duration(r.Timeout), IdempotencyKey: r.IdempotencyKey, Tags: r.Tags, Parent: r.Parent,
		Priority: r.Priority, RetryOn: r.RetryOn, NoRetryOn: r.NoRetryOn, MaxLeaseRequeues: r.MaxLeaseRequeues,
		QueueTimeout: duration(r.QueueTimeout), User: r.User, ConcurrencyKey: r.ConcurrencyKey,
		UniqueKey: r.UniqueKey, UniqueFields: r.UniqueFields, UniqueFor: duration(r.UniqueFor), UniqueWhile: string(r.UniqueWhile)}
	for _, u := range r.Uploads {
		c.Uploads = append(c.Uploads, commands.FileUpload{Name: u.Name, Reader: u.Reader})
	}
	return c
}

// Validate checks a request as a submit would, without sending it: an
// option out of range is an *InputError naming the field.
func (r *SubmitRequest) Validate() error {
	c := r.command()
	c.Uploads = nil
	return publicErr(c.Validate())
}

// Submit submits a job of type jobType with payload (any value that
// marshals to JSON; a json.RawMessage or []byte is taken as JSON as is).
func (c *Client) Submit(ctx context.Context, jobType string, payload any, opts ...SubmitOption) (*JobInfo, error) {
	req, err := NewRequest(jobType, payload, opts...)
	if err != nil {
		return nil, err
	}
	info, _, err := c.Send(ctx, req)
	return info, err
}

// NewRequest builds a SubmitRequest from Submit's arguments and checks it
// as a submit would: an option out of range (MaxRetries(-1), Jitter(2),
// Timeout(0), ...) is an error matching ErrInvalidInput, an *InputError
// naming the field, before anything is sent.
func NewRequest(jobType string, payload any, opts ...SubmitOption) (*SubmitRequest, error) {
	raw, err := marshalPayload(payload)
	if err != nil {
		return nil, publicErr(err)
	}
	req := &SubmitRequest{Type: jobType, Payload: raw}
	for _, o := range opts {
		o(req)
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return req, nil
}

// Send submits a job built with NewRequest (or a SubmitRequest filled in
// by hand). created is false when the request's idempotency key named an
// existing job, which is returned as it is.
func (c *Client) Send(ctx context.Context, req *SubmitRequest) (info *JobInfo, created bool, err error) {
	var v *projections.JobView
	if len(req.Uploads) > 0 {
		v, created, err = c.b.sendWithFiles(ctx, req.command())
	} else {
		v, created, err = c.b.send(ctx, req.command())
	}
	if err != nil {
		return nil, false, publicErr(err)
	}
	return jobInfo(v), created, nil
}

// SubmitMany submits jobs with their writes pipelined. The i-th result and
// error belong to the i-th request.
func (c *Client) SubmitMany(ctx context.Context, reqs []*SubmitRequest) ([]*JobInfo, []error) {
	infos, errs := make([]*JobInfo, len(reqs)), make([]error, len(reqs))
	for _, r := range reqs {
		if len(r.Uploads) > 0 { // files are stored before each submit: one at a time
			for i, r := range reqs {
				infos[i], _, errs[i] = c.Send(ctx, r)
			}
			return infos, errs
		}
	}
	creqs := make([]*commands.SubmitRequest, len(reqs))
	for i, r := range reqs {
		creqs[i] = r.command()
	}
	views, werrs := c.b.sendMany(ctx, creqs)
	for i := range views {
		if werrs[i] != nil {
			errs[i] = publicErr(werrs[i])
			continue
		}
		infos[i] = jobInfo(views[i])
	}
	return infos, errs
}

func marshalPayload(p any) (json.RawMessage, error) {
	switch v := p.(type) {
	case nil:
		return json.RawMessage("null"), nil
	case json.RawMessage:
		return v, nil
	case []byte:
		return json.RawMessage(v), nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, &commands.InputError{Field: "payload", Reason: err.Error()}
	}
	return b, nil
}

// Get returns a job, with its result whole (one too large for the job's
// record is read from the files bucket: JobInfo.ResultRef).
func (c *Client) Get(ctx context.Context, id string) (*JobInfo, error) {
	v, err := c.b.get(ctx, id)
	if err == nil {
		err = c.fullResult(ctx, v)
	}
	return jobInfo(v), publicErr(err)
}

// fullResult reads into v the result it names when it is too large for the
// job's record (ResultRef), so that Get and Wait give every result whole.
func (c *Client) fullResult(ctx context.Context, v *projections.JobView) error {
	if v == nil || v.ResultRef == nil {
		return nil
	}
	b, err := c.b.result(ctx, v.ID, *v.ResultRef)
	if err != nil {
		return err
	}
	v.Result = b
	return nil
}

// all converts what a backend listed, or its error.
func all[W, P any](ws []W, err error, conv func(W) P) ([]P, error) {
	if err != nil {
		return nil, publicErr(err)
	}
	out := make([]P, len(ws))
	for i, w := range ws {
		out[i] = conv(w)
	}
	return out, nil
}

func jobInfos(vs []*projections.JobView, err error) ([]*JobInfo, error) { return all(vs, err, jobInfo) }

// Children returns the children of a fan-out parent, in piece order.
func (c *Client) Children(ctx context.Context, id string) ([]*JobInfo, error) {
	return jobInfos(c.b.children(ctx, id))
}

// Cancel cancels a job. A queued or scheduled job is cancelled at once; a
// running job's handler sees its context cancelled. Cancelling a terminal
// job changes nothing and returns it as it is.
func (c *Client) Cancel(ctx context.Context, id, reason string) (*JobInfo, error) {
	v, err := c.b.cancel(ctx, id, reason)
	return jobInfo(v), publicErr(err)
}

// Reprioritize gives a job that has not started (pending, scheduled or
// queued) another priority, from -1000 to 1000: a job.reprioritized
// event. In a queue with priorities a job still pending takes its new
// place among the pending at once; one admitted already keeps its place
// (docs/limits.md). A job of that priority already is returned as it is,
// nothing written; a job that started or ended is refused with an error
// matching ErrInvalidTransition; a priority out of range with one
// matching ErrInvalidInput.
func (c *Client) Reprioritize(ctx context.Context, id string, priority int) (*JobInfo, error) {
	v, err := c.b.reprioritize(ctx, id, priority)
	return jobInfo(v), publicErr(err)
}

// Retry runs a terminal job again: a new job with the original's spec and
// retry_of naming it (a job that is not terminal is refused with
// ErrInvalidTransition). With an idempotency key, a repeated retry returns
// the same new job.
func (c *Client) Retry(ctx context.Context, id, idempotencyKey string) (*JobInfo, error) {
	v, err := c.b.retry(ctx, id, idempotencyKey, false)
	return jobInfo(v), publicErr(err)
}

// RetryFailedPieces runs again only the pieces of fan-out id that did not
// succeed: a new job as Retry makes, whose coordinator fans out again;
// the pieces that succeeded in id are carried over as succeeded and not
// made again (FailedPieces in its view). The coordinator must fan out the
// same pieces in the same order; if its plan differs (kind, count, batch
// type), every piece runs. A job that did not fan out, or whose pieces all
// succeeded, is refused with ErrInvalidInput.
func (c *Client) RetryFailedPieces(ctx context.Context, id, idempotencyKey string) (*JobInfo, error) {
	v, err := c.b.retry(ctx, id, idempotencyKey, true)
	return jobInfo(v), publicErr(err)
}

// Wait blocks until the job is terminal (or ctx is done) and returns it,
// told by the engine when the job ends: no polling. Its result is whole,
// as Get's.
func (c *Client) Wait(ctx context.Context, id string) (*JobInfo, error) {
	v, err := c.b.wait(ctx, id)
	if err == nil {
		err = c.fullResult(ctx, v)
	}
	return jobInfo(v), publicErr(err)
}

// List returns the jobs that match f, newest first (after f.Before, a
// job's Cursor, if given). It reads the whole jobs
// bucket (one ordered consumer), which is fine for thousands of jobs; the
// HTTP API keeps an index for more.
func (c *Client) List(ctx context.Context, f ListFilter) ([]*JobInfo, error) {
	cur, err := parseCursor(f.Before)
	if err != nil {
		return nil, publicErr(err)
	}
	return jobInfos(c.b.list(ctx, f.engine(), cur))
}

// Events returns a job's history, oldest first.
func (c *Client) Events(ctx context.Context, id string) ([]*EventInfo, error) {
	var out []*EventInfo
	err := c.b.history(ctx, id, false, func(e *projections.EventView) error {
		out = append(out, eventInfo(e))
		return nil
	})
	return out, publicErr(err)
}

// Follow calls fn with a job's history, then with each new event as it is
// appended, until the job's terminal event was delivered, fn returns an
// error, or ctx is done.
func (c *Client) Follow(ctx context.Context, id string, fn func(*EventInfo) error) error {
	return publicErr(c.b.history(ctx, id, true, func(e *projections.EventView) error { return fn(eventInfo(e)) }))
}

// TailFilter selects the events a Tail follows: of the jobs of a
// namespace, a queue and a type ("": any), from Since (zero: from now).
type TailFilter struct {
	Namespace, Queue, Type string
	Since                  time.Time
}

// tailWait is how long one poll of a Tail waits for an event.
const tailWait = 5 * time.Second

// Tail calls fn with every job event f selects as it is appended to the
// log (each with its job's namespace, queue and type), from f.Since or
// from now, until fn returns an error (returned) or ctx is done (its
// error). A token client follows its namespace's jobs only.
func (c *Client) Tail(ctx context.Context, f TailFilter, fn func(*EventInfo) error) error {
	ef := engine.Filter{Namespace: f.Namespace, Queue: f.Queue, Type: f.Type}
	if err := ef.Validate(); err != nil {
		return publicErr(err)
	}
	var after uint64
	for {
		evs, next, err := c.b.tail(ctx, f, after, tailWait)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return publicErr(err)
		}
		for _, e := range evs {
			if err := fn(eventInfo(e)); err != nil {
				return err
			}
		}
		after = max(after, next)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// Queues lists the queues, by name, with their depth.
func (c *Client) Queues(ctx context.Context) ([]*QueueInfo, error) {
	qs, err := c.b.queues(ctx)
	return all(qs, err, queueInfo)
}

// PauseQueue pauses a queue: it accepts jobs but dispatches none, to every
// worker at once, until ResumeQueue.
func (c *Client) PauseQueue(ctx context.Context, queue string) error {
	return publicErr(c.b.pauseQueue(ctx, queue, true))
}

// ResumeQueue resumes a paused queue.
func (c *Client) ResumeQueue(ctx context.Context, queue string) error {
	return publicErr(c.b.pauseQueue(ctx, queue, false))
}

// MaxQueueLimit bounds a queue limit's value.
const MaxQueueLimit = commands.MaxLimit

// SetQueueLimits sets a queue's limits (creating the queue if need be).
// Jobs submitted to a queue with limits wait in Pending until a slot is
// free and their rate limit lets them start, admitted fairly across users
// and keys. Lowering a limit stops no running job; raising one admits
// pending jobs at once. A limit out of range (a count under 0, a rate
// limit without its period) is refused naming it. docs/quotas.md.
func (c *Client) SetQueueLimits(ctx context.Context, queue string, l QueueLimits) error {
	_, err := c.ChangeQueueLimits(ctx, queue, func(QueueLimits) QueueLimits { return l })
	return err
}

// ChangeQueueLimits gives a queue the limits change returns for its current
// ones (decided on the limits as they are when written), and returns them.
func (c *Client) ChangeQueueLimits(ctx context.Context, queue string, change func(QueueLimits) QueueLimits) (QueueLimits, error) {
	l, err := c.b.changeQueueLimits(ctx, queue, func(cur domain.QueueLimits) domain.QueueLimits {
		return change(queueLimits(cur)).domain()
	})
	if err != nil {
		return QueueLimits{}, publicErr(err)
	}
	return queueLimits(l), nil
}

// Workers lists the registered workers by registration time; live says
// whether each beat within DefaultLease.
func (c *Client) Workers(ctx context.Context) ([]*WorkerInfo, error) {
	ws, err := c.b.workers(ctx)
	return all(ws, err, workerInfo)
}

// Verify rebuilds every job from the event log and compares it with the
// live projection; a record behind the log may catch up within settle
// before it counts as a difference.
func (c *Client) Verify(ctx context.Context, settle time.Duration) (*VerifyReport, error) {
	r, err := c.b.verify(ctx, settle)
	if err != nil {
		return nil, publicErr(err)
	}
	return verifyReport(r), nil
}

// Replay rebuilds every job from the event log (the live projection is not
// read) and returns how many are in each state, and the last event folded.
func (c *Client) Replay(ctx context.Context) (map[State]int, uint64, error) {
	counts, last, err := c.b.replay(ctx)
	if err != nil {
		return nil, 0, publicErr(err)
	}
	out := make(map[State]int, len(counts))
	for s, n := range counts {
		out[State(s)] = n
	}
	return out, last, nil
}

// RegisterType registers a job type by its full name (scope:category:name;
// the scope a namespace, @global or @internal) with a JSON Schema of its
// payload (nil: any) and a description. created is false when it existed:
// registered again with the same schema (nothing changes), or reactivated
// after a soft delete (its schema replaced); an active type with another
// schema is refused (an error matching ErrConflict, problem type
// schema-conflict).
func (c *Client) RegisterType(ctx context.Context, fullName string, schema json.RawMessage, description string) (info *TypeInfo, created bool, err error) {
	n, err := commands.ParseTypeName(fullName)
	if err != nil {
		return nil, false, publicErr(err)
	}
	t, created, err := c.b.registerType(ctx, commands.TypeDef{Name: n, Schema: schema, Description: description})
	if err != nil {
		return nil, false, publicErr(err)
	}
	return typeInfo(t), created, nil
}

// Types lists the types visible from namespace ns (its own and @global;
// every type when ns is empty), soft-deleted ones too with deleted.
func (c *Client) Types(ctx context.Context, ns string, deleted bool) ([]*TypeInfo, error) {
	if ns != "" {
		if err := commands.CheckNamespace(ns); err != nil {
			return nil, publicErr(err)
		}
	}
	ts, err := c.b.types(ctx, ns, deleted)
	return all(ts, err, typeInfo)
}

// SetNamespace sets a namespace's settings (StrictTypes: only registered
// types are accepted in it; Retention: how long its finished jobs are
// kept).
func (c *Client) SetNamespace(ctx context.Context, ns string, s NamespaceSettings) error {
	if s.Retention < 0 {
		return publicErr(&commands.InputError{Field: "retention", Reason: "must not be negative"})
	}
	return publicErr(c.b.setNamespace(ctx, ns, domain.NamespaceSettings{StrictTypes: s.StrictTypes, Retention: domain.Period(s.Retention)}))
}

func init() {
	clientstore.Of = func(c any) *engine.Store {
		if cl, ok := c.(*Client); ok && cl != nil {
			return cl.store
		}
		return nil
	}
}
