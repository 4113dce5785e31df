package main

import (
	"context"
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
		w := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "QUEUE\tSTATUS\tWAITING\tRUNNING/HELD\tDELAYED\tMAX RUNNING\tPER USER\tPENDING")
		for _, q := range qs {
			status := "active"
			if q.Paused {
				status = "paused"
			}
			pending := "-"
			if q.Slots != nil {
				pending = fmt.Sprint(q.Slots.Pending)
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", q.Name, status, q.Depth, q.Held, q.Delayed,
				limitText(q.MaxRunning), limitText(q.MaxRunningPerUser), pending)
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
	var wait bool
	fs.StringVar(&key, "key", "", "idempotency key of the retry (a repeated retry with it returns the same new job)")
	fs.BoolVar(&wait, "wait", false, "wait until the new job is terminal; exit 0 succeeded, 1 failed or cancelled")
	pos, ok := c.parse(args, 1, 1)
	if !ok || !c.checkFlags(when("key", key == "", "must not be empty (leave --key out for no key)")) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		job, err := cl.Retry(envTrace(ctx), pos[0], key)
		if err != nil {
			if c.flagInput(err, map[string]string{"idempotency_key": "key"}) {
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

// cmdQueue sets a queue's limits: jetflow queue set QUEUE
// [--max-running N] [--max-running-per-user M]. A limit not given keeps
// its value; 0 removes it.
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

// queueSet: jetflow queue set QUEUE [--max-running N]
// [--max-running-per-user M].
func queueSet(c *cli, args []string) int {
	fs := c.clientFlags()
	var maxRunning, perUser int
	fs.IntVar(&maxRunning, "max-running", 0, "the most jobs of the queue running at once, in all (0: no limit)")
	fs.IntVar(&perUser, "max-running-per-user", 0, "the most jobs of one user running at once in the queue (0: no limit)")
	pos, ok := c.parse(args, 1, 1)
	if !ok {
		return exitUsage
	}
	if !c.given("max-running") && !c.given("max-running-per-user") {
		c.errorf("give --max-running, --max-running-per-user or both (0 removes a limit)")
		return exitUsage
	}
	bad := fmt.Sprintf("must be 0 (no limit) to %d", jetflow.MaxQueueLimit)
	if !c.checkFlags(when("max-running", maxRunning < 0 || maxRunning > jetflow.MaxQueueLimit, bad),
		when("max-running-per-user", perUser < 0 || perUser > jetflow.MaxQueueLimit, bad)) {
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
			return cur
		})
		if err != nil {
			if c.flagInput(err, map[string]string{"queue": "queue"}) {
				return exitUsage
			}
			return c.fail(err)
		}
		if c.json {
			c.printJSON(map[string]any{"name": queue, "max_running": cur.MaxRunning, "max_running_per_user": cur.MaxRunningPerUser})
			return exitOK
		}
		fmt.Fprintf(c.out, "%s\tmax_running %s\tmax_running_per_user %s\n", queue, limitText(cur.MaxRunning), limitText(cur.MaxRunningPerUser))
		return exitOK
	})
}

func limitText(n int) string {
	if n == 0 {
		return "none"
	}
	return fmt.Sprint(n)
}
