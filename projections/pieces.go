package projections

import (
	"sort"

	"github.com/jetflow/jetflow/internal/domain"
)

// Pieces is the fold of a fan-out parent's piece events, in log order: each
// piece number counts once, with its first outcome, so a piece run or
// reported twice is not counted twice. The fan-in counter and replay
// --verify both count with it, so they agree by construction.
type Pieces struct {
	Plan    *domain.FanoutPlan // from piece.planned; nil until the parent waits
	Planned bool               // a piece.planned was folded (events before v1.1 carry no plan)
	Counts  domain.FanoutCounts
	// UpTo is the last piece event folded: Pieces is the fold of the
	// parent's piece events up to and including it.
	UpTo uint64

	seen map[int]bool // piece -> it succeeded
	errs map[string]int
}

// NewPieces returns an empty fold.
func NewPieces() *Pieces {
	return &Pieces{seen: map[int]bool{}, errs: map[string]int{}}
}

// Fold adds the piece event at seq; events at or before UpTo are ignored
// (already folded).
func (p *Pieces) Fold(seq uint64, ev *domain.Event) {
	if seq <= p.UpTo {
		return
	}
	p.UpTo = seq
	if ev.Type == domain.PcPlanned {
		p.Planned = true
		if ev.Plan != nil && p.Plan == nil {
			plan := *ev.Plan
			p.Plan = &plan
		}
		return
	}
	if ev.Piece < 1 {
		return
	}
	if _, ok := p.seen[ev.Piece]; ok {
		return // a repeat: redelivered, or run again after a crash
	}
	switch ev.Type {
	case domain.PcSucceeded:
		p.Counts.Succeeded++
	case domain.PcFailed:
		p.Counts.Failed++
		msg := "failed"
		if ev.Error != nil {
			msg = ev.Error.Message
		}
		p.errs[msg]++
	case domain.PcCancelled:
		p.Counts.Cancelled++
	default:
		return
	}
	p.seen[ev.Piece] = ev.Type == domain.PcSucceeded
}

// Ended reports whether piece n has an outcome in what was folded.
func (p *Pieces) Ended(n int) bool {
	_, ok := p.seen[n]
	return ok
}

// Carried are the pieces a run of a fan-out with plan carries over from
// this fold of an earlier run's pieces when it runs only the failed ones
// (Spec.FailedPieces): the pieces that succeeded there, by number. None
// unless the earlier run planned the same kind and number of pieces (and
// batch type), since otherwise piece n need not be the same work.
func (p *Pieces) Carried(plan domain.FanoutPlan) map[int]bool {
	if p.Plan == nil || p.Plan.Kind != plan.Kind || p.Plan.Total != plan.Total || p.Plan.BatchType != plan.BatchType {
		return nil
	}
	out := make(map[int]bool, p.Counts.Succeeded)
	for n, ok := range p.seen {
		if ok && n <= plan.Total {
			out[n] = true
		}
	}
	return out
}

// Tally is the counts with the n most common failure messages and UpTo.
func (p *Pieces) Tally(n int) domain.FanoutCounts {
	c := p.Counts
	c.Errors = topErrors(p.errs, n)
	c.UpTo = p.UpTo
	return c
}

// topErrors returns the n most common messages of counts.
func topErrors(counts map[string]int, n int) []domain.ErrorCount {
	out := make([]domain.ErrorCount, 0, len(counts))
	for m, c := range counts {
		out = append(out, domain.ErrorCount{Message: m, Count: c})
	}
	sort.Slice(out, func(i, k int) bool {
		if out[i].Count != out[k].Count {
			return out[i].Count > out[k].Count
		}
		return out[i].Message < out[k].Message
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}
