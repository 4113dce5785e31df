package store

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	making int                 // the most children an attempt said it makes (piece.making)
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
func (s *Store) readFamily(ctx context.Context, parent string) (*family, error) {
	f := &family{pieces: projections.NewPieces(), ended: map[string]bool{}}
	_, err := streams.ReadSubject(ctx, s.nc, streams.EventsStream, streams.PieceSubject(parent), 1, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return nil
		}
		f.pieces.Fold(seq, ev)
		child, _ := ev.Fields["child"].(string)
		switch {
		case ev.Type == domain.PcMaking:
			if ev.Plan != nil && ev.Plan.Kind == domain.FanoutChildren {
				f.making = max(f.making, ev.Plan.Total)
			}
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
	return s.PublishPiece(&domain.Event{Type: domain.PcLinked, JobID: parent, Time: at, Actor: actor,
		Fields: map[string]any{"child": child}}, child+"-link")
}

// linked reports whether req is a child linked by parent (not a piece of
// a fan-out, which its parent knows by number).
func linked(req *commands.SubmitRequest) bool { return req.Parent != "" && req.Piece == 0 }

// link records the links of the children among the submits ws (nil: not
// submitted), pipelined, and returns the writes left to do: a child whose
// link could not be written is not submitted (out[i].Err).
func (s *Store) link(ctx context.Context, reqs []*commands.SubmitRequest, ws []*Write[domain.Job], out []Submitted, actor string, now time.Time) []*Write[domain.Job] {
	futs := map[int]streams.Future{}
	for i, w := range ws {
		if w != nil && linked(reqs[i]) {
			futs[i] = s.linkAsync(w.Ev.Spec.Parent, w.Ev.JobID, actor, now)
		}
	}
	for i, f := range futs {
		if _, err := f.Wait(ctx); err != nil {
			out[i].Err = fmt.Errorf("submit %s: link to parent %s: %w", ws[i].Ev.JobID, ws[i].Ev.Spec.Parent, err)
			ws[i] = nil
		}
	}
	var todo []*Write[domain.Job]
	for _, w := range ws {
		if w != nil {
			todo = append(todo, w)
		}
	}
	return todo
}

// dropIfParentEnded cancels child j, just submitted with a parent, if its
// parent ended without succeeding (commands.ChildBlocked): the parent's
// cascade may have read its children before j's link was written, and j
// must never start.
func (s *Store) dropIfParentEnded(ctx context.Context, j *domain.Job) {
	p, err := s.Record(ctx, j.Spec.Parent)
	if err != nil && !errors.Is(err, commands.ErrNotFound) {
		s.Log.Warn("read the parent of a new child", "job", j.ID, "parent", j.Spec.Parent, "err", err)
		return // the claim checks the parent again
	}
	if err == nil && !commands.ChildBlocked(p.Job) {
		return
	}
	if _, err := s.cancel(ctx, j.ID, ErrParentGone.Error(), Childless); err != nil && !errors.Is(err, commands.ErrTerminal) {
		s.Log.Warn("cancel a child whose parent ended", "job", j.ID, "err", err)
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
		last, err := streams.MultiLast(ctx, s.nc, streams.EventsStream, subjects)
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
