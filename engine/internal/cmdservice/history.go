package cmdservice

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/replay"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// scopeFields are the scope of replay and verify (docs/audit.md): one job,
// a namespace, queue and/or type, and a time range (RFC 3339).
type scopeFields struct {
	Job       string `json:"job,omitempty" msgpack:"job,omitempty"`
	Namespace string `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Queue     string `json:"queue,omitempty" msgpack:"queue,omitempty"`
	Type      string `json:"type,omitempty" msgpack:"type,omitempty"`
	Since     string `json:"since,omitempty" msgpack:"since,omitempty"`
	Until     string `json:"until,omitempty" msgpack:"until,omitempty"`
}

func (f scopeFields) scope() (replay.Scope, error) {
	sc := replay.Scope{Job: f.Job, Namespace: f.Namespace, Queue: f.Queue, Type: f.Type}
	var err error
	if sc.Since, err = ParseInstant("since", f.Since); err != nil {
		return sc, err
	}
	if sc.Until, err = ParseInstant("until", f.Until); err != nil {
		return sc, err
	}
	return sc, sc.Validate()
}

// ParseInstant parses an instant of history (RFC 3339, "": none); a bad one
// is an InputError naming field.
func ParseInstant(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil || t.Year() < 1970 || t.Year() > 9999 {
		return time.Time{}, &commands.InputError{Field: field, Value: s, Reason: "want an instant in RFC 3339 (2026-01-02T15:04:05Z)"}
	}
	return t, nil
}

type listAtCommand struct {
	At        string       `json:"at" msgpack:"at"`
	Namespace string       `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Queue     string       `json:"queue,omitempty" msgpack:"queue,omitempty"`
	Type      string       `json:"type,omitempty" msgpack:"type,omitempty"`
	State     domain.State `json:"state,omitempty" msgpack:"state,omitempty"`
	Limit     int          `json:"limit,omitempty" msgpack:"limit,omitempty"`
}

// listAt: list_at (the jobs in a state at an instant, folded from the
// log). A namespaced token sees its namespace's only.
func (c *CommandServer) listAt(k *call) *cmdReply {
	var req listAtCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	if req.At == "" {
		return fail(&commands.InputError{Field: "at", Reason: "required"}, "")
	}
	at, err := ParseInstant("at", req.At)
	if err != nil {
		return fail(err, "")
	}
	f := replay.AtFilter{Namespace: req.Namespace, Queue: req.Queue, Type: req.Type, State: req.State, Limit: req.Limit}
	if err := f.Validate(); err != nil {
		return fail(err, "")
	}
	if f.Namespace, err = k.p.Scope(commands.ActRead, f.Namespace); err != nil {
		return fail(err, "")
	}
	ctx, done, r := c.rebuild(k)
	if r != nil {
		return r
	}
	defer done()
	jobs, more, err := replay.JobsAt(ctx, c.store.JS(), at, f)
	if err != nil {
		return fail(err, "")
	}
	views := make([]*projections.JobView, len(jobs))
	for i, j := range jobs {
		views[i] = projections.View(j)
	}
	return &cmdReply{Body: map[string]any{"jobs": views, "more": more}}
}

// getAt answers get with at: the job as of the instant, with get's access
// rules (another namespace's job is not found).
func (c *CommandServer) getAt(k *call, id, atText string) *cmdReply {
	at, err := ParseInstant("at", atText)
	if err != nil {
		return fail(err, id)
	}
	// A namespaced principal's fold reads its namespace's events only: a
	// job of another namespace is answered exactly as one with no event by
	// then, the same detail after the same (empty) read.
	ns := ""
	if k.p.Scoped() {
		ns = k.p.Namespace
	}
	j, err := replay.JobAt(k.ctx, c.store.JS(), ns, id, at)
	if errors.Is(err, commands.ErrNotFound) {
		err = fmt.Errorf("job %s: %w", id, commands.ErrNotFound)
	}
	if err != nil {
		return fail(err, id)
	}
	return &cmdReply{Job: projections.View(j)}
}
