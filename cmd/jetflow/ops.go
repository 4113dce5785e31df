package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jetflow/jetflow"
)

// cmdQueues lists the queues with their depth and whether they are paused.
func cmdQueues(c *cli, args []string) int {
	c.clientFlags()
	if _, ok := c.parse(args, 0, 0); !ok {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		qs, err := cl.Queues(ctx)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			c.printJSON(qs)
			return exitOK
		}
		// The columns of the limits per key and of rates, when a queue has one.
		more := false
		for _, q := range qs {
			more = more || q.MaxRunningPerKey > 0 || q.RateLimit > 0 || q.Priorities || q.MaxQueued > 0
		}
		w := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
		header := "QUEUE\tSTATUS\tWAITING\tRUNNING/HELD\tDELAYED\tMAX RUNNING\tPER USER\tPENDING"
		if more {
			header += "\tPER KEY\tRATE\tPRIORITIES"
		}
		fmt.Fprintln(w, header)
		for _, q := range qs {
			status := "active"
			if q.Paused {
				status = "paused"
			}
			pending := "-"
			if q.Slots != nil {
				pending = fmt.Sprint(q.Slots.Pending)
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s", q.Name, status, q.Depth, q.Held, q.Delayed,
				limitText(q.MaxRunning), limitText(q.MaxRunningPerUser), pending)
			if more {
				fmt.Fprintf(w, "\t%s\t%s\t%s", limitText(q.MaxRunningPerKey),
					rateText(q.RateLimit, time.Duration(q.RatePeriodSeconds*float64(time.Second)), q.RateKey), prioritiesText(q.Priorities, q.MaxQueued))
			}
			fmt.Fprintln(w)
		}
		w.Flush()
		return exitOK
	})
}

func cmdPause(c *cli, args []string) int  { return setPaused(c, args, true) }
func cmdResume(c *cli, args []string) int { return setPaused(c, args, false) }

// setPaused pauses or resumes a queue: a paused queue accepts jobs but
// dispatches none until resumed.
func setPaused(c *cli, args []string, paused bool) int {
	c.clientFlags()
	pos, ok := c.parse(args, 1, 1)
	if !ok {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		set, word := cl.ResumeQueue, "resumed"
		if paused {
			set, word = cl.PauseQueue, "paused"
		}
		if err := set(ctx, pos[0]); err != nil {
			return c.fail(err)
		}
		if c.json {
			c.printJSON(map[string]any{"name": pos[0], "paused": paused})
			return exitOK
		}
		fmt.Fprintf(c.out, "%s\t%s\n", pos[0], word)
		return exitOK
	})
}

// cmdWorkers lists the remote workers registered over the HTTP worker
// protocol.
func cmdWorkers(c *cli, args []string) int {
	c.clientFlags()
	if _, ok := c.parse(args, 0, 0); !ok {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		views, err := cl.Workers(ctx)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			c.printJSON(views)
			return exitOK
		}
		if len(views) == 0 {
			fmt.Fprintln(c.errw, "no workers are registered")
			return exitOK
		}
		w := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tNAME\tKIND\tLIVE\tTYPES\tQUEUES\tCLAIMS\tLAST HEARTBEAT")
		for _, v := range views {
			queues := strings.Join(v.Queues, ",")
			if queues == "" {
				queues = "(every queue)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%v\t%s\t%s\t%d\t%s ago\n", v.ID, v.Name, v.Kind, v.Live, strings.Join(v.Types, ","),
				queues, len(v.Claims), time.Since(v.LastHeartbeat).Round(time.Second))
		}
		w.Flush()
		return exitOK
	})
}

// cmdRetry runs a finished job again as a new job linked by retry_of.
func cmdRetry(c *cli, args []string) int {
	fs := c.clientFlags()
	var key string
	var wait, failed bool
	fs.StringVar(&key, "key", "", "idempotency key of the retry (a repeated retry with it returns the same new job)")
	fs.BoolVar(&failed, "failed-pieces", false, "a fan-out: run again only its pieces that did not succeed (the others are carried over)")
	fs.BoolVar(&wait, "wait", false, "wait until the new job is terminal; exit 0 succeeded, 1 failed or cancelled")
	pos, ok := c.parse(args, 1, 1)
	if !ok || !c.checkFlags(when("key", key == "", "must not be empty (leave --key out for no key)")) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		retry := cl.Retry
		if failed {
			retry = cl.RetryFailedPieces
		}
		job, err := retry(envTrace(ctx), pos[0], key)
		if err != nil {
			if c.flagInput(err, map[string]string{"idempotency_key": "key", "failed_pieces": "failed-pieces"}) {
				return exitUsage
			}
			return c.fail(err)
		}
		if !job.State.Terminal() {
			c.warnUnserved(ctx, cl, job)
		}
		if wait {
			return c.waitAndPrint(ctx, cl, job, 0)
		}
		if c.json {
			c.printJSON(job)
			return exitOK
		}
		fmt.Fprintf(c.out, "%s\t%s\t(retry of %s)\n", job.ID, job.State, pos[0])
		return exitOK
	})
}

// cmdQueue lists the queues, sets a queue's limits (jetflow queue set
// QUEUE [--max-running N] [--max-running-per-user M] [--max-running-per-key
// K] [--rate-limit R --rate-period D [--rate-key FROM]]: a limit not given
// keeps its value; 0 removes it), pauses or resumes one.
func cmdQueue(c *cli, args []string) int {
	sub, rest := subcommand(args)
	switch sub {
	case "ls", "list":
		c.name = "queue ls"
		return cmdQueues(c, rest)
	case "pause", "resume":
		c.name = "queue " + sub
		return setPaused(c, rest, sub == "pause")
	case "set":
		c.name = "queue set"
		return queueSet(c, rest)
	case "":
		if wantsHelp(args) {
			c.printHelp()
			c.helped = true
			return exitOK
		}
		c.errorf("want a subcommand: ls, set, pause or resume (jetflow help queue)")
		return exitUsage
	}
	c.unknownCommand(sub, "queue")
	return exitUsage
}

// queueLimitFlags maps the fields of queue limits to their flags, so that
// a refused value is reported as its flag.
var queueLimitFlags = map[string]string{"queue": "queue", "max_running": "max-running",
	"max_running_per_user": "max-running-per-user", "max_running_per_key": "max-running-per-key",
	"rate_limit": "rate-limit", "rate_period": "rate-period", "rate_key": "rate-key", "max_queued": "max-queued"}

// queueSet: jetflow queue set QUEUE [--max-running N]
// [--max-running-per-user M] [--max-running-per-key K] [--rate-limit R]
// [--rate-period D] [--rate-key FROM] [--priorities[=false]] [--max-queued W].
func queueSet(c *cli, args []string) int {
	fs := c.clientFlags()
	var maxRunning, perUser, perKey, rate, maxQueued int
	var period time.Duration
	var rateKey string
	var priorities bool
	fs.IntVar(&maxRunning, "max-running", 0, "the most jobs of the queue running at once, in all (0: no limit)")
	fs.IntVar(&perUser, "max-running-per-user", 0, "the most jobs of one user running at once in the queue (0: no limit)")
	fs.IntVar(&perKey, "max-running-per-key", 0, "the most jobs of one concurrency key running at once in the queue; 1: one at a time, in submit order (0: no limit)")
	fs.IntVar(&rate, "rate-limit", 0, "the most jobs started in any --rate-period, of the queue or of each --rate-key (0: no rate limit)")
	durationVar(fs, &period, "rate-period", 0, "the period of --rate-limit (1s to 24h)")
	fs.StringVar(&rateKey, "rate-key", "", `whose starts --rate-limit counts: "user", "concurrency_key" or a payload field "payload.<name>" ("": the whole queue's)`)
	fs.BoolVar(&priorities, "priorities", false, "start the queue's jobs by priority, through admission (--priorities=false: FIFO again)")
	fs.IntVar(&maxQueued, "max-queued", 0, "the most admitted jobs waiting for a worker; with --priorities 0 means 100 (0: no bound)")
	pos, ok := c.parse(args, 1, 1)
	if !ok {
		return exitUsage
	}
	flags := []string{"max-running", "max-running-per-user", "max-running-per-key", "rate-limit", "rate-period", "rate-key", "priorities", "max-queued"}
	givenAny := false
	for _, f := range flags {
		givenAny = givenAny || c.given(f)
	}
	if !givenAny {
		c.errorf("give one or more of --max-running, --max-running-per-user, --max-running-per-key, --rate-limit, --rate-period, --rate-key, --priorities, --max-queued (0 removes a limit)")
		return exitUsage
	}
	bad := fmt.Sprintf("must be 0 (no limit) to %d", jetflow.MaxQueueLimit)
	if !c.checkFlags(when("max-running", maxRunning < 0 || maxRunning > jetflow.MaxQueueLimit, bad),
		when("max-running-per-user", perUser < 0 || perUser > jetflow.MaxQueueLimit, bad),
		when("max-running-per-key", perKey < 0 || perKey > jetflow.MaxQueueLimit, bad),
		when("rate-limit", rate < 0 || rate > jetflow.MaxQueueLimit, bad),
		when("max-queued", maxQueued < 0 || maxQueued > jetflow.MaxQueueLimit, bad)) {
		return exitUsage
	}
	queue := pos[0]
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		cur, err := cl.ChangeQueueLimits(ctx, queue, func(cur jetflow.QueueLimits) jetflow.QueueLimits {
			if c.given("max-running") {
				cur.MaxRunning = maxRunning
			}
			if c.given("max-running-per-user") {
				cur.MaxRunningPerUser = perUser
			}
			if c.given("max-running-per-key") {
				cur.MaxRunningPerKey = perKey
			}
			if c.given("rate-limit") {
				cur.RateLimit = rate
				if rate == 0 { // no rate limit: no period or key either, unless given
					cur.RatePeriod, cur.RateKey = 0, ""
				}
			}
			if c.given("rate-period") {
				cur.RatePeriod = period
			}
			if c.given("rate-key") {
				cur.RateKey = rateKey
			}
			if c.given("priorities") {
				cur.Priorities = priorities
			}
			if c.given("max-queued") {
				cur.MaxQueued = maxQueued
			}
			return cur
		})
		if err != nil {
			if c.flagInput(err, queueLimitFlags) {
				return exitUsage
			}
			// A limit that needs another not given (a rate limit, its
			// period): named as the flag to give.
			var in *jetflow.InputError
			if errors.As(err, &in) && queueLimitFlags[in.Field] != "" && in.Field != "queue" {
				c.reportAs(problemInput("--"+queueLimitFlags[in.Field]), "--%s: %s", queueLimitFlags[in.Field], in.Reason)
				return exitUsage
			}
			return c.fail(err)
		}
		if c.json {
			c.printJSON(map[string]any{"name": queue, "max_running": cur.MaxRunning, "max_running_per_user": cur.MaxRunningPerUser,
				"max_running_per_key": cur.MaxRunningPerKey, "rate_limit": cur.RateLimit, "rate_period": cur.RatePeriod.Seconds(),
				"rate_key": cur.RateKey, "priorities": cur.Priorities, "max_queued": cur.MaxQueued})
			return exitOK
		}
		fmt.Fprintf(c.out, "%s\tmax_running %s\tmax_running_per_user %s", queue, limitText(cur.MaxRunning), limitText(cur.MaxRunningPerUser))
		if cur.MaxRunningPerKey > 0 || cur.RateLimit > 0 {
			fmt.Fprintf(c.out, "\tmax_running_per_key %s\trate_limit %s", limitText(cur.MaxRunningPerKey),
				rateText(cur.RateLimit, cur.RatePeriod, cur.RateKey))
		}
		if cur.Priorities || cur.MaxQueued > 0 {
			fmt.Fprintf(c.out, "\tpriorities %v\tmax_queued %s", cur.Priorities, limitText(cur.MaxQueued))
		}
		fmt.Fprintln(c.out)
		return exitOK
	})
}

// rateText says a rate limit: "10/1m0s", "10/1m0s per user", or "none".
func rateText(n int, period time.Duration, key string) string {
	if n == 0 {
		return "none"
	}
	s := fmt.Sprintf("%d/%s", n, period)
	if key != "" {
		s += " per " + key
	}
	return s
}

func limitText(n int) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}

// prioritiesText says whether a queue starts its jobs by priority, and its
// window: "yes (max_queued 100)", "no".
func prioritiesText(on bool, maxQueued int) string {
	switch {
	case on && maxQueued == 0:
		return "yes"
	case on:
		return fmt.Sprintf("yes (max_queued %d)", maxQueued)
	case maxQueued > 0:
		return fmt.Sprintf("no (max_queued %d)", maxQueued)
	}
	return "no"
}
