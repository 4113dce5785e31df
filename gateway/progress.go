package gateway

import (
	"context"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
)

// A flood of progress reports from a remote worker is kept from swamping
// the event log as the worker runtime keeps a handler's
// (engine.ProgressCoalescer): at most one job.progress per job per
// interval is written, with the last value reported, and a pending value
// is written before the job's next state report.

// reportProgress writes p now, or holds it to be written at the end of
// the job's interval (deferred true). A report that the index says cannot
// be the holder's is written at once, so that it is refused at once.
func (g *Gateway) reportProgress(ctx context.Context, id, worker string, p domain.Progress) (snap engine.Snapshot, deferred bool, err error) {
	s := g.index.Get(id)
	holder := s != nil && s.Worker == worker && commands.HeldState(s.State)
	if holder && g.progress.Hold(id, worker, p) {
		return engine.Snapshot{}, true, nil
	}
	snap, err = g.remote.Progress(ctx, id, worker, p)
	return snap, false, err
}

// flushProgress writes a job's progress held at the end of its interval.
func (g *Gateway) flushProgress(id, worker string, p domain.Progress) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(g.base()), 10*time.Second)
	defer cancel()
	if snap, err := g.remote.Progress(ctx, id, worker, p); err == nil {
		g.index.Put(snap.Job, snap.Rev)
	}
}
