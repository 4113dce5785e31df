// Package cmdservice is the NATS command service (jetflow.cmd.<verb>, a
// nats.go micro service): the protocol of clients that do not embed the Go
// SDK (docs/protocol.md), answered by every engine in one queue group.
package cmdservice

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
	"github.com/vmihailenco/msgpack/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/auth"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/engine/internal/registry"
	"github.com/jetflow/jetflow/engine/internal/schedules"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// MaxCommandBytes bounds a command message.
const MaxCommandBytes = 2 << 20

// The command service as NATS micro sees it ($SRV.PING, $SRV.INFO and
// $SRV.STATS, e.g. `nats micro info jetflow`).
const (
	CommandService        = "jetflow"
	CommandServiceVersion = "1.0.0"
	// commandQueueGroup is the queue group of every endpoint: one engine
	// answers each command, however many run.
	commandQueueGroup = "jetflow-engine"
)

// commandVerbs are the endpoints of the service, one per verb, each on
// jetflow.cmd.<verb>.
var commandVerbs = append([]string{"submit", "get", "cancel", "list", "events", "wait", "history",
	"submit_workflow", "get_workflow", "retry_workflow"}, scheduleVerbs...)

// CommandServer answers commands on jetflow.cmd.<verb> for clients that do
// not embed the Go SDK (docs/protocol.md). A request is msgpack, or JSON
// when its Content-Type header says application/json; the reply uses the
// request's encoding: {"job": ...} (or "jobs", "events") on success,
// {"error": {"type", "title", "status", "detail"}} on failure, with micro's
// Nats-Service-Error and Nats-Service-Error-Code headers.
//
// It is a NATS micro service (CommandService) with one endpoint per verb in
// the queue group commandQueueGroup, so any number of engines share the
// load. Each command runs in its own goroutine, as many at once as arrive;
// a panic in one is answered with an internal error. A verb with no
// endpoint is answered unknown-command by a subscription to jetflow.cmd.>
// in a queue group of its own, which ignores the verbs the endpoints
// answer, so every command is answered once.
type CommandServer struct {
	cfg   Config
	store *store.Store
	nc    *nats.Conn // the service's and its replies' (the store's)
	log   *slog.Logger

	mu  sync.Mutex
	run *cmdRun // nil when stopped

	waits    chan struct{} // a slot per wait command held (MaxCommandWaits)
	rebuilds chan struct{} // a slot per verify, replay or purge running (MaxRebuilds)
	exports  chan struct{} // a slot per audit_export running (MaxExports)
}

// Config configures a CommandServer.
type Config struct {
	// Auth makes every command carry a token (AuthHeader) whose role allows
	// its verb; what it reads and writes is the token's namespace's, as on
	// the HTTP API. Tokens checks them.
	Auth   bool
	Tokens *auth.Tokens
	Log    *slog.Logger
	// Types is the type registry (the type verbs, admin.go); MaxUpload
	// bounds a staged file (files.go; default DefaultMaxUpload).
	Types     *registry.Registry
	MaxUpload int64

	// Schedules serve the schedule verbs (schedule.create, ...).
	Schedules *schedules.Schedules
	// AuditKey is the public key this engine signs the event log's
	// checkpoints with (audit_pubkey; "": it signs none, and the newest
	// checkpoint's key is told).
	AuditKey string
}

func (c Config) withDefaults() Config { return c }

func (c Config) validate() error {
	if c.Auth && c.Tokens == nil {
		return errors.New("command service: auth without tokens")
	}
	return nil
}

// cmdRun is one Start of a CommandServer, until its Stop.
type cmdRun struct {
	svc     micro.Service
	unknown *nats.Subscription
	ctx     context.Context // the commands' context, cancelled when Stop gives up waiting
	cancel  context.CancelFunc
	stats   map[string]*verbStats

	mu       sync.RWMutex // orders inflight.Add before the Wait of Stop
	closed   bool         // no command is started any more
	inflight sync.WaitGroup
}

// New returns a command server.
func New(s *store.Store, cfg Config) *CommandServer {
	cfg = cfg.withDefaults()
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	return &CommandServer{cfg: cfg, store: s, nc: s.NC(), log: log.With("component", "commands"),
		waits: make(chan struct{}, MaxCommandWaits), rebuilds: make(chan struct{}, MaxRebuilds),
		exports: make(chan struct{}, MaxExports)}
}

// Start adds the service and its endpoints and returns once the NATS
// server routes commands to them. Idempotent.
func (c *CommandServer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.run != nil {
		return nil
	}
	if err := c.cfg.validate(); err != nil {
		return err
	}
	nc := c.nc
	run := &cmdRun{stats: map[string]*verbStats{}}
	run.ctx, run.cancel = context.WithCancel(context.Background())
	for _, verb := range commandVerbs {
		run.stats[verb] = &verbStats{}
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name:        CommandService,
		Version:     CommandServiceVersion,
		Description: "jetflow commands: submit, get, cancel, list, events, wait, history, submit_workflow, get_workflow, retry_workflow, schedule.* (docs/protocol.md)",
		Metadata:    map[string]string{"engine": c.store.Actor()},
		QueueGroup:  commandQueueGroup,
		StatsHandler: func(e *micro.Endpoint) any {
			if st := run.stats[strings.TrimPrefix(e.Subject, streams.CommandPrefix+".")]; st != nil {
				return st.snapshot()
			}
			return nil
		},
		ErrorHandler: func(_ micro.Service, err *micro.NATSError) {
			c.log.Warn("command service", "err", err)
		},
	})
	if err != nil {
		run.cancel()
		return fmt.Errorf("command service: %w", err)
	}
	run.svc = svc
	fail := func(err error) error {
		run.mu.Lock()
		run.closed = true
		run.mu.Unlock()
		_ = svc.Stop()
		if run.unknown != nil {
			_ = run.unknown.Unsubscribe()
		}
		run.cancel()
		return err
	}
	for _, verb := range commandVerbs {
		err := svc.AddEndpoint(endpointName(verb), micro.HandlerFunc(func(req micro.Request) {
			c.accept(run, verb, req.Reply(), nats.Header(req.Headers()), req.Data())
		}), micro.WithEndpointSubject(streams.CommandPrefix+"."+verb))
		if err != nil {
			return fail(fmt.Errorf("command endpoint %s: %w", verb, err))
		}
	}
	run.unknown, err = nc.QueueSubscribe(streams.CommandPrefix+".>", commandQueueGroup+"-unknown", func(m *nats.Msg) {
		verb := strings.TrimPrefix(m.Subject, streams.CommandPrefix+".")
		if run.stats[verb] != nil {
			return // answered by its endpoint
		}
		c.accept(run, verb, m.Reply, m.Header, m.Data)
	})
	if err != nil {
		return fail(fmt.Errorf("command subscription: %w", err))
	}
	if err := flush(ctx, nc); err != nil {
		return fail(fmt.Errorf("command service: %w", err))
	}
	c.run = run
	return nil
}

// Stop stops the service: once it returns, the NATS server routes no
// command to this engine (a request gets no responders when no other
// engine runs), and the commands under way have been answered, or ctx is
// done (10 seconds when it has no deadline) and they are cancelled.
// Idempotent.
func (c *CommandServer) Stop(ctx context.Context) {
	c.mu.Lock()
	run := c.run
	c.run = nil
	c.mu.Unlock()
	if run == nil {
		return
	}
	defer run.cancel()
	if err := run.svc.Stop(); err != nil {
		c.log.Warn("stop command service", "err", err)
	}
	if err := run.unknown.Unsubscribe(); err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		c.log.Warn("stop command subscription", "err", err)
	}
	// Once the server has read the unsubscriptions, nothing more comes;
	// what came before is answered unless it is still queued here.
	if err := flush(ctx, c.nc); err != nil && !errors.Is(err, nats.ErrConnectionClosed) {
		c.log.Warn("stop command service", "err", err)
	}
	run.mu.Lock()
	run.closed = true
	run.mu.Unlock()
	done := make(chan struct{})
	go func() {
		run.inflight.Wait()
		close(done)
	}()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	select {
	case <-done:
	case <-ctx.Done():
		c.log.Warn("stopped with commands under way: cancelled", "err", ctx.Err())
	}
}

// flush waits until the NATS server has processed what nc sent, for at
// most 10 seconds when ctx has no deadline.
func flush(ctx context.Context, nc *nats.Conn) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	return nc.FlushWithContext(ctx)
}

// accept starts a command in its own goroutine, unless run is stopped. It
// is called from a subscription's callback, which must not wait: a
// subscription delivers one message at a time.
func (c *CommandServer) accept(run *cmdRun, verb, reply string, h nats.Header, body []byte) {
	if !replyAllowed(reply) {
		// The engine's connection may publish anywhere: an answer there
		// would be its write (an event in another namespace's log, a
		// record). The command is not run.
		c.log.Warn("command refused: its reply subject is one of jetflow's or the system's", "verb", verb, "reply", headerText(reply))
		return
	}
	run.mu.RLock()
	if run.closed {
		run.mu.RUnlock()
		return
	}
	run.inflight.Add(1)
	run.mu.RUnlock()
	parent := tracing.FromHeaders(tracing.Header(h).Get) // a submit's trace context (docs/tracing.md)
	go func() {
		defer run.inflight.Done()
		c.serve(run, verb, reply, strings.HasPrefix(h.Get("Content-Type"), "application/json"), h.Get(AuthHeader), body, parent)
	}()
}

// serve answers one command on reply (nothing when it is empty); a panic
// is answered with an internal error.
func (c *CommandServer) serve(run *cmdRun, verb, reply string, asJSON bool, token string, body []byte, parent trace.SpanContext) {
	start := time.Now()
	var out []byte
	var failed *CommandError
	func() {
		defer func() {
			if p := recover(); p != nil {
				c.log.Error("command panicked", "verb", verb, "panic", p, "stack", string(debug.Stack()))
				failed = problems.New(problems.Internal, 500, fmt.Sprint(p))
				out, _ = encodeReply(&cmdReply{Error: failed}, asJSON)
			}
		}()
		ctx, cancel := context.WithTimeout(run.ctx, 30*time.Second)
		defer cancel()
		if parent.IsValid() {
			ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		}
		r := c.authenticate(&ctx, token)
		if r == nil {
			r = c.answer(ctx, verb, reply, asJSON, body)
		}
		b, err := encodeReply(r, asJSON)
		if err != nil {
			r = &cmdReply{Error: problem(err, "")}
			b, _ = encodeReply(r, asJSON)
		}
		out, failed = b, r.Error
	}()
	if st := run.stats[verb]; st != nil {
		st.record(time.Since(start), failed)
	}
	if reply == "" {
		return
	}
	m := &nats.Msg{Subject: reply, Data: out}
	if failed != nil {
		m.Header = nats.Header{}
		m.Header.Set(micro.ErrorCodeHeader, strconv.Itoa(failed.Status))
		m.Header.Set(micro.ErrorHeader, headerText(failed.Type+": "+failed.Detail))
	}
	if err := c.nc.PublishMsg(m); err != nil {
		c.log.Warn("command reply", "err", err)
	}
}

// replyAllowed reports whether the engine may answer on reply: an inbox,
// never a subject of jetflow's (jetflow.…: the event log, the work
// queues) or of the system ($JS, $KV, $O, $SYS, ...). "" is no answer.
func replyAllowed(reply string) bool {
	return !strings.HasPrefix(reply, "jetflow.") && !strings.HasPrefix(reply, "$")
}

// headerText is s on one line of at most 512 bytes, for a header or a
// stat.
func headerText(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 512 {
		s = strings.ToValidUTF8(s[:512], "")
	}
	return s
}

// verbStats is what an endpoint's commands did, from their start to their
// answer: the data of the endpoint in $SRV.STATS. (micro's own figures of
// the endpoint count requests, but time only their hand-over to serve, and
// count as errors only those micro answers itself.)
type verbStats struct {
	mu             sync.Mutex
	answered       int
	errors         int
	lastError      string
	processingTime time.Duration
}

// VerbStats is the data of an endpoint in $SRV.STATS.
type VerbStats struct {
	NumAnswered           int           `json:"num_answered"`
	NumErrors             int           `json:"num_errors"`
	LastError             string        `json:"last_error,omitempty"`
	ProcessingTime        time.Duration `json:"processing_time"`
	AverageProcessingTime time.Duration `json:"average_processing_time"`
}

func (s *verbStats) record(d time.Duration, failed *CommandError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answered++
	s.processingTime += d
	if failed != nil {
		s.errors++
		s.lastError = headerText(failed.Type + ": " + failed.Detail)
	}
}

func (s *verbStats) snapshot() VerbStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := VerbStats{NumAnswered: s.answered, NumErrors: s.errors, LastError: s.lastError, ProcessingTime: s.processingTime}
	if s.answered > 0 {
		v.AverageProcessingTime = s.processingTime / time.Duration(s.answered)
	}
	return v
}

type cmdReply struct {
	Job        *projections.JobView     `json:"job,omitempty"`
	Created    *bool                    `json:"created,omitempty"`
	TimedOut   *bool                    `json:"timed_out,omitempty"` // wait
	Jobs       []*projections.JobView   `json:"jobs,omitempty"`
	NextCursor string                   `json:"next_cursor,omitempty"` // list
	Events     []*projections.EventView `json:"events,omitempty"`
	Next       *uint64                  `json:"next,omitempty"` // history
	More       *bool                    `json:"more,omitempty"` // history
	Error      *CommandError            `json:"error,omitempty"`

	Workflow any `json:"workflow,omitempty"` // the workflow verbs
	// Body, if set, is the reply of a verb of admin.go or files.go instead.
	Body          any `json:"-"`
	scheduleReply     // the schedule verbs'
}

// CommandError is the error of a failed command.
type CommandError = problems.Problem

func problem(err error, jobID string) *CommandError {
	p := problems.Of(err)
	if p.JobID == "" {
		p.JobID = jobID
	}
	return p
}

// undecodable is the error of a command body that does not decode into v:
// invalid-input naming the field when a field's value is refused where it
// is decoded (a duration out of range), else malformed-request (as over
// HTTP), naming the field whose value does not decode when one does not.
func undecodable(verb string, body []byte, asJSON bool, v any, err error) *CommandError {
	field, ferr := FieldOf(body, asJSON, v)
	var in *commands.InputError
	if errors.As(ferr, &in) || errors.As(err, &in) {
		named := *in
		if field != "" {
			named.Field = field
		}
		return problem(&named, "")
	}
	detail := fmt.Sprintf("%s: %v", verb, err)
	if field != "" {
		detail = fmt.Sprintf("%s: field %q: %v", verb, field, ferr)
	}
	p := problems.New(problems.MalformedRequest, 400, detail)
	p.Field = field
	return p
}

// FieldOf finds the field of v (a pointer to a struct) whose value in body
// does not decode, and that value's error. body is read as a map of raw
// values, each decoded on its own into its field's type, in the struct's
// order; JSON names match as encoding/json matches them, msgpack names
// exactly. It names the field of an error the codec does not place (a
// duration out of range, a time that does not parse, a msgpack value of
// the wrong type): "" when no single field fails.
func FieldOf(body []byte, asJSON bool, v any) (string, error) {
	rt := reflect.TypeOf(v)
	if rt == nil || rt.Kind() != reflect.Pointer || rt.Elem().Kind() != reflect.Struct {
		return "", nil
	}
	rt = rt.Elem()
	raws := map[string][]byte{}
	tag := "msgpack"
	if asJSON {
		tag = "json"
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil {
			return "", nil
		}
		for k, r := range m {
			raws[k] = r
		}
	} else {
		var m map[string]msgpack.RawMessage
		if streams.CheckMsgpack(body) != nil || msgpack.Unmarshal(body, &m) != nil {
			return "", nil
		}
		for k, r := range m {
			raws[k] = r
		}
	}
	for _, name := range fieldNames(rt, tag) {
		raw, ok := raws[name]
		if !ok && asJSON {
			for k, r := range raws {
				if strings.EqualFold(k, name) {
					raw, ok = r, true
					break
				}
			}
		}
		if !ok {
			continue
		}
		// The field is decoded as part of a body of its own, so that the
		// type's own decoding of it (a custom decoder of the whole
		// struct) is what is tried.
		var err error
		if into := reflect.New(rt).Interface(); asJSON {
			one, _ := json.Marshal(map[string]json.RawMessage{name: raw})
			dec := json.NewDecoder(bytes.NewReader(one))
			dec.DisallowUnknownFields()
			err = dec.Decode(into)
		} else {
			if len(raw) == 0 {
				raw = []byte{0xc0} // a msgpack nil, which a raw message holds as nothing
			}
			one, _ := msgpack.Marshal(map[string]msgpack.RawMessage{name: raw})
			err = streams.UnmarshalStrict(one, into)
		}
		if err != nil {
			return name, err
		}
	}
	return "", nil
}

// fieldNames are the names of the fields of struct type rt under tag, in
// order, those of embedded structs (without a name of their own) in their
// place.
func fieldNames(rt reflect.Type, tag string) []string {
	var out []string
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get(tag), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			out = append(out, fieldNames(f.Type, tag)...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

type idCommand struct {
	ID     string `json:"id" msgpack:"id"`
	Reason string `json:"reason,omitempty" msgpack:"reason,omitempty"`
	At     string `json:"at,omitempty" msgpack:"at,omitempty"` // get: the job as of this instant (RFC 3339), folded from the log
}

// check refuses a reason where it would be dropped (get, events) or is
// too long; the id is checked by the read.
func (c *idCommand) check(verb string) error {
	if verb != "cancel" && c.Reason != "" {
		return &commands.InputError{Field: "reason", Reason: "only with cancel"}
	}
	if verb != "get" && c.At != "" {
		return &commands.InputError{Field: "at", Reason: "only with get"}
	}
	return commands.CheckReason("reason", c.Reason)
}

// answer runs one command and returns its reply.
func (c *CommandServer) answer(ctx context.Context, verb, reply string, asJSON bool, body []byte) *cmdReply {
	failed := func(err error, jobID string) *cmdReply { return &cmdReply{Error: problem(err, jobID)} }
	if len(body) > MaxCommandBytes {
		return &cmdReply{Error: problems.New(problems.PayloadTooLarge, 413,
			fmt.Sprintf("command of %d bytes is over the limit of %d", len(body), MaxCommandBytes))}
	}
	// decode decodes the body into v, or says why it does not.
	decode := func(v any) *cmdReply {
		if err := decodeCommand(body, asJSON, v); err != nil {
			return &cmdReply{Error: undecodable(verb, body, asJSON, v, err)}
		}
		return nil
	}
	p := store.PrincipalOf(ctx)
	if p != nil {
		if err := p.Can(commands.VerbAction(verb)); err != nil && commands.VerbAction(verb) != "" {
			return failed(err, "")
		}
	}
	// idOf decodes and checks a command about one job the principal may see.
	// With scoped, a job the principal may not see is refused here (a
	// command that reads the job anyway checks what it read instead).
	idOf := func(scoped bool) (*idCommand, *cmdReply) {
		var req idCommand
		if r := decode(&req); r != nil {
			return nil, r
		}
		if err := req.check(verb); err != nil {
			return nil, failed(err, req.ID)
		}
		if err := knownID(req.ID); err != nil {
			return nil, failed(err, req.ID)
		}
		if scoped {
			if err := c.sees(ctx, p, req.ID); err != nil {
				return nil, failed(err, req.ID)
			}
		}
		return &req, nil
	}
	if strings.HasPrefix(verb, "schedule.") && commands.VerbAction(verb) != "" {
		return c.schedule(ctx, p, verb, asJSON, body, decode, failed)
	}
	switch verb {
	case "submit":
		var req commands.SubmitRequest
		if r := decode(&req); r != nil {
			return r
		}
		if err := commands.CheckGivenNamespace(body, asJSON); err != nil {
			return failed(err, "")
		}
		ns, err := p.Scope(commands.ActSubmit, req.Namespace)
		if err != nil {
			return failed(err, "")
		}
		req.Namespace = ns
		if p != nil {
			// Who the job runs for: the token's name unless an admin names another.
			if req.User, err = commands.SubmitUser(p.Role, p.Name, req.User); err != nil {
				return failed(err, "")
			}
		}
		if err := auth.CheckRefs(ctx, c.store, p, &req); err != nil {
			return failed(err, "")
		}
		res, err := c.store.Submit(ctx, &req)
		if err != nil {
			return failed(err, "")
		}
		created := res.Created
		return &cmdReply{Job: projections.View(res.Job), Created: &created}
	case "get":
		req, r := idOf(false)
		if r != nil {
			return r
		}
		if req.At != "" {
			return c.getAt(&call{ctx: ctx, verb: verb, asJSON: asJSON, body: body, p: p}, req.ID, req.At)
		}
		snap, err := c.store.ReadSeen(ctx, p, req.ID)
		if err != nil {
			return failed(err, req.ID)
		}
		return &cmdReply{Job: projections.View(snap.Job)}
	case "cancel":
		req, r := idOf(true)
		if r != nil {
			return r
		}
		snap, err := c.store.Cancel(ctx, req.ID, req.Reason)
		if errors.Is(err, commands.ErrTerminal) {
			err = nil // cancel of a terminal job: a no-op that returns the job
		}
		if err != nil {
			return failed(err, req.ID)
		}
		return &cmdReply{Job: projections.View(snap.Job)}
	case "list":
		var lc listCommand
		if r := decode(&lc); r != nil {
			return r
		}
		f := lc.Filter
		if err := f.Validate(); err != nil {
			return failed(err, "")
		}
		ns, err := p.Scope(commands.ActRead, f.Namespace)
		if err != nil {
			return failed(err, "")
		}
		f.Namespace = ns
		limit := f.Limit
		if lc.Cursor != "" {
			if _, _, err := DecodeCursor(lc.Cursor); err != nil {
				return failed(err, "")
			}
		}
		f.Limit = 0 // the page is cut after the cursor
		jobs, err := c.store.List(ctx, f)
		if err != nil {
			return failed(err, "")
		}
		jobs, next, err := page(jobs, lc.Cursor, limit)
		if err != nil {
			return failed(err, "")
		}
		out := &cmdReply{Jobs: make([]*projections.JobView, len(jobs)), NextCursor: next}
		for i, j := range jobs {
			out.Jobs[i] = projections.View(j)
		}
		return out
	case "events":
		req, r := idOf(true)
		if r != nil {
			return r
		}
		out := &cmdReply{Events: []*projections.EventView{}}
		err := c.store.History(ctx, req.ID, 0, false, func(e *domain.Event) error {
			out.Events = append(out.Events, projections.ViewEvent(e))
			return nil
		})
		if err != nil {
			return failed(err, req.ID)
		}
		return out
	case "wait":
		return c.wait(ctx, p, decode, failed)
	case "history":
		return c.history(ctx, p, decode, failed)
	case "submit_workflow", "get_workflow", "retry_workflow":
		return c.workflow(ctx, verb, p, body, asJSON, decode, idOf, failed)
	}
	if h := moreVerbs[verb]; h != nil {
		return h(c, &call{ctx: ctx, verb: verb, asJSON: asJSON, body: body, p: p, reply: reply})
	}
	return &cmdReply{Error: problems.New(problems.UnknownCommand, 404,
		fmt.Sprintf("no command %q; commands are %s", verb, strings.Join(commandVerbs, ", ")))}
}

// decodeCommand decodes a command body strictly: unknown fields and fields
// of the wrong type are errors.
func decodeCommand(body []byte, asJSON bool, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return errors.New("empty command")
	}
	if asJSON {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(v); err != nil {
			return err
		}
		if dec.More() {
			return errors.New("trailing data after the command")
		}
		return nil
	}
	return streams.UnmarshalStrict(body, v)
}

// encodeReply encodes a reply as JSON, or as msgpack of the same JSON shape
// (payloads and results as values, not strings).
func encodeReply(r *cmdReply, asJSON bool) ([]byte, error) {
	var v any = r
	if r.Body != nil && r.Error == nil {
		v = r.Body
	}
	b, err := json.Marshal(v)
	if err != nil || asJSON {
		return b, err
	}
	var generic any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	return msgpack.Marshal(numbersToValues(generic))
}

func numbersToValues(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = numbersToValues(e)
		}
	case []any:
		for i, e := range x {
			x[i] = numbersToValues(e)
		}
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		f, _ := x.Float64()
		return f
	}
	return v
}

// AuthHeader is the header of a command that carries its token
// ("Bearer <token>" or the token alone) when the command server checks
// them (Config.Auth).
const AuthHeader = "Authorization"

// authenticate puts the principal of a command's token into *ctx, or
// returns the reply that refuses it; with Auth off it does nothing.
func (c *CommandServer) authenticate(ctx *context.Context, token string) *cmdReply {
	if !c.cfg.Auth {
		return nil
	}
	if scheme, tok, ok := strings.Cut(token, " "); ok && strings.EqualFold(scheme, "Bearer") {
		token = strings.TrimSpace(tok)
	}
	if token == "" {
		return &cmdReply{Error: problem(fmt.Errorf("this command needs a token (header %s): %w", AuthHeader, commands.ErrUnauthenticated), "")}
	}
	p, err := c.cfg.Tokens.Verify(*ctx, token)
	if err != nil {
		if errors.Is(err, commands.ErrUnauthenticated) {
			err = fmt.Errorf("the token is not valid (malformed, unknown, revoked or expired): %w", commands.ErrUnauthenticated)
		}
		return &cmdReply{Error: problem(err, "")}
	}
	*ctx = store.WithPrincipal(*ctx, p)
	return nil
}

// sees refuses a job the principal may not see with the error of a job
// that does not exist.
func (c *CommandServer) sees(ctx context.Context, p *commands.Principal, id string) error {
	if !p.Scoped() {
		return nil
	}
	_, err := c.store.ReadSeen(ctx, p, id) // another namespace's job: as one that does not exist
	return err
}
