package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow/jetflow"
)

// jetflow purge --older-than D [--namespace NS] [--dry-run]
func cmdPurge(c *cli, args []string) int {
	fs := c.clientFlags()
	var older time.Duration
	var dry bool
	durationVar(fs, &older, "older-than", 0, "purge terminal jobs that finished longer ago than this (required)")
	fs.BoolVar(&dry, "dry-run", false, "print what would be purged, write nothing")
	ns := c.namespaceFlag("only jobs of this namespace")
	if _, ok := c.parse(args, 0, 0); !ok {
		return exitUsage
	}
	if !c.given("older-than") {
		c.refuseFlag("older-than", "", "is required")
		return exitUsage
	}
	if !c.checkFlags(when("older-than", older <= 0, "must be more than 0")) || !c.checkNamespace(*ns) {
		return exitUsage
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		ids, n, err := cl.Purge(ctx, jetflow.PurgeOptions{OlderThan: older, Namespace: *ns, DryRun: dry})
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			c.printJSON(map[string]any{"jobs": ids, "purged": n, "dry_run": dry})
			return exitOK
		}
		for _, id := range ids {
			fmt.Fprintln(c.out, id)
		}
		if dry {
			fmt.Fprintf(c.out, "would purge %d jobs (and their children); nothing written\n", len(ids))
		} else {
			fmt.Fprintf(c.out, "purged %d jobs (children included)\n", n)
		}
		return exitOK
	})
}
