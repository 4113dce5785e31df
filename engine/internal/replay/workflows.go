package replay

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// verifyWorkflows checks every workflow of the log against its steps as
// the log says they are:
//   - a workflow past pending has all its steps, each a child of it with
//     its number and name;
//   - a step that waited for its dependencies left pending (admitted or
//     released to its queue's admission) only after each of them ended,
//     and, unless it runs always, succeeded: its admission comes after
//     their ends in the log;
//   - a skipped step had a dependency that did not succeed, or its
//     workflow was failing;
//   - a workflow that ended did so as its steps decide (succeeded only if
//     every step did), and its counts are what its piece events say.
func verifyWorkflows(ctx context.Context, nc *nats.Conn, log map[string]*domain.Job, upTo uint64) ([]projections.Diff, error) {
	var diffs []projections.Diff
	bad := func(id, format string, args ...any) {
		diffs = append(diffs, projections.Diff{ID: id, Reason: fmt.Sprintf(format, args...)})
	}
	for id, wf := range log {
		g := wf.Spec.Workflow
		if g == nil || !wf.PurgedAt.IsZero() {
			continue
		}
		ids := store.StepIDs(wf)
		steps := make([]*domain.Job, len(ids))
		out := make([]commands.StepOutcome, len(ids))
		made := !commands.MakingSteps(wf.State)
		for i, sid := range ids {
			st := log[sid]
			steps[i] = st
			switch {
			case st == nil:
				// Purged by retention, or never made.
				if made && g.Steps[i].Carried == "" && !wf.State.Terminal() {
					bad(id, "workflow is %s, its step %s (%s) is not in the log", wf.State, g.Steps[i].Name, sid)
				}
				continue
			case g.Steps[i].Carried == "" && (st.Spec.Parent != id || st.Spec.Piece != i+1 || st.Spec.Step == nil || st.Spec.Step.Name != g.Steps[i].Name):
				bad(id, "step %s (%s) is not step %d of the workflow (parent %s, piece %d)", g.Steps[i].Name, sid, i+1, st.Spec.Parent, st.Spec.Piece)
			}
			if st.State.Terminal() {
				code := ""
				if st.Error != nil {
					code = st.Error.Code
				}
				out[i] = commands.OutcomeOf(st.State, code)
			}
		}
		failing := commands.Failing(g, out) >= 0
		for i, st := range steps {
			if st == nil || g.Steps[i].Carried != "" || !g.Held(i) {
				continue
			}
			name := g.Steps[i].Name
			always := g.Policy(i) == domain.OnFailureAlways
			if out[i] == commands.StepSkipped {
				why := failing
				for _, d := range g.Steps[i].After {
					why = why || out[d].Bad()
				}
				if !why {
					bad(id, "step %s was skipped, but its dependencies succeeded and the workflow was not failing", name)
				}
				continue
			}
			left, err := leftPending(ctx, nc, st, upTo)
			if err != nil {
				return nil, err
			}
			if left == 0 {
				continue // still waiting, or cancelled while it waited
			}
			for _, d := range g.Steps[i].After {
				dep := steps[d]
				switch {
				case dep == nil:
					// Purged by retention (or a carried job): nothing to compare.
				case !dep.State.Terminal():
					bad(id, "step %s left pending at event %d while its dependency %s is %s", name, left, g.Steps[d].Name, dep.State)
				case !always && !commands.EndedSucceeded(dep.State):
					bad(id, "step %s left pending at event %d, but its dependency %s %s", name, left, g.Steps[d].Name, out[d])
				case g.Steps[d].Carried == "" && dep.Seq >= left:
					bad(id, "step %s left pending at event %d, before its dependency %s ended (event %d)", name, left, g.Steps[d].Name, dep.Seq)
				}
			}
		}
		if !commands.Settled(wf.State) {
			continue
		}
		done, failed := commands.WorkflowVerdict(g, out)
		switch {
		case commands.EndedSucceeded(wf.State) && (!done || failed >= 0):
			bad(id, "workflow succeeded, but its steps say %v", out)
		case commands.EndedFailed(wf.State) && done && failed < 0:
			bad(id, "workflow failed, but every step succeeded")
		}
		if wf.Fanout == nil || wf.Events == 0 {
			continue
		}
		st := projections.NewSteps(g)
		countsUpTo := wf.Fanout.Counts.UpTo
		_, err := streams.ReadSubject(ctx, nc, streams.EventsStream, streams.PieceSubject(id), 1, func(seq uint64, data []byte) error {
			if countsUpTo > 0 && seq > countsUpTo {
				return errPast
			}
			if ev, err := streams.DecodeEvent(data); err == nil {
				st.Fold(seq, ev)
			}
			return nil
		})
		if err != nil && !errors.Is(err, errPast) {
			return nil, err
		}
		got, want := st.Tally(), wf.Fanout.Counts
		if got.Succeeded != want.Succeeded || got.Failed != want.Failed || got.Cancelled != want.Cancelled {
			bad(id, "workflow counts %d/%d/%d (succeeded/failed/cancelled) but its piece events say %d/%d/%d",
				want.Succeeded, want.Failed, want.Cancelled, got.Succeeded, got.Failed, got.Cancelled)
		}
	}
	return diffs, nil
}

var errPast = errors.New("past the counts")

// leftPending is the event at which a step that waited for its
// dependencies left that wait: its admission, or its release to its
// queue's admission (a job.pending whose hold no longer blocks); 0 if it
// did not.
func leftPending(ctx context.Context, nc *nats.Conn, st *domain.Job, upTo uint64) (uint64, error) {
	var at uint64
	_, err := streams.ReadSubject(ctx, nc, streams.EventsStream, streams.JobSubject(st), 1, func(seq uint64, data []byte) error {
		if seq > upTo {
			return errPast
		}
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return err
		}
		switch {
		case ev.Type == domain.EvAdmitted, ev.Type == domain.EvPending && ev.Hold != nil && !ev.Hold.Blocks():
			at = seq
			return errPast
		}
		return nil
	})
	if errors.Is(err, errPast) {
		err = nil
	}
	return at, err
}
