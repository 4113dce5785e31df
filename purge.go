package jetflow

import (
	"context"
	"time"

	"github.com/jetflow/jetflow/commands"
)

// PurgeOptions selects what Client.Purge purges.
type PurgeOptions struct {
	OlderThan time.Duration // terminal jobs that finished longer ago than this
	Namespace string        // only this namespace's jobs ("": every namespace)
	DryRun    bool          // list them, purge nothing
}

// PurgeJob purges one finished job and its children now, whatever its
// namespace's retention: a job.purged event, then its record, files and
// schedule are deleted (its events stay in the log until the events
// retention). It returns how many jobs were purged (the job and its
// children). A job that is not finished, or has a child that is not, is
// refused with ErrInvalidTransition; an unknown one with ErrNotFound. A
// token client needs an admin token. reason "" is "purged on request".
func (c *Client) PurgeJob(ctx context.Context, id, reason string) (purged int, err error) {
	if err := commands.CheckReason("reason", reason); err != nil {
		return 0, publicErr(err)
	}
	if reason == "" {
		reason = commands.DefaultPurgeReason
	}
	n, err := c.b.purgeJob(ctx, id, reason)
	return n, publicErr(err)
}

// Purge purges terminal jobs that finished more than OlderThan ago (a
// parent with its children; a parent with a child still running is left),
// whatever their namespace's retention, and returns the ids of the jobs
// selected (parents, without their children), oldest first. With DryRun
// nothing is written. A token client needs an admin token.
func (c *Client) Purge(ctx context.Context, opts PurgeOptions) (ids []string, purged int, err error) {
	if opts.OlderThan <= 0 {
		return nil, 0, publicErr(&commands.InputError{Field: "older_than", Reason: "must be more than 0"})
	}
	if opts.Namespace != "" {
		if err := commands.CheckNamespace(opts.Namespace); err != nil {
			return nil, 0, publicErr(err)
		}
	}
	ids, purged, err = c.b.purge(ctx, opts)
	return ids, purged, publicErr(err)
}
