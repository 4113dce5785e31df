package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jetflow/jetflow"
)

// Bulk actions from the command line: retry, cancel or purge every job a
// list's filter selects, as POST /api/v1/jobs/bulk does over HTTP. Each
// job's change is the ordinary one (its cancel; its retry, a new job with
// retry_of; its purge, with its children), an event naming the caller.
const (
	maxBulkJobs    = 100_000 // jobs one bulk action may select (the HTTP API's bound)
	bulkWorkers    = 8       // jobs changed at once
	bulkPage       = 1000    // jobs listed per request
	maxBulkErrors  = 10      // errors the summary lists
	bulkReasonDflt = "bulk action"
)

// bulkResult is what a bulk action did.
type bulkResult struct {
	Action  string   `json:"action"`
	DryRun  bool     `json:"dry_run,omitempty"`
	Matched int      `json:"matched"` // jobs the filter selected
	Changed int      `json:"changed"` // cancelled, retried or purged
	Skipped int      `json:"skipped"` // not applicable: a cancel of a finished job, a retry of one not finished or retried already, a purge of one not finished (or gone already)
	Failed  int      `json:"failed"`  // refused for another reason (Errors)
	Errors  []string `json:"errors,omitempty"`
}

func cmdBulk(c *cli, args []string) int {
	fs := c.clientFlags()
	var f jetflow.ListFilter
	filter := c.filterFlags(&f)
	dry := fs.Bool("dry-run", false, "say how many jobs the filter selects; change nothing")
	yes := fs.Bool("yes", false, "do not ask for confirmation (needed without a terminal)")
	reason := fs.String("reason", "", "why (recorded in each cancel's or purge's event)")
	pieces := fs.Bool("failed-pieces", false, "retry: run again only the failed pieces of each fan-out selected (the others are carried over); a job that did not fan out, or whose pieces all succeeded, is skipped")
	pos, ok := c.parse(args, 1, 1)
	if !ok || !filter() {
		return exitUsage
	}
	action := pos[0]
	if action != "retry" && action != "cancel" && action != "purge" {
		c.reportAs(problemUsage("action"), "%q: want retry, cancel or purge", action)
		return exitUsage
	}
	if !c.checkFlags(when("reason", len(*reason) > jetflow.MaxReasonBytes,
		fmt.Sprintf("%d bytes: at most %d", len(*reason), jetflow.MaxReasonBytes)),
		when("reason", *reason != "" && action == "retry", "only a cancel or a purge has a reason"),
		when("failed-pieces", *pieces && action != "retry", "only a retry runs a fan-out's failed pieces")) {
		return exitUsage
	}
	if code, ok := c.checkListFilter(f); !ok {
		return code
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		// A direct client reads the whole jobs bucket for any page: one
		// read of all of it; a token's answer is one message: pages.
		page := 0
		if c.token != "" {
			page = bulkPage
		}
		jobs, err := selectAll(ctx, cl, f, page, maxBulkJobs)
		if errors.Is(err, errTooMany) {
			c.reportAs(problemUsage(""), "the filter selects more than %d jobs: narrow it (by queue, type, --since) and run it again for the rest", maxBulkJobs)
			return exitUsage
		}
		if err != nil {
			return c.fail(err)
		}
		res := &bulkResult{Action: action, DryRun: *dry, Matched: len(jobs)}
		if *dry || len(jobs) == 0 {
			return c.printBulk(res)
		}
		if !*yes {
			if !isTerminal(c.in) || !isTerminal(c.errw) {
				c.reportAs(problemUsage("yes"), "%s %d jobs: --yes is needed without a terminal to confirm on", action, len(jobs))
				return exitUsage
			}
			fmt.Fprintf(c.errw, "%s %d jobs? [y/N] ", action, len(jobs))
			answer, _ := bufio.NewReader(c.in).ReadString('\n')
			if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
				fmt.Fprintln(c.errw, "nothing changed")
				return exitFailed
			}
		}
		var retried map[string]bool
		if action == "retry" {
			// Retrying everything failed twice must not run each twice: a
			// job some job is a retry of is skipped.
			all, err := selectAll(ctx, cl, jetflow.ListFilter{Namespace: f.Namespace}, page, 0)
			if err != nil {
				return c.fail(err)
			}
			retried = map[string]bool{}
			for _, j := range all {
				if j.RetryOf != "" {
					retried[j.RetryOf] = true
				}
			}
		}
		if *pieces {
			res.Action = "retry-failed-pieces"
		}
		c.runBulk(ctx, cl, res, jobs, f.State, retried, *reason)
		if code := c.printBulk(res); code != exitOK || res.Failed > 0 {
			return exitFailed
		}
		return exitOK
	})
}

var errTooMany = errors.New("too many jobs")

// selectAll lists every job f selects, page jobs a request (0: all in
// one), at most max (0: no bound; more: errTooMany, with the first max).
func selectAll(ctx context.Context, cl *jetflow.Client, f jetflow.ListFilter, page, max int) ([]*jetflow.JobInfo, error) {
	var out []*jetflow.JobInfo
	f.Limit, f.Before = page, ""
	for {
		got, err := cl.List(ctx, f)
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
		if max > 0 && len(out) > max {
			return out[:max], errTooMany
		}
		if page == 0 || len(got) < page {
			return out, nil
		}
		f.Before = got[len(got)-1].Cursor()
	}
}

// runBulk changes each job, bulkWorkers at once; on a terminal a line
// shows the progress.
func (c *cli) runBulk(ctx context.Context, cl *jetflow.Client, res *bulkResult, jobs []*jetflow.JobInfo, state jetflow.State, retried map[string]bool, reason string) {
	if reason == "" {
		reason = bulkReasonDflt
	}
	progress := isTerminal(c.errw) && !c.json
	work := make(chan *jetflow.JobInfo)
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := 0
	for range bulkWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				changed, skipped, err := bulkOne(ctx, cl, res.Action, j, state, reason, retried)
				mu.Lock()
				done++
				switch {
				case changed:
					res.Changed++
				case skipped:
					res.Skipped++
				default:
					res.Failed++
					if len(res.Errors) < maxBulkErrors {
						res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", j.ID, err))
					}
				}
				if progress {
					fmt.Fprintf(c.errw, "\r%d/%d: %d changed, %d skipped, %d failed", done, res.Matched, res.Changed, res.Skipped, res.Failed)
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		work <- j
	}
	close(work)
	wg.Wait()
	if progress {
		fmt.Fprintln(c.errw)
	}
}

// bulkOne changes one job: changed, or skipped (the action does not apply
// to it as it is), or an error.
func bulkOne(ctx context.Context, cl *jetflow.Client, action string, j *jetflow.JobInfo, state jetflow.State, reason string, retried map[string]bool) (changed, skipped bool, err error) {
	switch action {
	case "purge":
		if !j.State.Terminal() {
			return false, true, nil
		}
		_, err := cl.PurgeJob(ctx, j.ID, reason)
		if errors.Is(err, jetflow.ErrInvalidTransition) || errors.Is(err, jetflow.ErrNotFound) {
			return false, true, nil // a child not finished, or purged with its parent meanwhile
		}
		return err == nil, false, err
	case "cancel":
		if j.State.Terminal() {
			return false, true, nil
		}
		if state != "" {
			// Selected in that state from a list: one that has moved on
			// since is skipped, as get shows it (a queued record an
			// in-process claim has not written yet is read running).
			cur, err := cl.Get(ctx, j.ID)
			if errors.Is(err, jetflow.ErrNotFound) {
				return false, true, nil // purged meanwhile
			}
			if err != nil {
				return false, false, err
			}
			if cur.State != state {
				return false, true, nil
			}
		}
		got, err := cl.Cancel(ctx, j.ID, reason)
		switch {
		case errors.Is(err, jetflow.ErrNotFound):
			return false, true, nil // purged meanwhile
		case err != nil:
			return false, false, err
		}
		return got.State == jetflow.Cancelled, got.State != jetflow.Cancelled, nil // ended first: skipped
	default: // retry, retry-failed-pieces
		if retried[j.ID] || !j.State.Terminal() {
			return false, true, nil
		}
		retry := cl.Retry
		if action == "retry-failed-pieces" {
			retry = cl.RetryFailedPieces
		}
		_, err := retry(ctx, j.ID, "")
		if errors.Is(err, jetflow.ErrInvalidTransition) || errors.Is(err, jetflow.ErrNotFound) || refusedField(err) == "failed_pieces" {
			return false, true, nil // not finished, gone, or no failed pieces
		}
		return err == nil, false, err
	}
}

func (c *cli) printBulk(res *bulkResult) int {
	if c.json {
		c.printJSON(res)
		return exitOK
	}
	if res.DryRun {
		fmt.Fprintf(c.out, "%d jobs selected (dry run: nothing changed)\n", res.Matched)
		return exitOK
	}
	fmt.Fprintf(c.out, "%s: %d selected, %d changed, %d skipped, %d failed\n", res.Action, res.Matched, res.Changed, res.Skipped, res.Failed)
	for _, e := range res.Errors {
		fmt.Fprintf(c.errw, "  %s\n", e)
	}
	return exitOK
}

// refusedField is the field an invalid-input refusal names, from either
// client (an *InputError from a direct one, a Problem from a token one).
func refusedField(err error) string {
	var in *jetflow.InputError
	if errors.As(err, &in) {
		return in.Field
	}
	if p := jetflow.ProblemOf(err); p != nil && p.Type == "invalid-input" {
		return p.Field
	}
	return ""
}
