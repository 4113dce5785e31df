package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetflow/jetflow"
)

// scheduleFlags maps the fields of a schedule request (and of its job) to
// the flags that set them, so that a refused value is reported as the
// flag.
var scheduleFlags = map[string]string{"name": "name", "namespace": "namespace", "cron": "cron", "every": "every",
	"timezone": "timezone", "overlap": "overlap", "misfire": "misfire", "jitter": "jitter",
	"job.queue": "queue", "job.max_retries": "max-retries", "job.backoff": "backoff", "job.timeout": "timeout",
	"job.tags": "tag", "job.user": "user", "job.priority": "priority",
	"queue": "queue", "max_retries": "max-retries", "backoff": "backoff", "timeout": "timeout", "tags": "tag", "user": "user",
	"priority": "priority"}

// cmdSchedule: jetflow schedule create|ls|get|pause|resume|delete.
func cmdSchedule(c *cli, args []string) int {
	sub, rest := subcommand(args)
	switch sub {
	case "create":
		c.name = "schedule create"
		return scheduleCreate(c, rest)
	case "ls", "list":
		c.name = "schedule ls"
		return scheduleList(c, rest)
	case "get", "pause", "resume", "delete":
		c.name = "schedule " + sub
		return scheduleVerb(c, sub, rest)
	case "":
		if wantsHelp(args) {
			c.printHelp()
			c.helped = true
			return exitOK
		}
		c.errorf("want a subcommand: create, ls, get, pause, resume or delete (jetflow help schedule)")
		return exitUsage
	}
	c.unknownCommand(sub, "schedule")
	return exitUsage
}

// scheduleCreate: jetflow schedule create NAME TYPE [JSON] (--cron EXPR |
// --every D) [flags].
func scheduleCreate(c *cli, args []string) int {
	fs := c.clientFlags()
	var (
		cron, tz, overlap, misfire, queue, user string
		every, jitter, backoff, tout            time.Duration
		maxRetries, priority                    int
		tags                                    stringList
	)
	fs.StringVar(&cron, "cron", "", "a cron expression: 5 fields (minute hour day month weekday) or @hourly, @daily, @every 90s, ...")
	durationVar(fs, &every, "every", 0, "an interval instead of --cron (at least 1s; ticks counted from the Unix epoch)")
	fs.StringVar(&tz, "timezone", "", "the IANA time zone of --cron (default UTC)")
	fs.StringVar(&overlap, "overlap", "", "while the previous tick's job runs: skip, allow or cancel (default skip)")
	fs.StringVar(&misfire, "misfire", "", "ticks missed while no engine ran: skip, once or all (default once)")
	durationVar(fs, &jitter, "jitter", 0, "fire each tick up to this much later (the same instant on every engine)")
	fs.StringVar(&queue, "queue", "default", "the jobs' queue")
	fs.IntVar(&maxRetries, "max-retries", jetflow.DefaultMaxRetries, "retries of a failed attempt of a job (0: none)")
	durationVar(fs, &backoff, "backoff", jetflow.DefaultBackoff, "base delay of a job's first retry")
	durationVar(fs, &tout, "timeout", jetflow.DefaultTimeout, "execution timeout of one attempt of a job")
	fs.IntVar(&priority, "priority", 0, "the jobs' priority (-1000 to 1000)")
	fs.StringVar(&user, "user", "", "who the jobs run for (quotas)")
	fs.Var(&tags, "tag", "a tag of the jobs (repeatable)")
	ns := c.namespaceFlag("the schedule's namespace, and its jobs' (default: default)")
	pos, ok := c.parse(args, 2, 3)
	if !ok || !c.checkNamespace(*ns) {
		return exitUsage
	}
	if !c.given("cron") && !c.given("every") {
		c.reportAs(problemInput("--cron"), "--cron or --every is required")
		return exitUsage
	}
	if c.given("cron") && c.given("every") {
		c.refuseFlag("every", "", "give --cron or --every, not both")
		return exitUsage
	}
	if !c.checkFlags(when("every", every == 0, "must be at least 1s"), when("queue", queue == "", "must not be empty")) {
		return exitUsage
	}
	payload := json.RawMessage("null")
	if len(pos) == 3 {
		payload = json.RawMessage(pos[2])
	}
	var opts []jetflow.SubmitOption
	set := func(name string, o jetflow.SubmitOption) {
		if c.given(name) {
			opts = append(opts, o)
		}
	}
	set("queue", jetflow.Queue(queue))
	set("max-retries", jetflow.MaxRetries(maxRetries))
	set("backoff", jetflow.Backoff(backoff))
	set("timeout", jetflow.Timeout(tout))
	set("priority", jetflow.Priority(priority))
	set("user", jetflow.User(user))
	set("tag", jetflow.Tags(tags...))
	job, err := jetflow.NewRequest(pos[1], payload, opts...)
	if err != nil {
		if c.flagInput(err, scheduleFlags) {
			return exitUsage
		}
		return c.fail(err)
	}
	req := jetflow.ScheduleRequest{Name: pos[0], Namespace: *ns, Cron: cron, Every: every, Timezone: tz, Job: *job,
		Overlap: overlap, Misfire: misfire, Jitter: jitter}
	if err := req.Validate(); err != nil {
		if c.flagInput(err, scheduleFlags) {
			return exitUsage
		}
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		s, created, err := cl.CreateSchedule(ctx, req)
		if err != nil {
			if errors.Is(err, jetflow.ErrConflict) {
				c.errorOf(err, "schedule %q exists with another spec (change it with the HTTP API's PATCH, or delete it first): %v", req.Name, err)
				return exitFailed
			}
			return c.fail(err)
		}
		if c.json {
			c.printJSON(s)
			return exitOK
		}
		word := "created"
		if !created {
			word = "exists"
		}
		fmt.Fprintf(c.out, "%s\t%s\tnext %s\n", s.Name, word, nextRun(s))
		return exitOK
	})
}

// scheduleList: jetflow schedule ls [--namespace NS].
func scheduleList(c *cli, args []string) int {
	c.clientFlags()
	ns := c.namespaceFlag("the schedules of this namespace (default: every one)")
	if _, ok := c.parse(args, 0, 0); !ok || !c.checkNamespace(*ns) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		ss, err := cl.Schedules(ctx, *ns)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			c.printJSON(map[string]any{"schedules": ss})
			return exitOK
		}
		tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAMESPACE\tNAME\tTIMING\tTYPE\tSTATE\tNEXT RUN\tLAST RUN")
		for _, s := range ss {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Namespace, s.Name, timing(s), jobType(s), scheduleState(s), nextRun(s), lastRun(s))
		}
		_ = tw.Flush()
		return exitOK
	})
}

// scheduleVerb: jetflow schedule get|pause|resume|delete NAME.
func scheduleVerb(c *cli, verb string, args []string) int {
	c.clientFlags()
	ns := c.namespaceFlag("the schedule's namespace (default: default)")
	pos, ok := c.parse(args, 1, 1)
	if !ok || !c.checkNamespace(*ns) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		do := map[string]func(context.Context, string, string) (*jetflow.ScheduleInfo, error){
			"get": cl.Schedule, "pause": cl.PauseSchedule, "resume": cl.ResumeSchedule, "delete": cl.DeleteSchedule}[verb]
		s, err := do(ctx, *ns, pos[0])
		if err != nil {
			if errors.Is(err, jetflow.ErrNotFound) {
				c.errorOf(err, "schedule %q: no such schedule", pos[0])
				return exitUsage
			}
			return c.fail(err)
		}
		if c.json {
			c.printJSON(s)
			return exitOK
		}
		if verb != "get" {
			fmt.Fprintf(c.out, "%s\t%s\n", s.Name, map[string]string{"pause": "paused", "resume": "resumed", "delete": "deleted"}[verb])
			return exitOK
		}
		c.printSchedule(s)
		return exitOK
	})
}

// printSchedule prints a schedule: its settings, then its last runs.
func (c *cli) printSchedule(s *jetflow.ScheduleInfo) {
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("name", s.Name)
	row("namespace", s.Namespace)
	row("timing", timing(s))
	if s.Jitter > 0 {
		row("jitter", s.Jitter.String())
	}
	row("overlap", s.Overlap)
	row("misfire", s.Misfire)
	row("job", string(s.Job))
	row("state", scheduleState(s))
	row("next run", nextRun(s))
	row("ticks", fmt.Sprintf("%d fired, %d skipped (overlap), %d cancelled the previous, %d missed, %d refused",
		s.Counts.Fired, s.Counts.Skipped, s.Counts.Cancelled, s.Counts.Missed, s.Counts.Refused))
	row("created", s.CreatedAt.UTC().Format(time.RFC3339)+by(s.CreatedBy))
	row("updated", s.UpdatedAt.UTC().Format(time.RFC3339)+by(s.UpdatedBy))
	_ = tw.Flush()
	if len(s.LastRuns) == 0 {
		fmt.Fprintln(c.out, "\nno runs yet")
		return
	}
	fmt.Fprintln(c.out, "\nLast runs (newest first):")
	tw = tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TICK\tOUTCOME\tJOB\tNOTE")
	for _, r := range s.LastRuns {
		note := r.Error
		if r.PreviousID != "" {
			note = "cancelled " + r.PreviousID
		}
		if r.Count > 0 && r.First != nil {
			note = fmt.Sprintf("%d ticks from %s", r.Count, r.First.UTC().Format(time.RFC3339))
		}
		job := r.JobID
		if job == "" {
			job = "-"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.At.UTC().Format(time.RFC3339), r.Outcome, job, note)
	}
	_ = tw.Flush()
}

func by(who string) string {
	if who == "" {
		return ""
	}
	return " by " + who
}

// timing is a schedule's cron expression (and zone) or interval.
func timing(s *jetflow.ScheduleInfo) string {
	if s.Cron == "" {
		return "every " + s.Every.String()
	}
	tz := s.Timezone
	if tz == "" {
		tz = "UTC"
	}
	return fmt.Sprintf("%s (%s)", s.Cron, tz)
}

func jobType(s *jetflow.ScheduleInfo) string {
	var j struct{ Type string }
	if json.Unmarshal(s.Job, &j) != nil || j.Type == "" {
		return "-"
	}
	return j.Type
}

func scheduleState(s *jetflow.ScheduleInfo) string {
	if s.Paused {
		return "paused"
	}
	return "active"
}

func nextRun(s *jetflow.ScheduleInfo) string {
	if s.NextRunAt == nil {
		return "-"
	}
	return s.NextRunAt.UTC().Format(time.RFC3339)
}

func lastRun(s *jetflow.ScheduleInfo) string {
	if len(s.LastRuns) == 0 {
		return "-"
	}
	r := s.LastRuns[0]
	out := r.At.UTC().Format(time.RFC3339) + " " + r.Outcome
	if r.JobID != "" {
		out += " " + r.JobID
	}
	return strings.TrimSpace(out)
}
