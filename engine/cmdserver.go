package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/nats-io/nats.go"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// MaxCommandBytes bounds a command message.
const MaxCommandBytes = 2 << 20

// CommandServer answers commands on jetflow.cmd.<verb> for clients that do
// not embed the Go SDK (docs/protocol.md). A request is msgpack, or JSON
// when its Content-Type header says application/json; the reply uses the
// request's encoding: {"job": ...} (or "jobs", "events") on success,
// {"error": {"type", "title", "status", "detail"}} on failure.
//
// It runs as a watermill router over a NATS queue subscription, so any
// number of engines share the load, and a malformed command is answered
// with an error rather than taking anything down.
type CommandServer struct {
	store *Store
	log   *slog.Logger

	mu     sync.Mutex
	router *message.Router
	sub    *natsSubscriber
	done   chan struct{}
}

// NewCommandServer returns a command server.
func NewCommandServer(store *Store, log *slog.Logger) *CommandServer {
	if log == nil {
		log = slog.Default()
	}
	return &CommandServer{store: store, log: log.With("component", "commands")}
}

// Start subscribes to jetflow.cmd.>. Idempotent.
func (c *CommandServer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.router != nil {
		return nil
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second},
		watermill.NewSlogLoggerWithLevelMapping(c.log, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug}))
	if err != nil {
		return err
	}
	r.AddMiddleware(middleware.Recoverer)
	c.sub = &natsSubscriber{nc: c.store.NC, queue: "jetflow-engine"}
	r.AddConsumerHandler("commands", streams.CommandPrefix+".>", c.sub, c.handle)
	c.router, c.done = r, make(chan struct{})
	go func() {
		defer close(c.done)
		if err := r.Run(context.Background()); err != nil {
			c.log.Error("command router", "err", err)
		}
	}()
	select {
	case <-r.Running():
		return nil
	case <-c.done:
		return errors.New("command router stopped at start")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop stops answering commands. Idempotent.
func (c *CommandServer) Stop(ctx context.Context) {
	c.mu.Lock()
	r, done := c.router, c.done
	c.router = nil
	c.mu.Unlock()
	if r == nil {
		return
	}
	_ = r.Close()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

type cmdReply struct {
	Job     *projections.JobView     `json:"job,omitempty"`
	Created *bool                    `json:"created,omitempty"`
	Jobs    []*projections.JobView   `json:"jobs,omitempty"`
	Events  []*projections.EventView `json:"events,omitempty"`
	Error   *CommandError            `json:"error,omitempty"`
}

// CommandError is the error of a failed command (RFC 9457 fields).
type CommandError struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	JobID  string `json:"job_id,omitempty"`
	// Field names the refused field of an invalid-input error, and the
	// field whose value did not decode of a bad-command one, when known.
	Field string `json:"field,omitempty"`
}

func problem(err error, jobID string) *CommandError {
	slug, status := Classify(err)
	ce := &CommandError{Type: slug, Title: strings.ReplaceAll(slug, "-", " "), Status: status, Detail: err.Error(), JobID: jobID}
	var in *commands.InputError
	if errors.As(err, &in) {
		ce.Field = in.Field
	}
	return ce
}

// undecodable is the error of a command body that does not decode into v:
// invalid-input naming the field when a field's value is refused where it
// is decoded (a duration out of range), else bad-command, naming the field
// whose value does not decode when one does not.
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
	return &CommandError{Type: ProblemBadCommand, Title: "bad command", Status: 400, Detail: detail, Field: field}
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
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get(tag), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
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
		var err error
		if into := reflect.New(f.Type).Interface(); asJSON {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			err = dec.Decode(into)
		} else {
			err = streams.UnmarshalStrict(raw, into)
		}
		if err != nil {
			return name, err
		}
	}
	return "", nil
}

type idCommand struct {
	ID     string `json:"id" msgpack:"id"`
	Reason string `json:"reason,omitempty" msgpack:"reason,omitempty"`
}

// check refuses a reason where it would be dropped (get, events) or is
// too long; the id is checked by the read.
func (c *idCommand) check(verb string) error {
	if verb != "cancel" && c.Reason != "" {
		return &commands.InputError{Field: "reason", Reason: "only with cancel"}
	}
	return commands.CheckReason("reason", c.Reason)
}

// handle answers one command. It always returns nil: the reply carries the
// outcome, and there is nothing to redeliver.
func (c *CommandServer) handle(msg *message.Message) (err error) {
	reply := msg.Metadata.Get("reply")
	asJSON := strings.HasPrefix(msg.Metadata.Get("content-type"), "application/json")
	respond := func(r *cmdReply) {
		if reply == "" {
			return
		}
		b, err := encodeReply(r, asJSON)
		if err != nil {
			b, _ = encodeReply(&cmdReply{Error: problem(err, "")}, asJSON)
		}
		if err := c.store.NC.Publish(reply, b); err != nil {
			c.log.Warn("command reply", "err", err)
		}
	}
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("command panicked", "panic", p, "stack", string(debug.Stack()))
			respond(&cmdReply{Error: &CommandError{Type: ProblemInternal, Title: "internal", Status: 500, Detail: fmt.Sprint(p)}})
			err = nil
		}
	}()
	ctx, cancel := context.WithTimeout(msg.Context(), 30*time.Second)
	defer cancel()
	verb := strings.TrimPrefix(msg.Metadata.Get("subject"), streams.CommandPrefix+".")
	body := msg.Payload
	if len(body) > MaxCommandBytes {
		respond(&cmdReply{Error: &CommandError{Type: ProblemBadCommand, Title: "bad command", Status: 413,
			Detail: fmt.Sprintf("command of %d bytes is over the limit of %d", len(body), MaxCommandBytes)}})
		return nil
	}
	// decode decodes the body into v, or answers why it does not.
	decode := func(v any) bool {
		if err := decodeCommand(body, asJSON, v); err != nil {
			respond(&cmdReply{Error: undecodable(verb, body, asJSON, v, err)})
			return false
		}
		return true
	}
	switch verb {
	case "submit":
		var req commands.SubmitRequest
		if !decode(&req) {
			return nil
		}
		res, err := c.store.Submit(ctx, &req)
		if err != nil {
			respond(&cmdReply{Error: problem(err, "")})
			return nil
		}
		created := res.Created
		respond(&cmdReply{Job: projections.View(res.Job), Created: &created})
	case "get", "cancel":
		var req idCommand
		if !decode(&req) {
			return nil
		}
		if err := req.check(verb); err != nil {
			respond(&cmdReply{Error: problem(err, req.ID)})
			return nil
		}
		var snap Snapshot
		var err error
		if verb == "get" {
			if snap, err = c.store.Get(ctx, req.ID); errors.Is(err, commands.ErrNotFound) {
				snap, err = c.store.Load(ctx, req.ID)
			}
		} else if snap, err = c.store.Cancel(ctx, req.ID, req.Reason); errors.Is(err, commands.ErrTerminal) {
			err = nil // cancel of a terminal job: a no-op that returns the job
		}
		if err != nil {
			respond(&cmdReply{Error: problem(err, req.ID)})
			return nil
		}
		respond(&cmdReply{Job: projections.View(snap.Job)})
	case "list":
		var f Filter
		if !decode(&f) {
			return nil
		}
		jobs, err := c.store.List(ctx, f)
		if err != nil {
			respond(&cmdReply{Error: problem(err, "")})
			return nil
		}
		out := &cmdReply{Jobs: make([]*projections.JobView, len(jobs))}
		for i, j := range jobs {
			out.Jobs[i] = projections.View(j)
		}
		respond(out)
	case "events":
		var req idCommand
		if !decode(&req) {
			return nil
		}
		if err := req.check(verb); err != nil {
			respond(&cmdReply{Error: problem(err, req.ID)})
			return nil
		}
		out := &cmdReply{Events: []*projections.EventView{}}
		err := c.store.History(ctx, req.ID, 0, false, func(e *streams.Event) error {
			out.Events = append(out.Events, projections.ViewEvent(e))
			return nil
		})
		if err != nil {
			respond(&cmdReply{Error: problem(err, req.ID)})
			return nil
		}
		respond(out)
	default:
		respond(&cmdReply{Error: &CommandError{Type: ProblemUnknownCommand, Title: "unknown command", Status: 404,
			Detail: fmt.Sprintf("no command %q; commands are submit, get, cancel, list, events", verb)}})
	}
	return nil
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
	b, err := json.Marshal(r)
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

// natsSubscriber is a watermill Subscriber over a NATS queue subscription.
// Core NATS has no redelivery, so Ack and Nack change nothing; the handler
// answers every request itself.
type natsSubscriber struct {
	nc    *nats.Conn
	queue string

	mu     sync.Mutex
	subs   []*nats.Subscription
	closes []func()
}

func (s *natsSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	out := make(chan *message.Message, 256)
	closing := make(chan struct{})
	var state sync.RWMutex
	closed := false
	sub, err := s.nc.QueueSubscribe(topic, s.queue, func(m *nats.Msg) {
		wm := message.NewMessage(watermill.NewUUID(), m.Data)
		wm.Metadata.Set("subject", m.Subject)
		wm.Metadata.Set("reply", m.Reply)
		if m.Header != nil {
			wm.Metadata.Set("content-type", m.Header.Get("Content-Type"))
		}
		state.RLock()
		defer state.RUnlock()
		if closed {
			return
		}
		select {
		case out <- wm:
		case <-closing:
		}
	})
	if err != nil {
		return nil, err
	}
	var once sync.Once
	closeFn := func() {
		once.Do(func() {
			_ = sub.Unsubscribe()
			close(closing)
			state.Lock()
			closed = true
			close(out)
			state.Unlock()
		})
	}
	go func() {
		select {
		case <-ctx.Done():
			closeFn()
		case <-closing:
		}
	}()
	s.mu.Lock()
	s.subs = append(s.subs, sub)
	s.closes = append(s.closes, closeFn)
	s.mu.Unlock()
	return out, nil
}

func (s *natsSubscriber) Close() error {
	s.mu.Lock()
	closes := s.closes
	s.closes = nil
	s.mu.Unlock()
	for _, f := range closes {
		f()
	}
	return nil
}
