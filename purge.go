package jetflow

import (
	"context"
	"errors"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
)

// PurgeOptions selects what Client.Purge purges.
type PurgeOptions struct {
	OlderThan time.Duration // terminal jobs that finished longer ago than this
	Namespace string        // only this namespace's jobs ("": every namespace)
	DryRun    bool          // list them, purge nothing
}

// Purge purges terminal jobs that finished more than OlderThan ago (a
// parent with its children; a parent with a child still running is left),
// whatever their namespace's retention, and returns the ids of the jobs
// selected (parents, without their children). With DryRun nothing is
// written. It needs an engine's connection (ErrNeedsEngine).
func (c *Client) Purge(ctx context.Context, opts PurgeOptions) (ids []string, purged int, err error) {
	if c.store == nil {
		return nil, 0, c.needsEngine("purge")
	}
	if opts.OlderThan <= 0 {
		return nil, 0, &commands.InputError{Field: "older_than", Reason: "must be more than 0"}
	}
	older := func(string) time.Duration { return opts.OlderThan }
	const batch = engine.DefaultPurgeMax
	seen := map[string]bool{}
	for {
		next, err := engine.Expired(ctx, c.store, older, opts.Namespace, batch)
		if err != nil {
			return ids, purged, err
		}
		fresh := 0
		for _, id := range next {
			if seen[id] {
				continue // refused before (a child still running)
			}
			seen[id] = true
			fresh++
			ids = append(ids, id)
			if opts.DryRun {
				continue
			}
			n, err := c.store.Purge(ctx, id, "purge --older-than "+opts.OlderThan.String())
			purged += n
			if err != nil && !errors.Is(err, commands.ErrNotFound) && !errors.Is(err, commands.ErrInvalidTransition) {
				return ids, purged, err
			}
		}
		if opts.DryRun || fresh == 0 || len(next) < batch {
			return ids, purged, nil
		}
	}
}
