package jetflow

import (
	"context"
	"errors"
	"time"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// History (docs/audit.md): the event log folded at any scope and instant,
// not the live records.

// ReplayScope selects part of the event log for ReplayScope, VerifyScope
// and AuditVerify: the events of one job, or of the jobs of a namespace, queue
// and/or type, stored from Since to Until (the instants the log stored
// them). The zero ReplayScope is the whole log.
type ReplayScope struct {
	Job       string
	Namespace string
	Queue     string
	Type      string
	Since     time.Time // zero: from the first event
	Until     time.Time // zero: up to the last event
}

// ListAtOptions selects the jobs of ListAt: of a namespace, queue, type,
// in a state (each "": any), at most Limit (0: 100; at most MaxListAt).
type ListAtOptions struct {
	Namespace string
	Queue     string
	Type      string
	State     State
	Limit     int
}

// MaxListAt is the most jobs ListAt returns.
const MaxListAt = engine.MaxListAt

// historyBackend is what a backend does for history.
type historyBackend interface {
	replayScope(ctx context.Context, s ReplayScope) (map[domain.State]int, uint64, error)
	verifyScope(ctx context.Context, s ReplayScope, settle time.Duration) (*projections.Report, error)
	getAt(ctx context.Context, id string, at time.Time) (*projections.JobView, error)
	listAt(ctx context.Context, at time.Time, o ListAtOptions) ([]*projections.JobView, bool, error)
}

// ReplayScope rebuilds the jobs of a scope of the event log and returns
// how many are in each state, and the last event read. A time range
// rebuilds the jobs submitted in it, as they were at its end.
func (c *Client) ReplayScope(ctx context.Context, s ReplayScope) (map[State]int, uint64, error) {
	counts, last, err := c.b.replayScope(ctx, s)
	if err != nil {
		return nil, 0, publicErr(err)
	}
	out := make(map[State]int, len(counts))
	for st, n := range counts {
		out[State(st)] = n
	}
	return out, last, nil
}

// VerifyScope is Verify on a scope of the log: only the records of the
// scope's jobs are compared (the registry, schedules and queue counts only
// on the whole log).
func (c *Client) VerifyScope(ctx context.Context, s ReplayScope, settle time.Duration) (*VerifyReport, error) {
	r, err := c.b.verifyScope(ctx, s, settle)
	if err != nil {
		return nil, publicErr(err)
	}
	return verifyReport(r), nil
}

// GetAt returns a job as it was at an instant, folded from its events the
// log stored at or before it. A job with no event by then (submitted
// later) is ErrNotFound, as is a job of another namespace.
func (c *Client) GetAt(ctx context.Context, id string, at time.Time) (*JobInfo, error) {
	v, err := c.b.getAt(ctx, id, at)
	return jobInfo(v), publicErr(err)
}

// ListAt returns the jobs that were in a state at an instant, folded from
// the log (not the live records), the most recently moved first, and
// whether there were more than the limit.
func (c *Client) ListAt(ctx context.Context, at time.Time, o ListAtOptions) ([]*JobInfo, bool, error) {
	vs, more, err := c.b.listAt(ctx, at, o)
	out, err := jobInfos(vs, err)
	return out, more, err
}

func (s ReplayScope) scope() engine.LogScope {
	return engine.LogScope{Job: s.Job, Namespace: s.Namespace, Queue: s.Queue, Type: s.Type, Since: s.Since, Until: s.Until}
}

func (d direct) replayScope(ctx context.Context, s ReplayScope) (map[domain.State]int, uint64, error) {
	return engine.CountScope(ctx, d.store.JS, s.scope())
}

func (d direct) verifyScope(ctx context.Context, s ReplayScope, settle time.Duration) (*projections.Report, error) {
	return engine.VerifyScope(ctx, d.store.JS, s.scope(), settle)
}

func (d direct) getAt(ctx context.Context, id string, at time.Time) (*projections.JobView, error) {
	j, err := engine.JobAt(ctx, d.store.JS, id, at)
	if err != nil {
		return nil, err
	}
	return projections.View(j), nil
}

func (d direct) listAt(ctx context.Context, at time.Time, o ListAtOptions) ([]*projections.JobView, bool, error) {
	jobs, more, err := engine.JobsAt(ctx, d.store.JS, at, engine.AtFilter{Namespace: o.Namespace, Queue: o.Queue, Type: o.Type, State: domain.State(o.State), Limit: o.Limit})
	if err != nil {
		return nil, false, err
	}
	out := make([]*projections.JobView, len(jobs))
	for i, j := range jobs {
		out[i] = projections.View(j)
	}
	return out, more, nil
}

// instant is how the command protocol writes an instant ("": none).
func instant(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// scopeCommand is a scope on the command protocol.
type scopeCommand struct {
	Job       string `json:"job,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Queue     string `json:"queue,omitempty"`
	Type      string `json:"type,omitempty"`
	Since     string `json:"since,omitempty"`
	Until     string `json:"until,omitempty"`
}

func (s ReplayScope) command() scopeCommand {
	return scopeCommand{Job: s.Job, Namespace: s.Namespace, Queue: s.Queue, Type: s.Type, Since: instant(s.Since), Until: instant(s.Until)}
}

func (c command) replayScope(ctx context.Context, s ReplayScope) (map[domain.State]int, uint64, error) {
	var out struct {
		States  map[domain.State]int `json:"states"`
		LastSeq uint64               `json:"last_seq"`
	}
	if err := c.call(ctx, "replay", s.command(), &out, rebuildWait); err != nil {
		return nil, 0, err
	}
	if out.States == nil {
		out.States = map[domain.State]int{}
	}
	return out.States, out.LastSeq, nil
}

func (c command) verifyScope(ctx context.Context, s ReplayScope, settle time.Duration) (*projections.Report, error) {
	req := struct {
		Settle string `json:"settle"`
		scopeCommand
	}{settle.String(), s.command()}
	var out struct {
		Report *projections.Report `json:"report"`
	}
	if err := c.call(ctx, "verify", req, &out, rebuildWait); err != nil {
		return nil, err
	}
	if out.Report == nil {
		return nil, errors.New("verify: the reply has no report")
	}
	return out.Report, nil
}

func (c command) getAt(ctx context.Context, id string, at time.Time) (*projections.JobView, error) {
	return c.job(ctx, "get", map[string]string{"id": id, "at": at.UTC().Format(time.RFC3339Nano)})
}

func (c command) listAt(ctx context.Context, at time.Time, o ListAtOptions) ([]*projections.JobView, bool, error) {
	req := struct {
		At        string `json:"at"`
		Namespace string `json:"namespace,omitempty"`
		Queue     string `json:"queue,omitempty"`
		Type      string `json:"type,omitempty"`
		State     string `json:"state,omitempty"`
		Limit     int    `json:"limit,omitempty"`
	}{at.UTC().Format(time.RFC3339Nano), o.Namespace, o.Queue, o.Type, string(o.State), o.Limit}
	var out struct {
		Jobs []*projections.JobView `json:"jobs"`
		More bool                   `json:"more"`
	}
	if err := c.call(ctx, "list_at", req, &out, rebuildWait); err != nil {
		return nil, false, err
	}
	return out.Jobs, out.More, nil
}
