package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Children linked to a parent by "parent" at submit (not the pieces of its
// fan-out, whose ids are derived from the parent's): the parent's piece
// subject records each link (piece.linked, before the child's
// job.submitted) and, as for every child, the child's end. So what the
// cascade of a parent that did not succeed must cancel, and what keeps a
// parent from being purged, is read from one subject, without an index.

// family is what a parent's piece subject says of its children.
type family struct {
	pieces *projections.Pieces // the fan-out's pieces
	linked []string            // children linked by parent, in order
	ended  map[string]bool     // children (linked or not) that ended
}

// live are the linked children that have not ended.
func (f *family) live() []string {
	var out []string
	for _, id := range f.linked {
		if !f.ended[id] {
			out = append(out, id)
		}
	}
	return out
}

// readFamily reads parent's piece subject.
func readFamily(ctx context.Context, nc *nats.Conn, parent string) (*family, error) {
	f := &family{pieces: projections.NewPieces(), ended: map[string]bool{}}
	_, err := streams.ReadSubject(ctx, nc, streams.EventsStream, streams.PieceSubject(parent), 1, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return nil
		}
		f.pieces.Fold(seq, ev)
		child, _ := ev.Fields["child"].(string)
		switch {
		case child == "":
		case ev.Type == domain.PcLinked:
			if _, seen := f.ended[child]; !seen {
				f.linked = append(f.linked, child)
				f.ended[child] = false
			}
		default:
			f.ended[child] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("children of %s: %w", parent, err)
	}
	return f, nil
}

// linkAsync records that child was submitted with parent.
func (s *Store) linkAsync(parent, child, actor string, at time.Time) streams.Future {
	return s.publishPiece(&domain.Event{Type: domain.PcLinked, JobID: parent, Time: at, Actor: actor,
		Fields: map[string]any{"child": child}}, child+"-link")
}

// linked reports whether req is a child linked by parent (not a piece of
// a fan-out, which its parent knows by number).
func linked(req *commands.SubmitRequest) bool { return req.Parent != "" && req.Piece == 0 }

// dropIfParentEnded cancels child j, just submitted with a parent, if its
// parent ended without succeeding (commands.ChildBlocked): the parent's
// cascade may have read its children before j's link was written, and j
// must never start.
func (s *Store) dropIfParentEnded(ctx context.Context, j *domain.Job) {
	p, err := s.Get(ctx, j.Spec.Parent)
	if err != nil && !errors.Is(err, commands.ErrNotFound) {
		s.Log.Warn("read the parent of a new child", "job", j.ID, "parent", j.Spec.Parent, "err", err)
		return // the claim checks the parent again
	}
	if err == nil && !commands.ChildBlocked(p.Job) {
		return
	}
	if _, err := s.cancel(ctx, j.ID, errParentGone.Error(), false); err != nil && !errors.Is(err, commands.ErrTerminal) {
		s.Log.Warn("cancel a child whose parent ended", "job", j.ID, "err", err)
	}
}

// purgeLinked purges the linked children of parent j that are terminal,
// and returns the states of those it could not purge.
func (s *Store) purgeLinked(ctx context.Context, purge func(id string) (int, error), j *domain.Job) (int, []domain.State, error) {
	fam, err := readFamily(ctx, s.NC, j.ID)
	if err != nil {
		return 0, nil, err
	}
	n := 0
	var left []domain.State
	for _, id := range fam.linked {
		snap, err := s.Get(ctx, id)
		if errors.Is(err, commands.ErrNotFound) || errors.Is(err, commands.ErrInvalidInput) {
			continue // never made (its submit failed after the link), or purged
		}
		if err != nil {
			return n, nil, err
		}
		if !snap.Job.State.Terminal() {
			left = append(left, snap.Job.State)
			continue
		}
		m, err := purge(id)
		n += m
		switch {
		case errors.Is(err, commands.ErrNotFound):
		case errors.Is(err, commands.ErrInvalidTransition):
			left = append(left, domain.StateRunning) // a grandchild still runs
		case err != nil:
			return n, nil, err
		}
	}
	return n, left, nil
}

// link records the links of the children among reqs (those whose evs[i]
// is set), pipelined; a child whose link could not be written is not
// submitted (out[i].Err).
func (s *Store) link(ctx context.Context, reqs []*commands.SubmitRequest, evs []*domain.Event, out []Submitted, actor string, now time.Time) {
	var futs map[int]streams.Future
	for i, ev := range evs {
		if ev != nil && linked(reqs[i]) {
			if futs == nil {
				futs = map[int]streams.Future{}
			}
			futs[i] = s.linkAsync(ev.Spec.Parent, ev.JobID, actor, now)
		}
	}
	for i, f := range futs {
		if _, err := f.Wait(ctx); err != nil {
			out[i].Err = fmt.Errorf("submit %s: link to parent %s: %w", evs[i].JobID, evs[i].Spec.Parent, err)
			evs[i] = nil
		}
	}
}

// mayHaveChildren says which of ids have piece events (a fan-out, a child
// linked to them): the others have no children to cancel. Read with one
// request per few hundred ids.
func (s *Store) mayHaveChildren(ctx context.Context, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	const chunk = 256
	for len(ids) > 0 {
		n := min(len(ids), chunk)
		subjects := make([]string, n)
		for i, id := range ids[:n] {
			subjects[i] = streams.PieceSubject(id)
		}
		last, err := streams.MultiLast(ctx, s.NC, streams.EventsStream, subjects)
		if err != nil {
			return nil, fmt.Errorf("children of %d jobs: %w", n, err)
		}
		for i, id := range ids[:n] {
			_, out[id] = last[subjects[i]]
		}
		ids = ids[n:]
	}
	return out, nil
}
