package gateway

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// A fan-out's pieces, from its piece events (jetflow.pc.<parent>): what
// became of each batch or child, by number. Batches have no record of
// their own: a piece with no event yet is unfinished (queued, running, or
// waiting for a retry).

// pieceView is one piece of a fan-out.
type pieceView struct {
	Piece   int              `json:"piece"`
	State   string           `json:"state"` // succeeded, failed, cancelled, or unfinished; a child's own state until it ends
	Error   *domain.JobError `json:"error,omitempty"`
	Attempt int              `json:"attempt,omitempty"` // the attempt that ended it
	Time    *time.Time       `json:"time,omitempty"`    // when it ended
	JobID   string           `json:"job_id,omitempty"`  // a child's id
	// CarriedFrom: the piece succeeded in this earlier run and was
	// carried over, not run again (a retry of failed pieces only).
	CarriedFrom string `json:"carried_from,omitempty"`
}

// pieceList is a page of a fan-out's pieces, by number.
type pieceList struct {
	Kind   string      `json:"kind"`
	Total  int         `json:"total"`
	Pieces []pieceView `json:"pieces"`
	// NextAfter is the after= of the next page (absent on the last).
	NextAfter int `json:"next_after,omitempty"`
}

// maxPieceEvents bounds the piece events one request reads.
const maxPieceEvents = 2 * commands.MaxFanout

// pieceStates are the states a piece list can be filtered by.
var pieceStates = []string{"succeeded", "failed", "cancelled", "unfinished"}

// GET /jobs/{id}/pieces?state=&after=N&limit=N
func (g *Gateway) listPieces(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	q, err := strictQuery(r)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	state := q.Get("state")
	if state != "" && state != "succeeded" && state != "failed" && state != "cancelled" && state != "unfinished" {
		fail(w, r, &commands.InputError{Field: "state", Value: state, Reason: "want succeeded, failed, cancelled or unfinished"}, id)
		return
	}
	after, limit := 0, defaultPageSize
	for _, p := range []struct {
		name string
		to   *int
		max  int
	}{{"after", &after, commands.MaxFanout}, {"limit", &limit, maxPageSize}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 || n > p.max || (p.name == "limit" && n == 0) {
				fail(w, r, &commands.InputError{Field: p.name, Value: s, Reason: fmt.Sprintf("want a number up to %d", p.max)}, id)
				return
			}
			*p.to = n
		}
	}
	snap, err := g.store.Read(r.Context(), id)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	list, err := g.pieces(r, snap.Job, state, after, limit)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// pieces reads a parent's piece events and lists the pieces after number
// after that are in state ("": any), at most limit.
func (g *Gateway) pieces(r *http.Request, parent *domain.Job, state string, after, limit int) (*pieceList, error) {
	out := &pieceList{Pieces: []pieceView{}}
	if parent.Fanout != nil {
		out.Kind, out.Total = parent.Fanout.Plan.Kind, parent.Fanout.Plan.Total
	}
	ended := map[int]*domain.Event{}
	n, made := 0, 0
	_, err := streams.ReadSubject(r.Context(), g.store.NC, streams.EventsStream, streams.PieceSubject(parent.ID), 1,
		func(_ uint64, data []byte) error {
			if n++; n > maxPieceEvents {
				return fmt.Errorf("more than %d piece events", maxPieceEvents)
			}
			ev, err := streams.DecodeEvent(data)
			if err != nil {
				return nil
			}
			switch ev.Type {
			case domain.PcPlanned:
				if ev.Plan != nil && out.Total == 0 {
					out.Kind, out.Total = ev.Plan.Kind, ev.Plan.Total
				}
			case domain.PcMaking:
				// A coordinator that does not wait yet, or ended first:
				// the children its attempts made.
				if ev.Plan != nil {
					made = max(made, ev.Plan.Total)
				}
			case domain.PcSucceeded, domain.PcFailed, domain.PcCancelled:
				if _, seen := ended[ev.Piece]; !seen && ev.Piece > 0 {
					ended[ev.Piece] = ev // the first counts, as for the fan-in counter
				}
			}
			return nil
		})
	if err != nil {
		return nil, err
	}
	if out.Total == 0 && made > 0 {
		out.Kind, out.Total = domain.FanoutChildren, made
	}
	for p := after + 1; p <= out.Total; p++ {
		v := pieceView{Piece: p, State: "unfinished"}
		if out.Kind == domain.FanoutChildren && (ended[p] == nil || ended[p].Fields["carried_from"] == nil) {
			v.JobID = engine.ChildID(parent.Spec.Namespace, parent.ID, p)
			if s := g.index.Get(v.JobID); s != nil && !s.State.Terminal() {
				v.State = string(s.State)
			}
		}
		if ev := ended[p]; ev != nil {
			v.State = map[string]string{domain.PcSucceeded: "succeeded", domain.PcFailed: "failed", domain.PcCancelled: "cancelled"}[ev.Type]
			v.Error, v.Attempt = ev.Error, ev.Attempt
			v.CarriedFrom, _ = ev.Fields["carried_from"].(string)
			t := ev.Time.UTC()
			v.Time = &t
		}
		if state != "" && v.State != state && !(state == "unfinished" && ended[p] == nil) {
			continue
		}
		if len(out.Pieces) == limit {
			out.NextAfter = out.Pieces[len(out.Pieces)-1].Piece
			break
		}
		out.Pieces = append(out.Pieces, v)
	}
	return out, nil
}
