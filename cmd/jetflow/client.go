package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetflow/jetflow"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// submitFlags maps the fields of a submit request to the flags that set
// them, so that a refused value is reported as the flag.
var submitFlags = map[string]string{"queue": "queue", "delay": "delay", "max_retries": "max-retries",
	"backoff": "backoff", "timeout": "timeout", "idempotency_key": "key", "tags": "tag", "namespace": "namespace", "user": "user",
	"concurrency_key": "concurrency-key", "unique_key": "unique-key", "unique_fields": "unique-fields",
	"unique_for": "unique-for", "unique_while": "unique-while"}

func cmdSubmit(c *cli, args []string) int {
	fs := c.clientFlags()
	var (
		queue, key, user     string
		concurrencyKey       string
		delay, backoff, tout time.Duration
		maxRetries           int
		wait                 bool
		tags                 stringList
		paths                stringList
		uniqueKey, uniqueWh  string
		uniqueFields         stringList
		uniqueFor            time.Duration
	)
	fs.StringVar(&queue, "queue", "default", "queue")
	durationVar(fs, &delay, "delay", 0, "run after this delay")
	fs.IntVar(&maxRetries, "max-retries", jetflow.DefaultMaxRetries, "retries of a failed attempt (0: none)")
	durationVar(fs, &backoff, "backoff", jetflow.DefaultBackoff, "base delay of the first retry (0: retry at once)")
	durationVar(fs, &tout, "timeout", jetflow.DefaultTimeout, "execution timeout of one attempt")
	fs.StringVar(&key, "key", "", "idempotency key")
	fs.StringVar(&user, "user", "", "who the job runs for (quotas: a queue's max_running_per_user; with --token, the token's name unless an admin names another)")
	fs.StringVar(&concurrencyKey, "concurrency-key", "", "the job's concurrency key: a queue's max_running_per_key counts the slots of its key's jobs together (docs/quotas.md)")
	fs.Var(&tags, "tag", "tag (repeatable)")
	fs.StringVar(&uniqueKey, "unique-key", "", "make the job unique by this key: while it holds it, a submit of the key gets this job (docs/unique.md)")
	fs.Var(&uniqueFields, "unique-fields", "make the job unique by a key derived from its queue, type and these payload fields (comma-separated or repeated; a.b: field b of object a)")
	durationVar(fs, &uniqueFor, "unique-for", 0, "a unique job holds its key at most this long after its submit (0: as long as --unique-while holds)")
	fs.StringVar(&uniqueWh, "unique-while", "", "the states a unique job holds its key in: active (default), not-succeeded or any")
	fs.BoolVar(&wait, "wait", false, "wait until the job is terminal; exit 0 succeeded, 1 failed or cancelled")
	fs.Var(&paths, "file", "an input file to store with the job, named by its base name; a directory: its tree, named by their paths in it (repeatable; docs/files.md)")
	ns := c.namespaceFlag("the job's namespace (default: default)")
	pos, ok := c.parse(args, 1, 2)
	if !ok || !c.checkNamespace(*ns) {
		return exitUsage
	}
	if !c.checkFlags(when("queue", queue == "", "must not be empty"),
		when("key", key == "", "must not be empty (leave --key out for no key)")) {
		return exitUsage
	}
	payload := json.RawMessage("null")
	if len(pos) == 2 {
		payload = json.RawMessage(pos[1])
	}
	// Only the flags given set options: the others leave the request's
	// field unset, and the engine's default applies. A value out of range
	// is refused by the request's check, and reported as its flag.
	var opts []jetflow.SubmitOption
	set := func(name string, o jetflow.SubmitOption) {
		if c.given(name) {
			opts = append(opts, o)
		}
	}
	set("queue", jetflow.Queue(queue))
	set("delay", jetflow.Delay(delay))
	set("max-retries", jetflow.MaxRetries(maxRetries))
	set("backoff", jetflow.Backoff(backoff))
	set("timeout", jetflow.Timeout(tout))
	set("key", jetflow.IdempotencyKey(key))
	set("tag", jetflow.Tags(tags...))
	set("user", jetflow.User(user))
	set("concurrency-key", jetflow.ConcurrencyKey(concurrencyKey))
	set("unique-key", jetflow.UniqueKey(uniqueKey))
	var fields []string
	for _, f := range uniqueFields {
		fields = append(fields, strings.Split(f, ",")...)
	}
	set("unique-fields", jetflow.UniqueFields(fields...))
	set("unique-for", jetflow.UniqueFor(uniqueFor))
	set("unique-while", jetflow.UniqueWhile(jetflow.UniqueScope(uniqueWh)))
	if *ns != "" {
		opts = append(opts, jetflow.Namespace(*ns))
	}
	if len(paths) > 0 {
		files, closeFiles, err := inputFiles(paths)
		if err != nil {
			c.errorOf(err, "%v", err)
			return exitUsage
		}
		defer closeFiles()
		opts = append(opts, jetflow.Files(files))
	}
	req, err := jetflow.NewRequest(pos[0], payload, opts...)
	if err != nil {
		if c.flagInput(err, submitFlags) {
			return exitUsage
		}
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		job, created, err := cl.Send(envTrace(ctx), req)
		if err != nil {
			return c.fail(err)
		}
		if !job.State.Terminal() {
			c.warnUnserved(ctx, cl, job)
		}
		if !wait {
			if c.json {
				c.printJSON(job)
			} else if created {
				fmt.Fprintf(c.out, "%s\t%s\n", job.ID, job.State)
			} else if job.Unique != nil && key == "" {
				fmt.Fprintf(c.out, "%s\t%s\t(the job that holds unique key %q)\n", job.ID, job.State, job.Unique.Key)
			} else {
				fmt.Fprintf(c.out, "%s\t%s\t(existing job for key %q)\n", job.ID, job.State, key)
			}
			return exitOK
		}
		if !c.json {
			fmt.Fprintf(c.errw, "submitted %s, waiting...\n", job.ID)
		}
		return c.waitAndPrint(ctx, cl, job, 0)
	})
}

// waitAndPrint waits for the job to end (at most timeout, if not 0) and
// prints it; unless --json, each attempt's outcome is printed on stderr
// as it happens.
func (c *cli) waitAndPrint(ctx context.Context, cl *jetflow.Client, sent *jetflow.JobInfo, timeout time.Duration) int {
	id := sent.ID
	wctx := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	stop := func() {}
	if !c.json {
		stop = c.followAttempts(wctx, cl, sent)
	}
	job, err := cl.Wait(wctx, id)
	stop()
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		cur, gerr := cl.Get(ctx, id)
		if gerr != nil {
			return c.fail(gerr)
		}
		msg := fmt.Sprintf("timed out after %s; job %s is %s", timeout, id, cur.State)
		if c.json {
			c.printJSON(map[string]any{"error": errorBody(problemTimeout(), msg), "job": cur})
			return exitTimeout
		}
		c.printJob(cur)
		c.errorf("%s", msg)
		return exitTimeout
	}
	if err != nil {
		if ctx.Err() != nil {
			return exitUsage
		}
		return c.fail(err)
	}
	c.printJob(job)
	if job.State == jetflow.Succeeded {
		return exitOK
	}
	return exitFailed
}

func (c *cli) printJob(j *jetflow.JobInfo) {
	if c.json {
		c.printJSON(j)
		return
	}
	w := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(w, "%s\t%v\n", k, v) }
	row("id", j.ID)
	row("type", j.Type)
	row("namespace", j.Namespace)
	row("queue", j.Queue)
	row("state", j.State)
	row("attempts", fmt.Sprintf("%d (retries used %d of %d)", j.Attempts, j.Retries, j.MaxRetries))
	row("payload", string(j.Payload))
	if string(j.Result) != "null" {
		row("result", string(j.Result))
	}
	if f := j.ResultRef; f != nil {
		row("result_ref", fmt.Sprintf("%s (%d bytes, %s)", f.Name, f.Size, f.Digest))
	}
	if j.Error != nil {
		msg := j.Error.Message
		if j.Error.Code != "" {
			msg = j.Error.Code + ": " + msg
		}
		row("error", msg)
	}
	if j.QueuePosition != nil {
		row("queue_position", fmt.Sprintf("%d ahead", *j.QueuePosition))
	}
	if j.User != "" {
		row("user", j.User)
	}
	if j.RetryOf != "" {
		of := j.RetryOf
		if j.FailedPieces {
			of += " (its failed pieces only)"
		}
		row("retry_of", of)
	}
	if j.ConcurrencyKey != "" {
		row("concurrency_key", j.ConcurrencyKey)
	}
	if u := j.Unique; u != nil {
		terms := "while " + string(u.While)
		if u.Until != nil {
			terms += ", until " + u.Until.Format(time.RFC3339)
		}
		if !u.Holds {
			terms += " (released)"
		}
		row("unique_key", u.Key+" ("+terms+")")
		if j.Duplicates > 0 {
			row("duplicates", fmt.Sprintf("%d submits of its key answered with it", j.Duplicates))
		}
	}
	if j.Hold != nil {
		row("waits", j.Hold.Message)
	}
	if j.PendingPosition != nil {
		row("pending_position", fmt.Sprintf("%d pending jobs admitted before it", *j.PendingPosition))
	}
	if f := j.Fanout; f != nil {
		row("fanout", fmt.Sprintf("%d %s (policy %s): %d succeeded, %d failed, %d cancelled", f.Total, f.Kind, f.Policy,
			f.Succeeded, f.Failed, f.Cancelled))
		for _, e := range f.Errors {
			row("", fmt.Sprintf("%dx %s", e.Count, e.Message))
		}
	}
	if j.ParentID != "" {
		row("parent", j.ParentID)
	}
	if j.Progress != nil {
		p := fmt.Sprintf("%d/%d", j.Progress.Current, j.Progress.Total)
		if j.Progress.Percent != nil {
			p = progressBar(*j.Progress.Percent) + " " + p + fmt.Sprintf(" (%.1f%%)", *j.Progress.Percent)
		}
		if j.Progress.Message != "" {
			p += " " + j.Progress.Message
		}
		row("progress", p)
	}
	row("created_at", j.CreatedAt.Format(time.RFC3339Nano))
	for _, t := range []struct {
		k string
		v *time.Time
	}{{"run_at", j.RunAt}, {"queued_at", j.QueuedAt}, {"started_at", j.StartedAt}, {"finished_at", j.FinishedAt}} {
		if t.v != nil {
			row(t.k, t.v.Format(time.RFC3339Nano))
		}
	}
	if j.DurationSeconds != nil {
		row("duration", time.Duration(*j.DurationSeconds*float64(time.Second)).Round(time.Microsecond))
	}
	if j.Worker != "" {
		row("worker", j.Worker)
	}
	w.Flush()
}

func cmdGet(c *cli, args []string) int {
	fs := c.clientFlags()
	ns := c.namespaceFlag("only a job of this namespace (another's is not found)")
	var watch bool
	fs.BoolVar(&watch, "watch", false, "redraw the job's line (state, progress) until it ends, then print it; exit as wait does")
	atFlag := fs.String("at", "", "the job as it was at this instant (RFC 3339), folded from the event log")
	pos, ok := c.parse(args, 1, 1)
	if !ok || !c.checkNamespace(*ns) || !c.checkFlags(when("watch", watch && c.given("at"), "not with --at")) {
		return exitUsage
	}
	at, ok := c.instantFlag("at", *atFlag)
	if !ok {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		if !at.IsZero() {
			return c.getAt(ctx, cl, pos[0], *ns, at)
		}
		job, err := c.jobIn(ctx, cl, pos[0], *ns)
		if err != nil {
			return c.fail(err)
		}
		if watch {
			if job.State == jetflow.Queued {
				c.warnUnserved(ctx, cl, job)
			}
			return c.watchJob(ctx, cl, job)
		}
		c.printJob(job)
		if job.State == jetflow.Queued {
			c.warnUnserved(ctx, cl, job)
		}
		return exitOK
	})
}

func cmdWait(c *cli, args []string) int {
	fs := c.clientFlags()
	var timeout time.Duration
	durationVar(fs, &timeout, "timeout", 0, "give up after this long (exit 3); 0: wait as long as it takes")
	pos, ok := c.parse(args, 1, 1)
	if !ok || !c.checkFlags(when("timeout", timeout < 0, "must not be negative")) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		job, err := cl.Get(ctx, pos[0])
		if err != nil {
			c.errorOf(err, "%v", err)
			return exitUsage
		}
		return c.waitAndPrint(ctx, cl, job, timeout)
	})
}

// filterFlags adds the flags of a list's filter (ls, bulk) to c's flags,
// setting f; the function returned, after parsing, completes f and checks
// the flags (false: a usage error was printed).
func (c *cli) filterFlags(f *jetflow.ListFilter) func() bool {
	fs := c.fs
	var state string
	fs.StringVar(&state, "state", "", "only jobs in this state")
	fs.StringVar(&f.Queue, "queue", "", "only jobs of this queue")
	fs.StringVar(&f.Type, "type", "", "only jobs of this type")
	fs.StringVar(&f.Parent, "parent", "", "only children of this job")
	var payload stringList
	var since time.Duration
	fs.StringVar(&f.IDPrefix, "id", "", "only jobs whose id begins with this")
	fs.StringVar(&f.Tag, "tag", "", "only jobs with this tag")
	fs.StringVar(&f.ErrorCode, "error-code", "", "only jobs whose last error has this code (TIMEOUT, EXIT_1, ...)")
	fs.StringVar(&f.Error, "error", "", "only jobs whose last error's code or message contains this text (any case)")
	fs.Var(&payload, "payload", "only jobs with this payload field: `path=value` (customer=42, customer.id=42); repeatable")
	durationVar(fs, &since, "since", 0, "only jobs that finished in this last span (1h, 30m)")
	ns := c.namespaceFlag("only jobs of this namespace")
	return func() bool {
		if !c.checkNamespace(*ns) {
			return false
		}
		f.Payload = payload
		if since > 0 {
			f.FinishedAfter = time.Now().Add(-since)
		}
		f.Namespace = *ns
		f.State = jetflow.State(state)
		// An empty filter matches every job: given on purpose it would
		// select everything instead of what was asked for.
		empty := "must not be empty (leave it out for every job)"
		return c.checkFlags(when("state", state == "", empty), when("queue", f.Queue == "", empty),
			when("type", f.Type == "", empty), when("parent", f.Parent == "", empty),
			when("since", since <= 0, "must be more than 0"),
			when("id", f.IDPrefix == "", empty), when("tag", f.Tag == "", empty),
			when("error-code", f.ErrorCode == "", empty), when("error", f.Error == "", empty))
	}
}

// checkListFilter refuses a filter the engine would refuse, naming its
// flag (exit 2), before anything is connected to.
func (c *cli) checkListFilter(f jetflow.ListFilter) (int, bool) {
	if err := f.Validate(); err != nil {
		if c.flagInput(err, listFlags) {
			return exitUsage, false
		}
		return c.fail(err), false
	}
	return exitOK, true
}

// printJobs prints jobs as a table, a line each.
func (c *cli) printJobs(jobs []*jetflow.JobInfo) {
	w := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tNAMESPACE\tTYPE\tQUEUE\tSTATE\tATTEMPTS\tCREATED")
	for _, j := range jobs {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", j.ID, j.Namespace, j.Type, j.Queue, j.State, j.Attempts, j.CreatedAt.Format(time.RFC3339))
	}
	w.Flush()
}

// listFlags maps the fields of a list filter to the flags that set them.
var listFlags = map[string]string{"state": "state", "queue": "queue", "type": "type", "parent": "parent", "limit": "limit",
	"before": "cursor", "id": "id", "tag": "tag", "error_code": "error-code", "error": "error", "payload": "payload",
	"finished_after": "since"}

func cmdList(c *cli, args []string) int {
	fs := c.clientFlags()
	var f jetflow.ListFilter
	fs.IntVar(&f.Limit, "limit", 100, "at most this many (0: all)")
	fs.StringVar(&f.Before, "cursor", "", "the next page: the jobs after the cursor a former ls printed")
	filter := c.filterFlags(&f)
	atFlag := fs.String("at", "", "the jobs as they were at this instant (RFC 3339), folded from the event log: with --namespace, --queue, --type, --state, --limit (1-1000) only")
	if _, ok := c.parse(args, 0, 0); !ok || !filter() {
		return exitUsage
	}
	if c.given("at") {
		return c.listAtFlags(f, *atFlag)
	}
	if !c.checkFlags(when("cursor", f.Before == "", "must not be empty (leave it out for the first page)"),
		when("limit", f.Limit < 0, "must be 0 (all) or more")) {
		return exitUsage
	}
	if code, ok := c.checkListFilter(f); !ok {
		return code
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		// One more than the page says whether there are more; the engine's
		// client reads every job anyway, and counts them. A token's answer
		// is one message: it asks for one more only.
		ask := f
		if f.Limit > 0 {
			ask.Limit = 0
			if c.token != "" {
				ask.Limit = f.Limit + 1
			}
		}
		jobs, err := cl.List(ctx, ask)
		if err != nil {
			return c.fail(err)
		}
		more, next := 0, ""
		if f.Limit > 0 && len(jobs) > f.Limit {
			more, jobs = len(jobs)-f.Limit, jobs[:f.Limit]
			next = jobs[len(jobs)-1].Cursor()
		}
		if c.json {
			if jobs == nil {
				jobs = []*jetflow.JobInfo{}
			}
			c.printJSON(struct {
				Jobs       []*jetflow.JobInfo `json:"jobs"`
				NextCursor string             `json:"next_cursor"`
			}{jobs, next})
			return exitOK
		}
		c.printJobs(jobs)
		if more > 0 {
			count := fmt.Sprintf("%d more", more)
			if c.token != "" {
				count = "more"
			}
			fmt.Fprintf(c.errw, "%s: %s\n", count, c.nextPage(next))
		}
		return exitOK
	})
}

// nextPage is the command of ls's next page: the flags given, and the
// cursor.
func (c *cli) nextPage(cursor string) string {
	cmd := []string{"jetflow", "ls", "--cursor", cursor}
	for _, name := range []string{"state", "queue", "type", "parent", "limit", "namespace"} {
		if c.given(name) {
			cmd = append(cmd, "--"+name, shellQuote(c.fs.Lookup(name).Value.String()))
		}
	}
	return strings.Join(cmd, " ")
}

// shellQuote quotes s for a shell if it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.:/@,+=", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func cmdReprioritize(c *cli, args []string) int {
	fs := c.clientFlags()
	priority := fs.Int("priority", 0, "the job's new priority, -1000 to 1000 (higher first); required")
	pos, ok := c.parse(args, 1, 1)
	if !ok {
		return exitUsage
	}
	if !c.given("priority") {
		c.reportAs(problemInput("--priority"), "--priority is required")
		return exitUsage
	}
	if !c.checkFlags(when("priority", *priority < -1000 || *priority > 1000, "must be -1000 to 1000")) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		job, err := cl.Reprioritize(ctx, pos[0], *priority)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			c.printJSON(job)
		} else {
			fmt.Fprintf(c.out, "%s\t%s\tpriority %d\n", job.ID, job.State, job.Priority)
		}
		return exitOK
	})
}

func cmdCancel(c *cli, args []string) int {
	fs := c.clientFlags()
	var reason string
	fs.StringVar(&reason, "reason", "", "why (recorded in the event)")
	pos, ok := c.parse(args, 1, 1)
	if !ok {
		return exitUsage
	}
	if !c.checkFlags(when("reason", len(reason) > jetflow.MaxReasonBytes,
		fmt.Sprintf("%d bytes: at most %d", len(reason), jetflow.MaxReasonBytes))) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		// A job that has ended is left as it is (Cancel would return it
		// unchanged): say so, rather than print it as if cancelled.
		job, err := cl.Get(ctx, pos[0])
		if err != nil {
			return c.fail(err)
		}
		ended := job.State.Terminal()
		if !ended {
			if job, err = cl.Cancel(ctx, pos[0], reason); err != nil {
				return c.fail(err)
			}
			ended = job.State != jetflow.Cancelled // it ended first
		}
		if c.json {
			c.printJSON(struct {
				*jetflow.JobInfo
				Cancelled bool `json:"cancelled"`
			}{job, !ended})
		} else if !ended {
			fmt.Fprintf(c.out, "%s\t%s\n", job.ID, job.State)
		} else {
			fmt.Fprintf(c.errw, "jetflow cancel: job %s already %s: nothing to cancel\n", job.ID, job.State)
		}
		if ended {
			return exitFailed // nothing was cancelled
		}
		return exitOK
	})
}

func cmdEvents(c *cli, args []string) int {
	fs := c.clientFlags()
	var follow, steps bool
	fs.BoolVar(&follow, "follow", false, "keep printing new events until the job is terminal")
	fs.BoolVar(&steps, "steps", true, "a workflow: its steps' events too, in log order, each after its step's name (--steps=false: the workflow's own)")
	ns := c.namespaceFlag("only a job of this namespace (another's is not found)")
	pos, ok := c.parse(args, 1, 1)
	if !ok || !c.checkNamespace(*ns) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		if *ns != "" {
			if _, err := c.jobIn(ctx, cl, pos[0], *ns); err != nil {
				return c.fail(err)
			}
		}
		print := func(e *jetflow.EventInfo) error {
			if c.json {
				b, _ := json.Marshal(e)
				fmt.Fprintln(c.out, string(b))
				return nil
			}
			fmt.Fprintln(c.out, formatEvent(e))
			return nil
		}
		var err error
		if follow {
			err = cl.Follow(ctx, pos[0], print)
		} else {
			var evs []*jetflow.EventInfo
			if evs, err = cl.Events(ctx, pos[0]); err == nil {
				var named []stepEvent
				if steps {
					named, err = workflowEvents(ctx, cl, pos[0], evs)
				}
				if err == nil && named != nil {
					c.printStepEvents(named)
				} else if err == nil {
					for _, e := range evs {
						_ = print(e)
					}
				}
			}
		}
		if err != nil && ctx.Err() == nil {
			return c.fail(err)
		}
		return exitOK
	})
}

// stepEvent is an event of a workflow or of one of its steps (Step: its
// name; "" for the workflow's own).
type stepEvent struct {
	Step string `json:"step,omitempty"`
	*jetflow.EventInfo
}

// workflowEvents are the events of workflow id (evs, its own) and of its
// steps, in log order (one stream: its sequence orders them); nil when id
// is not a workflow.
func workflowEvents(ctx context.Context, cl *jetflow.Client, id string, evs []*jetflow.EventInfo) ([]stepEvent, error) {
	wf, err := cl.GetWorkflow(ctx, id)
	if errors.Is(err, jetflow.ErrNotFound) {
		return nil, nil // not a workflow
	}
	if err != nil {
		return nil, err
	}
	out := make([]stepEvent, 0, len(evs)+4*len(wf.Steps))
	for _, e := range evs {
		out = append(out, stepEvent{EventInfo: e})
	}
	for _, s := range wf.Steps {
		if s.ID == "" || s.Status == "missing" {
			continue
		}
		sevs, err := cl.Events(ctx, s.ID)
		if errors.Is(err, jetflow.ErrNotFound) {
			continue // purged
		}
		if err != nil {
			return nil, fmt.Errorf("events of step %s: %w", s.Name, err)
		}
		for _, e := range sevs {
			out = append(out, stepEvent{Step: s.Name, EventInfo: e})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, nil
}

func (c *cli) printStepEvents(evs []stepEvent) {
	width := len("workflow")
	for _, e := range evs {
		width = max(width, len(e.Step))
	}
	for _, e := range evs {
		if c.json {
			b, _ := json.Marshal(e)
			fmt.Fprintln(c.out, string(b))
			continue
		}
		name := e.Step
		if name == "" {
			name = "workflow"
		}
		fmt.Fprintf(c.out, "%-*s  %s\n", width, name, formatEvent(e.EventInfo))
	}
}

func formatEvent(e *jetflow.EventInfo) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  #%-6d %-26s", e.Time.Format("15:04:05.000"), e.Seq, e.Type)
	if e.To != "" {
		from := string(e.From)
		if from == "" {
			from = "new"
		}
		fmt.Fprintf(&b, " %s -> %s", from, e.To)
	}
	if e.Name != "" {
		fmt.Fprintf(&b, " %s", e.Name)
	}
	if e.Level == "warning" || e.Level == "error" {
		fmt.Fprintf(&b, " [%s]", e.Level)
	}
	if e.Attempt > 0 {
		fmt.Fprintf(&b, "  attempt %d", e.Attempt)
	}
	if e.Actor != "" {
		fmt.Fprintf(&b, "  by %s", e.Actor)
	}
	if e.Progress != nil {
		fmt.Fprintf(&b, "  %d/%d", e.Progress.Current, e.Progress.Total)
	}
	if c := e.Counts; c != nil {
		fmt.Fprintf(&b, "  pieces: %d succeeded, %d failed, %d cancelled", c.Succeeded, c.Failed, c.Cancelled)
	}
	if e.Message != "" {
		fmt.Fprintf(&b, "  %q", e.Message)
	}
	if e.Error != nil && e.Error.Code != "" {
		fmt.Fprintf(&b, "  [%s]", e.Error.Code)
	}
	if e.RunAt != nil {
		fmt.Fprintf(&b, "  run_at %s", e.RunAt.Format(time.RFC3339))
	}
	if len(e.Result) > 0 {
		fmt.Fprintf(&b, "  result %s", e.Result)
	}
	if len(e.Fields) > 0 {
		if f, err := json.Marshal(e.Fields); err == nil {
			fmt.Fprintf(&b, "  %s", f)
		}
	}
	return b.String()
}

func cmdReplay(c *cli, args []string) int {
	fs := c.clientFlags()
	var verify bool
	var settle time.Duration
	fs.BoolVar(&verify, "verify", false, "diff the state rebuilt from the log against the jobs bucket; exit 1 if they differ")
	durationVar(fs, &settle, "settle", 3*time.Second, "with --verify: how long a record that is behind the log may take to catch up (0: no wait)")
	var sf scopeFlags
	c.addScopeFlags(&sf)
	if _, ok := c.parse(args, 0, 0); !ok {
		return exitUsage
	}
	if !c.checkFlags(when("settle", settle < 0, "must not be negative"),
		when("settle", !verify, "only with --verify")) {
		return exitUsage
	}
	sc, ok := c.scope(&sf)
	if !ok {
		return exitUsage
	}
	whole := sc == (jetflow.ReplayScope{})
	tuneForFold()
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		if !verify {
			var counts map[jetflow.State]int
			var last uint64
			var err error
			if whole {
				counts, last, err = cl.Replay(ctx)
			} else {
				counts, last, err = cl.ReplayScope(ctx, sc)
			}
			if err != nil {
				if c.flagInput(err, scopeFlagOf) {
					return exitUsage
				}
				return c.fail(err)
			}
			total := 0
			for _, n := range counts {
				total += n
			}
			if c.json {
				c.printJSON(map[string]any{"jobs": total, "last_seq": last, "states": counts})
				return exitOK
			}
			fmt.Fprintf(c.out, "rebuilt %d jobs from events 1..%d%s\n", total, last, describeScope(sc))
			for _, s := range []jetflow.State{jetflow.Pending, jetflow.Scheduled, jetflow.Queued, jetflow.Claimed, jetflow.Running,
				jetflow.Waiting, jetflow.Succeeded, jetflow.Failed, jetflow.Cancelled} {
				if counts[s] > 0 {
					fmt.Fprintf(c.out, "  %-10s %d\n", s, counts[s])
				}
			}
			return exitOK
		}
		var rep *jetflow.VerifyReport
		var err error
		if whole {
			rep, err = cl.Verify(ctx, settle)
		} else {
			rep, err = cl.VerifyScope(ctx, sc, settle)
		}
		if err != nil {
			if c.flagInput(err, scopeFlagOf) {
				return exitUsage
			}
			return c.fail(err)
		}
		if c.json {
			if rep.Diffs == nil {
				rep.Diffs = []jetflow.VerifyDiff{}
			}
			c.printJSON(rep)
		} else {
			if whole {
				fmt.Fprintf(c.out, "verified %d jobs (events 1..%d) against %d records, %d types, namespaces, tokens and queue limits, and %d schedules: %d differ\n",
					rep.Jobs, rep.LastSeq, rep.Records, rep.Registry, rep.Schedules, len(rep.Diffs))
			} else {
				fmt.Fprintf(c.out, "verified %d jobs%s (events 1..%d) against %d records: %d differ\n",
					rep.Jobs, describeScope(sc), rep.LastSeq, rep.Records, len(rep.Diffs))
			}
			for _, name := range slices.Sorted(maps.Keys(rep.Slots)) {
				sl := rep.Slots[name]
				checked := "no admitter answered: not compared"
				if rep.SlotsChecked {
					checked = "the admitter agrees"
				}
				fmt.Fprintf(c.out, "  queue %s: %d running, %d pending (from the log; %s)\n", name, sl.Running, sl.Pending, checked)
			}
			if rep.UniqueJobs > 0 {
				fmt.Fprintf(c.out, "  %d unique jobs checked against the jobs of their key before them\n", rep.UniqueJobs)
			}
			if rep.RateAdmissions > 0 {
				fmt.Fprintf(c.out, "  %d admissions of queues with a rate limit checked against it\n", rep.RateAdmissions)
			}
			for _, d := range rep.Diffs {
				fmt.Fprintf(c.out, "  %s  %s", d.ID, d.Reason)
				if len(d.Fields) > 0 {
					fmt.Fprintf(c.out, " (%s)", strings.Join(d.Fields, ", "))
				}
				fmt.Fprintln(c.out)
			}
		}
		if len(rep.Diffs) > 0 {
			return exitFailed
		}
		return exitOK
	})
}

func progressBar(pct float64) string {
	const width = 20
	n := int(pct / 100 * width)
	n = max(0, min(width, n))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}

func cmdTree(c *cli, args []string) int {
	fs := c.clientFlags()
	var most int
	fs.IntVar(&most, "max", 50, "children shown per parent (the rest are summarized; 0: none)")
	pos, ok := c.parse(args, 1, 1)
	if !ok || !c.checkFlags(when("max", most < 0, "must be 0 or more")) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		root, err := cl.Get(ctx, pos[0])
		if err != nil {
			return c.fail(err)
		}
		type node struct {
			Job      *jetflow.JobInfo `json:"job"`
			Children []*node          `json:"children,omitempty"`
		}
		var build func(j *jetflow.JobInfo, depth int) (*node, error)
		build = func(j *jetflow.JobInfo, depth int) (*node, error) {
			n := &node{Job: j}
			if j.Fanout == nil || j.Fanout.Kind != "children" || depth > 20 {
				return n, nil
			}
			kids, err := cl.Children(ctx, j.ID)
			if err != nil {
				return nil, err
			}
			for _, k := range kids {
				kn, err := build(k, depth+1)
				if err != nil {
					return nil, err
				}
				n.Children = append(n.Children, kn)
			}
			return n, nil
		}
		tree, err := build(root, 0)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			c.printJSON(tree)
			return exitOK
		}
		var show func(n *node, prefix, branch string)
		show = func(n *node, prefix, branch string) {
			j := n.Job
			line := fmt.Sprintf("%s %s %s", j.ID, j.Type, j.State)
			if f := j.Fanout; f != nil {
				line += fmt.Sprintf("  %s %d/%d %s: %d succeeded, %d failed, %d cancelled", progressBar(f.Percent), f.Finished, f.Total, f.Kind,
					f.Succeeded, f.Failed, f.Cancelled)
			} else if j.Progress != nil && j.Progress.Percent != nil {
				line += "  " + progressBar(*j.Progress.Percent)
			}
			fmt.Fprintln(c.out, prefix+branch+line)
			next := prefix
			switch branch {
			case "├── ":
				next += "│   "
			case "└── ":
				next += "    "
			}
			shown := n.Children
			if len(shown) > most {
				shown = shown[:most]
			}
			for i, k := range shown {
				b := "├── "
				if i == len(shown)-1 && len(n.Children) <= most {
					b = "└── "
				}
				show(k, next, b)
			}
			if rest := len(n.Children) - len(shown); rest > 0 {
				counts := map[jetflow.State]int{}
				for _, k := range n.Children[len(shown):] {
					counts[k.Job.State]++
				}
				fmt.Fprintf(c.out, "%s└── ... %d more: %v\n", next, rest, counts)
			}
		}
		show(tree, "", "")
		return exitOK
	})
}
