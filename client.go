package jetflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Client submits jobs and follows them. It is safe for concurrent use.
type Client struct {
	store *engine.Store // nil for a token client
	nc    *nats.Conn
	owned bool
	token string // a token client's (tokenclient.go)
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
	// Name identifies this process in the events it writes (the actor).
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
		return &Client{nc: nc, token: o.Token}, nil
	}
	name := o.Name
	if name == "" {
		name = defaultName()
	}
	st, err := engine.OpenStore(ctx, nc, streams.Topology{Replicas: o.Replicas, EventsMaxAge: o.EventsRetention}, name)
	if err != nil {
		return nil, err
	}
	if o.Logger != nil {
		st.Log = o.Logger
	}
	return &Client{store: st, nc: nc}, nil
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
// short form.
type SubmitRequest = commands.SubmitRequest

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
// Timeout(0), ...) is an error matching ErrInvalidInput, an
// *commands.InputError naming the field, before anything is sent.
func NewRequest(jobType string, payload any, opts ...SubmitOption) (*SubmitRequest, error) {
	raw, err := marshalPayload(payload)
	if err != nil {
		return nil, err
	}
	req := &SubmitRequest{Type: jobType, Payload: commands.RawJSON(raw)}
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
	if len(req.Uploads) > 0 {
		return c.sendWithFiles(ctx, req)
	}
	if c.store == nil {
		return c.sendByCommand(ctx, req)
	}
	res, err := c.store.Submit(ctx, req)
	if err != nil {
		return nil, false, err
	}
	return projections.View(res.Job), res.Created, nil
}

// SubmitMany submits jobs with their writes pipelined. The i-th result and
// error belong to the i-th request.
func (c *Client) SubmitMany(ctx context.Context, reqs []*SubmitRequest) ([]*JobInfo, []error) {
	if c.store == nil {
		infos, errs := make([]*JobInfo, len(reqs)), make([]error, len(reqs))
		for i, r := range reqs {
			infos[i], _, errs[i] = c.Send(ctx, r) // sendByCommand, or ErrNeedsEngine for files
		}
		return infos, errs
	}
	for _, r := range reqs {
		if len(r.Uploads) > 0 { // files are stored before each submit: one at a time
			infos, errs := make([]*JobInfo, len(reqs)), make([]error, len(reqs))
			for i, r := range reqs {
				infos[i], _, errs[i] = c.Send(ctx, r)
			}
			return infos, errs
		}
	}
	res := c.store.SubmitBatch(ctx, reqs)
	infos, errs := make([]*JobInfo, len(res)), make([]error, len(res))
	for i, r := range res {
		if r.Err != nil {
			errs[i] = r.Err
			continue
		}
		infos[i] = projections.View(r.Job)
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

// Get returns a job.
func (c *Client) Get(ctx context.Context, id string) (*JobInfo, error) {
	if c.store == nil {
		return c.jobByCommand(ctx, "get", map[string]string{"id": id})
	}
	snap, err := c.store.Lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.store.View(ctx, snap.Job), nil
}

// Children returns the children of a fan-out parent, in piece order.
func (c *Client) Children(ctx context.Context, id string) ([]*JobInfo, error) {
	if c.store == nil {
		return nil, c.needsEngine("children")
	}
	snap, err := c.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	f := snap.Job.Fanout
	if f == nil || f.Plan.Kind != domain.FanoutChildren {
		return []*JobInfo{}, nil
	}
	out := make([]*JobInfo, 0, f.Plan.Total)
	for n := 1; n <= f.Plan.Total; n++ {
		child, err := c.store.Get(ctx, engine.ChildID(snap.Job.Spec.Namespace, id, n))
		if errors.Is(err, ErrNotFound) {
			continue // not created (yet)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, projections.View(child.Job))
	}
	return out, nil
}

// Cancel cancels a job. A queued or scheduled job is cancelled at once; a
// running job's handler sees its context cancelled. Cancelling a terminal
// job changes nothing and returns it as it is.
func (c *Client) Cancel(ctx context.Context, id, reason string) (*JobInfo, error) {
	if c.store == nil {
		return c.jobByCommand(ctx, "cancel", map[string]string{"id": id, "reason": reason})
	}
	snap, err := c.store.Cancel(ctx, id, reason)
	if errors.Is(err, ErrTerminal) {
		return projections.View(snap.Job), nil
	}
	if err != nil {
		return nil, err
	}
	return projections.View(snap.Job), nil
}

// Retry runs a terminal job again: a new job with the original's spec and
// retry_of naming it (a job that is not terminal is refused with
// ErrInvalidTransition). With an idempotency key, a repeated retry returns
// the same new job.
func (c *Client) Retry(ctx context.Context, id, idempotencyKey string) (*JobInfo, error) {
	if c.store == nil {
		return nil, c.needsEngine("retry")
	}
	res, err := c.store.Retry(ctx, id, idempotencyKey)
	if err != nil {
		return nil, err
	}
	return projections.View(res.Job), nil
}

// Wait blocks until the job is terminal (or ctx is done) and returns it. It
// watches the job's record: no polling.
func (c *Client) Wait(ctx context.Context, id string) (*JobInfo, error) {
	if c.store == nil {
		return c.waitByCommand(ctx, id)
	}
	if _, err := c.Get(ctx, id); err != nil {
		return nil, err
	}
	w, err := c.store.KV.Watch(ctx, streams.KVKey(id))
	if err != nil {
		return nil, fmt.Errorf("watch job %s: %w", id, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("watch job %s: closed", id)
			}
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			j, err := streams.DecodeJob(e.Value())
			if err != nil {
				return nil, err
			}
			if j.State.Terminal() {
				return projections.View(j), nil
			}
		}
	}
}

// ListFilter selects jobs; empty fields match everything.
type ListFilter = engine.Filter

// List returns the jobs that match f, newest first. It reads the whole jobs
// bucket (one ordered consumer), which is fine for thousands of jobs; the
// HTTP API keeps an index for more.
func (c *Client) List(ctx context.Context, f ListFilter) ([]*JobInfo, error) {
	if c.store == nil {
		return c.listByCommand(ctx, f)
	}
	jobs, err := c.store.List(ctx, f)
	if err != nil {
		return nil, err
	}
	views := make([]*JobInfo, len(jobs))
	for i, j := range jobs {
		views[i] = projections.View(j)
	}
	return views, nil
}

// Events returns a job's history, oldest first.
func (c *Client) Events(ctx context.Context, id string) ([]*EventInfo, error) {
	if c.store == nil {
		return c.eventsByCommand(ctx, id)
	}
	var out []*EventInfo
	err := c.store.History(ctx, id, 0, false, func(e *domain.Event) error {
		out = append(out, projections.ViewEvent(e))
		return nil
	})
	return out, err
}

// Follow calls fn with a job's history, then with each new event as it is
// appended, until the job's terminal event was delivered, fn returns an
// error, or ctx is done.
func (c *Client) Follow(ctx context.Context, id string, fn func(*EventInfo) error) error {
	if c.store == nil {
		return c.followByCommand(ctx, id, fn)
	}
	return c.store.History(ctx, id, 0, true, func(e *domain.Event) error { return fn(projections.ViewEvent(e)) })
}

// QueueInfo is a queue: its settings and what it holds.
type QueueInfo = engine.QueueInfo

// Queues lists the queues, by name, with their depth.
func (c *Client) Queues(ctx context.Context) ([]*QueueInfo, error) {
	if c.store == nil {
		return nil, c.needsEngine("queues")
	}
	return c.store.QueueInfos(ctx)
}

// PauseQueue pauses a queue: it accepts jobs but dispatches none, to every
// worker at once, until ResumeQueue.
func (c *Client) PauseQueue(ctx context.Context, queue string) error {
	if c.store == nil {
		return c.needsEngine("pause")
	}
	_, err := c.store.SetQueuePaused(ctx, queue, true)
	return err
}

// QueueLimits are a queue's quotas: the most jobs running at once in all
// (MaxRunning) and per user (MaxRunningPerUser); 0 is no limit.
type QueueLimits = domain.QueueLimits

// MaxQueueLimit bounds a queue limit's value.
const MaxQueueLimit = commands.MaxLimit

// SetQueueLimits sets a queue's limits (creating the queue if need be).
// Jobs submitted to a queue with limits wait in Pending until a slot is
// free, admitted fairly across users. Lowering a limit stops no running
// job; raising one admits pending jobs at once. docs/quotas.md.
func (c *Client) SetQueueLimits(ctx context.Context, queue string, l QueueLimits) error {
	if c.store == nil {
		return c.needsEngine("queue set")
	}
	_, err := c.store.SetQueueLimits(ctx, queue, l)
	return err
}

// ChangeQueueLimits gives a queue the limits change returns for its current
// ones (decided on the limits as they are when written), and returns them.
func (c *Client) ChangeQueueLimits(ctx context.Context, queue string, change func(QueueLimits) QueueLimits) (QueueLimits, error) {
	if c.store == nil {
		return QueueLimits{}, c.needsEngine("queue set")
	}
	rec, err := c.store.ChangeQueueLimits(ctx, queue, change)
	if err != nil {
		return QueueLimits{}, err
	}
	return rec.Limits, nil
}

// ResumeQueue resumes a paused queue.
func (c *Client) ResumeQueue(ctx context.Context, queue string) error {
	if c.store == nil {
		return c.needsEngine("resume")
	}
	_, err := c.store.SetQueuePaused(ctx, queue, false)
	return err
}

// WorkerInfo is a worker of the registry (SDK or HTTP) with its heartbeat.
type WorkerInfo = engine.WorkerView

// Workers lists the registered workers by registration time; live says
// whether each beat within DefaultLease.
func (c *Client) Workers(ctx context.Context) ([]*WorkerInfo, error) {
	if c.store == nil {
		return nil, c.needsEngine("workers")
	}
	ws, err := c.store.Workers.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*WorkerInfo, len(ws))
	for i, w := range ws {
		out[i] = engine.ViewWorker(w.WorkerRecord, DefaultLease)
	}
	return out, nil
}

// VerifyDiff is one job whose record differs from its rebuild.
type VerifyDiff = projections.Diff

// VerifyReport is what Verify found: jobs rebuilt from the log, records
// read, and every difference.
type VerifyReport = projections.Report

// Verify rebuilds every job from the event log and compares it with the
// live projection; a record behind the log may catch up within settle
// before it counts as a difference.
func (c *Client) Verify(ctx context.Context, settle time.Duration) (*VerifyReport, error) {
	if c.store == nil {
		return nil, c.needsEngine("verify")
	}
	return projections.Verify(ctx, c.store.JS, settle)
}

// Replay rebuilds every job from the event log (the live projection is not
// read) and returns how many are in each state, and the last event folded.
func (c *Client) Replay(ctx context.Context) (map[State]int, uint64, error) {
	if c.store == nil {
		return nil, 0, c.needsEngine("replay")
	}
	jobs, last, err := projections.Rebuild(ctx, c.store.JS, 0)
	if err != nil {
		return nil, 0, err
	}
	counts := map[State]int{}
	for _, j := range jobs {
		counts[j.State]++
	}
	return counts, last, nil
}

// TypeInfo is a registered job type: scope:category:name, its payload's
// JSON Schema, and whether it is soft-deleted.
type TypeInfo = projections.TypeView

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
		return nil, false, err
	}
	if c.store == nil {
		return nil, false, c.needsEngine("register a type")
	}
	t, created, err := c.store.Types.Register(ctx, commands.TypeDef{Name: n, Schema: schema, Description: description}, c.store.Actor)
	if err != nil {
		return nil, false, err
	}
	return projections.ViewType(t), created, nil
}

// Types lists the types visible from namespace ns (its own and @global;
// every type when ns is empty), soft-deleted ones too with deleted.
func (c *Client) Types(ctx context.Context, ns string, deleted bool) ([]*TypeInfo, error) {
	if ns != "" {
		if err := commands.CheckNamespace(ns); err != nil {
			return nil, err
		}
	}
	if c.store == nil {
		return nil, c.needsEngine("types")
	}
	ts, err := c.store.Types.Types(ctx, ns, deleted)
	if err != nil {
		return nil, err
	}
	out := make([]*TypeInfo, len(ts))
	for i, t := range ts {
		out[i] = projections.ViewType(t)
	}
	return out, nil
}

// NamespaceSettings are a namespace's settings.
type NamespaceSettings = domain.NamespaceSettings

// SetNamespace sets a namespace's settings (StrictTypes: only registered
// types are accepted in it).
func (c *Client) SetNamespace(ctx context.Context, ns string, s NamespaceSettings) error {
	if c.store == nil {
		return c.needsEngine("namespace settings")
	}
	_, err := c.store.Types.SetNamespace(ctx, ns, s, c.store.Actor)
	return err
}
