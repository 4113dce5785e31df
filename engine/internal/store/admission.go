package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// AdmissionPlace is where a job stands among its queue's pending jobs.
type AdmissionPlace struct {
	Pending  bool `json:"pending"`
	Position int  `json:"position"` // pending jobs admitted before it, slots freeing one at a time
	// Hold is the limit that holds it now (nil: a slot is free, its turn
	// comes at once).
	Hold *domain.Hold `json:"hold,omitempty"`
}

// admissionPlaceOf asks the leading engine's Admitter where pending job id
// stands; false if no admitter answered in time or the job is not pending
// there.
func (s *Store) admissionPlaceOf(ctx context.Context, id string) (AdmissionPlace, bool) {
	var p AdmissionPlace
	ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	m, err := s.nc.RequestWithContext(ctx, streams.AdmissionPosition, []byte(id))
	if err != nil || json.Unmarshal(m.Data, &p) != nil || !p.Pending {
		return p, false
	}
	return p, true
}

// AdmissionCountsOf asks the leading engine's Admitter for the slot counts
// of queue (every queue with limits when empty).
func (s *Store) AdmissionCountsOf(ctx context.Context, queue string) (map[string]commands.Counts, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	m, err := s.nc.RequestWithContext(ctx, streams.AdmissionCounts, []byte(queue))
	if err != nil {
		return nil, err
	}
	var out map[string]commands.Counts
	if err := json.Unmarshal(m.Data, &out); err != nil {
		return nil, err
	}
	return out, nil
}
