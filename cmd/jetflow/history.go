package main

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/jetflow/jetflow"
)

// History (docs/audit.md): get --at, ls --at, replay's scopes.

// foldMemory is the heap a replay in this process may grow to before the
// collector works harder: a fold allocates much and keeps little, and a
// collector that runs less often costs it less CPU.
const foldMemory = 768 << 20

// tuneForFold sets the collector of this process (the CLI's, which ends
// with the command) for a fold of the log.
func tuneForFold() {
	debug.SetGCPercent(200)
	debug.SetMemoryLimit(foldMemory)
}

const instantReason = "want an instant in RFC 3339 (2026-01-02T15:04:05Z)"

// instantFlag parses the value of flag name as an instant (RFC 3339); a
// bad one is refused naming the flag. "" is no instant.
func (c *cli) instantFlag(name, v string) (time.Time, bool) {
	if v == "" {
		if c.given(name) {
			c.refuseFlag(name, `""`, "must not be empty")
			return time.Time{}, false
		}
		return time.Time{}, true
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || t.Year() < 1970 || t.Year() > 9999 {
		c.refuseFlag(name, v, instantReason)
		return time.Time{}, false
	}
	return t, true
}

// scopeFlags are replay's scope flags.
type scopeFlags struct {
	job, namespace, queue, typ, since, until string
}

func (c *cli) addScopeFlags(s *scopeFlags) {
	c.fs.StringVar(&s.job, "job", "", "only this job's events")
	c.fs.StringVar(&s.namespace, "namespace", "", "only the events of this namespace's jobs")
	c.fs.StringVar(&s.queue, "queue", "", "only the events of this queue's jobs")
	c.fs.StringVar(&s.typ, "type", "", "only the events of this type's jobs")
	c.fs.StringVar(&s.since, "since", "", "only events the log stored at or after this instant (RFC 3339): the jobs submitted from then")
	c.fs.StringVar(&s.until, "until", "", "only events the log stored at or before this instant (RFC 3339): the jobs as they were then")
}

// scope checks the scope flags (exit 2 naming the flag).
func (c *cli) scope(s *scopeFlags) (jetflow.ReplayScope, bool) {
	empty := "must not be empty (leave it out for every job)"
	if !c.checkFlags(when("job", s.job == "", empty), when("namespace", s.namespace == "", empty),
		when("queue", s.queue == "", empty), when("type", s.typ == "", empty)) {
		return jetflow.ReplayScope{}, false
	}
	if s.namespace != "" && !c.checkNamespace(s.namespace) {
		return jetflow.ReplayScope{}, false
	}
	since, ok := c.instantFlag("since", s.since)
	if !ok {
		return jetflow.ReplayScope{}, false
	}
	until, ok := c.instantFlag("until", s.until)
	if !ok {
		return jetflow.ReplayScope{}, false
	}
	if !c.checkFlags(when("until", !since.IsZero() && until.Before(since), "before --since")) {
		return jetflow.ReplayScope{}, false
	}
	return jetflow.ReplayScope{Job: s.job, Namespace: s.namespace, Queue: s.queue, Type: s.typ, Since: since, Until: until}, true
}

// scopeFlagOf names the flag of a scope's field, for input errors.
var scopeFlagOf = map[string]string{"job": "job", "namespace": "namespace", "queue": "queue", "type": "type", "since": "since", "until": "until",
	"state": "state", "limit": "limit", "at": "at"}

// describeScope says what a scope is, for replay's first line.
func describeScope(s jetflow.ReplayScope) string {
	out := ""
	add := func(k, v string) {
		if v != "" {
			out += fmt.Sprintf(" %s %s", k, v)
		}
	}
	add("job", s.Job)
	add("namespace", s.Namespace)
	add("queue", s.Queue)
	add("type", s.Type)
	if !s.Since.IsZero() {
		add("since", s.Since.UTC().Format(time.RFC3339Nano))
	}
	if !s.Until.IsZero() {
		add("until", s.Until.UTC().Format(time.RFC3339Nano))
	}
	if out == "" {
		return ""
	}
	return " (" + out[1:] + ")"
}

// getAt prints job id as of at.
func (c *cli) getAt(ctx context.Context, cl *jetflow.Client, id, ns string, at time.Time) int {
	job, err := cl.GetAt(ctx, id, at)
	if ns != "" && err == nil && job.Namespace != ns {
		err = fmt.Errorf("job %s in namespace %s: %w", id, ns, jetflow.ErrNotFound)
	}
	if err != nil {
		return c.fail(err)
	}
	c.printJob(job)
	return exitOK
}

// listAtFlags checks ls's flags with --at (the filter's were checked) and
// runs ls --at.
func (c *cli) listAtFlags(f jetflow.ListFilter, atText string) int {
	at, ok := c.instantFlag("at", atText)
	notAt := "not with --at"
	if !ok || !c.checkFlags(when("parent", true, notAt), when("cursor", true, notAt), when("id", true, notAt),
		when("tag", true, notAt), when("error-code", true, notAt), when("error", true, notAt),
		when("payload", true, notAt), when("since", true, notAt),
		when("limit", f.Limit < 1 || f.Limit > jetflow.MaxListAt, fmt.Sprintf("must be 1 to %d with --at", jetflow.MaxListAt))) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		return c.listAt(ctx, cl, at, jetflow.ListAtOptions{Namespace: f.Namespace, Queue: f.Queue, Type: f.Type, State: f.State, Limit: f.Limit})
	})
}

// listAt prints the jobs in a state at an instant.
func (c *cli) listAt(ctx context.Context, cl *jetflow.Client, at time.Time, o jetflow.ListAtOptions) int {
	jobs, more, err := cl.ListAt(ctx, at, o)
	if err != nil {
		if c.flagInput(err, scopeFlagOf) {
			return exitUsage
		}
		return c.fail(err)
	}
	if c.json {
		if jobs == nil {
			jobs = []*jetflow.JobInfo{}
		}
		c.printJSON(struct {
			At   time.Time          `json:"at"`
			Jobs []*jetflow.JobInfo `json:"jobs"`
			More bool               `json:"more"`
		}{at.UTC(), jobs, more})
		return exitOK
	}
	c.printJobs(jobs)
	if more {
		fmt.Fprintf(c.errw, "more than %d: narrow it (--namespace, --queue, --type, --state) or raise --limit (at most %d)\n", len(jobs), jetflow.MaxListAt)
	}
	return exitOK
}
