package jetflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/streams"
)

// A Client made with ClientOptions.Token speaks the NATS command service
// (jetflow.cmd.<verb>, docs/protocol.md) with that token instead of
// writing to JetStream itself: what it may do is what the token's role
// allows in its namespace, checked by the engine (serve --auth), and its
// NATS user needs no more than the command subjects (the client role of
// docs/security.md). Such a client submits, gets, cancels, lists, waits
// for and reads the events of jobs; the rest (queues, workers, types,
// tokens, retry, children, replay) needs the engine's NATS permissions or
// the HTTP API, and answers ErrNeedsEngine.

// ErrNeedsEngine is the error of a call a token client cannot make.
var ErrNeedsEngine = errors.New("this needs the engine's NATS permissions (a client without a token) or the HTTP API")

// tokenPoll is how often a token client looks at the events of a job it
// follows.
const tokenPoll = 250 * time.Millisecond

type commandReply struct {
	Job     *JobInfo        `json:"job"`
	Created *bool           `json:"created"`
	Jobs    []*JobInfo      `json:"jobs"`
	Events  []*EventInfo    `json:"events"`
	Error   *engine.Problem `json:"error"`
}

// command sends one command with the client's token and decodes its
// reply; a refusal is returned as its *Problem (errors.Is matches it with
// ErrNotFound, ErrInvalidInput, ...).
func (c *Client) command(ctx context.Context, verb string, req any) (*commandReply, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(streams.CommandPrefix + "." + verb)
	m.Data = b
	m.Header.Set("Content-Type", "application/json")
	m.Header.Set(engine.AuthHeader, "Bearer "+c.token)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	res, err := c.nc.RequestMsgWithContext(ctx, m)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, fmt.Errorf("%s: no jetflow engine answers commands on this NATS system: %w", verb, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", verb, err)
	}
	var out commandReply
	if err := json.Unmarshal(res.Data, &out); err != nil {
		return nil, fmt.Errorf("%s: the reply does not decode: %w", verb, err)
	}
	if out.Error != nil {
		return nil, out.Error
	}
	return &out, nil
}

// needsEngine is the error of a call a token client cannot make.
func (c *Client) needsEngine(what string) error {
	return fmt.Errorf("%s: %w", what, ErrNeedsEngine)
}

func (c *Client) sendByCommand(ctx context.Context, req *SubmitRequest) (*JobInfo, bool, error) {
	out, err := c.command(ctx, "submit", req)
	if err != nil {
		return nil, false, err
	}
	return out.Job, out.Created != nil && *out.Created, nil
}

func (c *Client) jobByCommand(ctx context.Context, verb string, req any) (*JobInfo, error) {
	out, err := c.command(ctx, verb, req)
	if err != nil {
		return nil, err
	}
	return out.Job, nil
}

func (c *Client) listByCommand(ctx context.Context, f ListFilter) ([]*JobInfo, error) {
	out, err := c.command(ctx, "list", f)
	if err != nil {
		return nil, err
	}
	if out.Jobs == nil {
		out.Jobs = []*JobInfo{}
	}
	return out.Jobs, nil
}

func (c *Client) eventsByCommand(ctx context.Context, id string) ([]*EventInfo, error) {
	out, err := c.command(ctx, "events", map[string]string{"id": id})
	if err != nil {
		return nil, err
	}
	return out.Events, nil
}

// waitByCommand waits for the job's end with the wait command (the engine
// answers when the job's record says it ended), again after each of its
// timeouts.
func (c *Client) waitByCommand(ctx context.Context, id string) (*JobInfo, error) {
	for {
		wctx, cancel := context.WithTimeout(ctx, commandWait+10*time.Second)
		j, err := c.jobByCommand(wctx, "wait", map[string]any{"id": id, "timeout": commandWait.Seconds()})
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

// commandWait is how long one wait command of a token client waits.
const commandWait = 25 * time.Second

// followByCommand reads the job's events every tokenPoll and hands fn
// those it has not seen, until the job's terminal event.
func (c *Client) followByCommand(ctx context.Context, id string, fn func(*EventInfo) error) error {
	t := time.NewTicker(tokenPoll)
	defer t.Stop()
	var last uint64
	for {
		evs, err := c.eventsByCommand(ctx, id)
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
			if e.To.Terminal() {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
