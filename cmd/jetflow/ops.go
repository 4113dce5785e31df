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
		fmt.Fprintln(w, "QUEUE\tSTATUS\tWAITING\tRUNNING/HELD\tDELAYED")
		for _, q := range qs {
			status := "active"
			if q.Paused {
				status = "paused"
			}
			fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\n", q.Name, status, q.Depth, q.Held, q.Delayed)
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
		job, err := cl.Retry(ctx, pos[0], key)
		if err != nil {
			if c.flagInput(err, map[string]string{"idempotency_key": "key"}) {
				return exitUsage
			}
			return c.fail(err)
		}
		if wait {
			return c.waitAndPrint(ctx, cl, job.ID, 0)
		}
		if c.json {
			c.printJSON(job)
			return exitOK
		}
		fmt.Fprintf(c.out, "%s\t%s\t(retry of %s)\n", job.ID, job.State, pos[0])
		return exitOK
	})
}
