package cmdservice

import (
	"context"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// The schedule verbs: jetflow.cmd.schedule.<verb> (docs/protocol.md).
var scheduleVerbs = []string{"schedule.create", "schedule.list", "schedule.get", "schedule.update",
	"schedule.pause", "schedule.resume", "schedule.delete"}

// scheduleReply is what a schedule verb answers: the schedule (and for
// create whether it was made), or the schedules (list).
type scheduleReply struct {
	Schedule  *projections.ScheduleView    `json:"schedule,omitempty"`
	Created   *bool                        `json:"created,omitempty"`
	Schedules *[]*projections.ScheduleView `json:"schedules,omitempty"`
}

// scheduleRef names one schedule: the body of get, pause, resume and
// delete.
type scheduleRef struct {
	Namespace string `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Name      string `json:"name" msgpack:"name"`
}

// scheduleList is the body of schedule.list.
type scheduleList struct {
	Namespace string `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
}

// schedule answers a schedule verb; the principal's role was checked. A
// namespaced principal acts in its namespace (naming another is
// forbidden); without one, a schedule's namespace is the default one, and
// a list is of every namespace.
func (c *CommandServer) schedule(ctx context.Context, p *commands.Principal, verb string, asJSON bool, body []byte,
	decode func(v any) *cmdReply, failed func(err error, jobID string) *cmdReply) *cmdReply {
	sch := c.cfg.Schedules
	if sch == nil {
		return failed(errNoSchedules, "")
	}
	one := func(r *domain.ScheduleRecord, err error) *cmdReply {
		if err != nil {
			return failed(err, "")
		}
		return &cmdReply{scheduleReply: scheduleReply{Schedule: projections.ViewSchedule(r)}}
	}
	act := commands.VerbAction(verb)
	switch verb {
	case "schedule.create":
		var req commands.ScheduleRequest
		if r := decode(&req); r != nil {
			return r
		}
		if err := commands.CheckGivenNamespace(body, asJSON); err != nil {
			return failed(err, "")
		}
		ns, err := p.Scope(act, req.Namespace)
		if err != nil {
			return failed(err, "")
		}
		req.Namespace = ns
		if err := scheduleUser(p, req.Job); err != nil {
			return failed(err, "")
		}
		rec, created, err := sch.Create(ctx, &req)
		out := one(rec, err)
		if err == nil {
			out.Created = &created
		}
		return out
	case "schedule.list":
		var req scheduleList
		if len(body) > 0 {
			if r := decode(&req); r != nil {
				return r
			}
		}
		ns, err := p.Scope(act, req.Namespace)
		if err != nil {
			return failed(err, "")
		}
		recs, err := sch.List(ctx, ns)
		if err != nil {
			return failed(err, "")
		}
		views := make([]*projections.ScheduleView, len(recs))
		for i, r := range recs {
			views[i] = projections.ViewSchedule(r)
		}
		return &cmdReply{scheduleReply: scheduleReply{Schedules: &views}}
	case "schedule.update":
		var req commands.SchedulePatch
		if r := decode(&req); r != nil {
			return r
		}
		ns, err := scopeOf(p, act, req.Namespace)
		if err != nil {
			return failed(err, "")
		}
		if err := scheduleUser(p, req.Job); err != nil {
			return failed(err, "")
		}
		if req.Name == "" {
			return failed(&commands.InputError{Field: "name", Reason: "is required"}, "")
		}
		return one(sch.Update(ctx, ns, req.Name, &req))
	}
	var req scheduleRef
	if r := decode(&req); r != nil {
		return r
	}
	ns, err := scopeOf(p, act, req.Namespace)
	if err != nil {
		return failed(err, "")
	}
	switch verb {
	case "schedule.get":
		return one(sch.Get(ctx, ns, req.Name))
	case "schedule.pause":
		return one(sch.Pause(ctx, ns, req.Name))
	case "schedule.resume":
		return one(sch.Resume(ctx, ns, req.Name))
	}
	return one(sch.Delete(ctx, ns, req.Name))
}

// scopeOf is the namespace a command about one schedule acts in: the
// principal's, or the one it names, or the default one.
func scopeOf(p *commands.Principal, act commands.Action, asked string) (string, error) {
	ns, err := p.Scope(act, asked)
	if ns == "" {
		ns = domain.DefaultNS
	}
	return ns, err
}

// scheduleUser sets who a schedule's jobs run for, as a submit's
// (commands.SubmitUser): with a token, its name unless an admin names
// another.
func scheduleUser(p *commands.Principal, job *commands.SubmitRequest) error {
	if p == nil || job == nil {
		return nil
	}
	user, err := commands.SubmitUser(p.Role, p.Name, job.User)
	if err != nil {
		return err
	}
	job.User = user
	return nil
}

var errNoSchedules = problems.New(problems.Unavailable, 503, "this engine serves no schedules")
