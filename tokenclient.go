package jetflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// A Client made with ClientOptions.Token speaks the NATS command service
// (jetflow.cmd.<verb>, docs/protocol.md) with that token instead of
// writing to JetStream itself: what it may do is what the token's role
// allows in its namespace, checked by the engine (serve --auth), and its
// NATS user needs no more than the command subjects (the client role of
// docs/security.md). It serves every method of the Client, as a client
// with the engine's permissions does (tokenverbs.go, tokenfiles.go); only
// a Worker and an Engine need the latter (they run on JetStream).

// errTokenClient is the error of a Worker or an Engine given a token
// client: they run on JetStream, which a token client does not reach.
var errTokenClient = errors.New("a token client (ClientOptions.Token) cannot run a worker or an engine: " +
	"they need a client with the engine's NATS permissions (or, for a worker, the worker role's)")

// tokenPoll is how often a token client looks at a job it waits for or
// follows (the command service answers requests; it pushes nothing).
const tokenPoll = 250 * time.Millisecond

// command is the backend of a token client: the engine's command service.
type command struct {
	nc    *nats.Conn
	token string
}

type commandReply struct {
	Job     *projections.JobView     `json:"job"`
	Created *bool                    `json:"created"`
	Jobs    []*projections.JobView   `json:"jobs"`
	Events  []*projections.EventView `json:"events"`
	Error   *engine.Problem          `json:"error"`
	// Workflow is a workflow's view (get_workflow) or its submit's answer
	// (submit_workflow, retry_workflow).
	Workflow json.RawMessage `json:"workflow"`

	// The schedule verbs': the schedule, or the schedules.
	Schedule  *projections.ScheduleView   `json:"schedule"`
	Schedules []*projections.ScheduleView `json:"schedules"`
}

// do sends one command with the client's token and decodes its reply; a
// refusal is returned as its problem (errors.Is matches it with
// ErrNotFound, ErrInvalidInput, ...).
func (c command) do(ctx context.Context, verb string, req any) (*commandReply, error) {
	var out commandReply
	if err := c.call(ctx, verb, req, &out, 30*time.Second); err != nil {
		return nil, err
	}
	return &out, nil
}

// call sends one command with the client's token and decodes its reply
// into out, waiting for it at most timeout when ctx has no deadline; a
// refusal is returned as its problem.
func (c command) call(ctx context.Context, verb string, req, out any, timeout time.Duration) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	m := c.msg(ctx, verb, b)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	res, err := c.nc.RequestMsgWithContext(ctx, m)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("%s: no jetflow engine answers commands on this NATS system: %w", verb, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", verb, err)
	}
	return decodeReply(verb, res.Data, out)
}

// msg is a command of verb with the JSON body b, the token and the
// caller's trace context (a submit continues the caller's trace,
// docs/tracing.md).
func (c command) msg(ctx context.Context, verb string, b []byte) *nats.Msg {
	m := nats.NewMsg(streams.CommandPrefix + "." + verb)
	m.Data = b
	m.Header.Set("Content-Type", "application/json")
	m.Header.Set(engine.AuthHeader, "Bearer "+c.token)
	tracing.Inject(ctx, m.Header.Set)
	return m
}

// decodeReply decodes a command's JSON reply into out, or returns the
// problem it holds.
func decodeReply(verb string, data []byte, out any) error {
	var failed struct {
		Error *engine.Problem `json:"error"`
	}
	if err := json.Unmarshal(data, &failed); err != nil {
		return fmt.Errorf("%s: the reply does not decode: %w", verb, err)
	}
	if failed.Error != nil {
		return failed.Error
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s: the reply does not decode: %w", verb, err)
	}
	return nil
}

func (c command) send(ctx context.Context, req *commands.SubmitRequest) (*projections.JobView, bool, error) {
	out, err := c.do(ctx, "submit", req)
	if err != nil {
		return nil, false, err
	}
	return out.Job, out.Created != nil && *out.Created, nil
}

func (c command) sendMany(ctx context.Context, reqs []*commands.SubmitRequest) ([]*projections.JobView, []error) {
	views, errs := make([]*projections.JobView, len(reqs)), make([]error, len(reqs))
	for i, r := range reqs {
		views[i], _, errs[i] = c.send(ctx, r)
	}
	return views, errs
}

func (c command) job(ctx context.Context, verb string, req any) (*projections.JobView, error) {
	out, err := c.do(ctx, verb, req)
	if err != nil {
		return nil, err
	}
	return out.Job, nil
}

func (c command) get(ctx context.Context, id string) (*projections.JobView, error) {
	return c.job(ctx, "get", map[string]string{"id": id})
}

func (c command) cancel(ctx context.Context, id, reason string) (*projections.JobView, error) {
	return c.job(ctx, "cancel", map[string]string{"id": id, "reason": reason})
}

// list asks the command service, whose answer is one message: a page
// after a cursor asks for growing pages rather than for every job
// (listPage).
func (c command) list(ctx context.Context, f engine.Filter, before *listCursor) ([]*projections.JobView, error) {
	return listPage(ctx, f, before, true, c.listFrom)
}

func (c command) listFrom(ctx context.Context, f engine.Filter) ([]*projections.JobView, error) {
	out, err := c.do(ctx, "list", f)
	if err != nil {
		return nil, err
	}
	if out.Jobs == nil {
		out.Jobs = []*projections.JobView{}
	}
	return out.Jobs, nil
}

func (c command) events(ctx context.Context, id string) ([]*projections.EventView, error) {
	out, err := c.do(ctx, "events", map[string]string{"id": id})
	if err != nil {
		return nil, err
	}
	return out.Events, nil
}

// wait waits for the job's end with the wait command (the engine answers
// when the job's record says it ended), again after each of its timeouts.
func (c command) wait(ctx context.Context, id string) (*projections.JobView, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, commandWait+10*time.Second)
		j, err := c.job(wctx, "wait", map[string]any{"id": id, "timeout": commandWait.Seconds()})
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, err
		}
		if j.State.Terminal() {
			return j, nil
		}
	}
}

// tail asks the tail command for the events after after (or since
// f.Since), waiting up to wait for the first.
func (c command) tail(ctx context.Context, f TailFilter, after uint64, wait time.Duration) ([]*projections.EventView, uint64, error) {
	req := map[string]any{"namespace": f.Namespace, "queue": f.Queue, "type": f.Type, "after": after, "wait": wait.String()}
	if after == 0 && !f.Since.IsZero() {
		req["since"] = f.Since
	}
	var out struct {
		Events []*projections.EventView `json:"events"`
		Next   uint64                   `json:"next"`
	}
	if err := c.call(ctx, "tail", req, &out, wait+10*time.Second); err != nil {
		return nil, 0, err
	}
	return out.Events, out.Next, nil
}

// commandWait is how long one wait command of a token client waits.
const commandWait = 25 * time.Second

// history reads the job's events, and with follow every tokenPoll those
// it has not seen, until the job's terminal event.
func (c command) history(ctx context.Context, id string, follow bool, fn func(*projections.EventView) error) error {
	t := time.NewTicker(tokenPoll)
	defer t.Stop()
	var last uint64
	for {
		evs, err := c.events(ctx, id)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Seq <= last {
				continue
			}
			last = e.Seq
			if err := fn(e); err != nil {
				return err
			}
			if follow && e.To.Terminal() {
				return nil
			}
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
