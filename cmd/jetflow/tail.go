package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow/jetflow"
)

// errTailDone ends a tail that printed its --count.
var errTailDone = errors.New("tail: count reached")

// cmdTail follows every job event of the log as it is appended, with
// filters: jetflow tail [--namespace NS] [--queue Q] [--type T] [--since D]
// [--count N].
func cmdTail(c *cli, args []string) int {
	fs := c.clientFlags()
	var f jetflow.TailFilter
	var since time.Duration
	var count int
	fs.StringVar(&f.Queue, "queue", "", "only events of jobs of this queue")
	fs.StringVar(&f.Type, "type", "", "only events of jobs of this type")
	durationVar(fs, &since, "since", 0, "begin this far back (5m, 1h) instead of now")
	fs.IntVar(&count, "count", 0, "stop after this many events (0: follow until interrupted)")
	ns := c.namespaceFlag("only events of jobs of this namespace")
	if _, ok := c.parse(args, 0, 0); !ok || !c.checkNamespace(*ns) {
		return exitUsage
	}
	empty := "must not be empty (leave it out for every one)"
	if !c.checkFlags(when("queue", f.Queue == "", empty), when("type", f.Type == "", empty),
		when("since", since <= 0, "must be more than 0"), when("count", count < 0, "must be 0 (no end) or more")) {
		return exitUsage
	}
	f.Namespace = *ns
	if since > 0 {
		f.Since = time.Now().Add(-since)
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		printed := 0
		err := cl.Tail(ctx, f, func(e *jetflow.EventInfo) error {
			if c.json {
				b, _ := json.Marshal(e)
				fmt.Fprintln(c.out, string(b))
			} else {
				where := e.Queue + "/" + e.JobType
				if e.Namespace != "" {
					where = e.Namespace + "/" + where
				}
				fmt.Fprintf(c.out, "%s  %s  %s\n", e.JobID, where, formatEvent(e))
			}
			printed++
			if count > 0 && printed >= count {
				return errTailDone
			}
			return nil
		})
		if err != nil && !errors.Is(err, errTailDone) && ctx.Err() == nil {
			return c.fail(err)
		}
		return exitOK
	})
}
