package replay

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// MaxListAt is the most jobs JobsAt returns; DefaultListAt when no limit
// is given.
const (
	MaxListAt     = 1000
	DefaultListAt = 100
)

// JobAt folds the events of job id the log stored at or before at (its
// stream timestamps), read under namespace ns ("": any): the job as it was
// then. A job with no event by then (submitted later, unknown, or of
// another namespace than ns) is commands.ErrNotFound.
func JobAt(ctx context.Context, js jetstream.JetStream, ns, id string, at time.Time) (*domain.Job, error) {
	sc := Scope{Job: id, Namespace: ns, Until: at}
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	h, err := foldScope(ctx, js, sc, 0, keepWhole)
	if err != nil {
		return nil, err
	}
	j := h.live[id]
	if j == nil {
		return nil, fmt.Errorf("job %s at %s: %w", id, at.UTC().Format(time.RFC3339Nano), commands.ErrNotFound)
	}
	return j, nil
}

// AtFilter selects the jobs JobsAt returns: of a namespace, queue, type
// and in a state (each "": any), at most Limit (0: DefaultListAt).
type AtFilter struct {
	Namespace string
	Queue     string
	Type      string
	State     domain.State
	Limit     int
}

// Validate checks the filter: a specific error naming the field.
func (f AtFilter) Validate() error {
	if err := (Scope{Namespace: f.Namespace, Queue: f.Queue, Type: f.Type}).Validate(); err != nil {
		return err
	}
	if f.State != "" && !f.State.Valid() {
		return &commands.InputError{Field: "state", Value: string(f.State), Reason: "not a job state"}
	}
	if f.Limit < 0 || f.Limit > MaxListAt {
		return &commands.InputError{Field: "limit", Value: fmt.Sprint(f.Limit), Reason: fmt.Sprintf("want 0 to %d", MaxListAt)}
	}
	return nil
}

// JobsAt folds the log up to at (the events stored at or before it) for
// the filter's namespace, queue and type, and returns the jobs that were
// in its state then, the most recently moved first, at most its limit;
// more says whether there were others. Memory holds the jobs that had not
// ended, and a few dozen bytes for each that had; the ones returned that
// had ended are folded again.
func JobsAt(ctx context.Context, js jetstream.JetStream, at time.Time, f AtFilter) (jobs []*domain.Job, more bool, err error) {
	if err := f.Validate(); err != nil {
		return nil, false, err
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultListAt
	}
	h, err := foldScope(ctx, js, Scope{Namespace: f.Namespace, Queue: f.Queue, Type: f.Type, Until: at}, 0, keepState)
	if err != nil {
		return nil, false, err
	}
	type hit struct {
		id  string
		seq uint64
	}
	var hits []hit
	for id, j := range h.live {
		if f.State == "" || j.State == f.State {
			hits = append(hits, hit{id, j.Seq})
		}
	}
	for id, d := range h.done {
		if f.State == "" || d.state == f.State {
			hits = append(hits, hit{id, d.seq})
		}
	}
	sort.Slice(hits, func(i, k int) bool { return hits[i].seq > hits[k].seq })
	if len(hits) > limit {
		hits, more = hits[:limit], true
	}
	jobs = make([]*domain.Job, 0, len(hits))
	for _, x := range hits {
		j := h.live[x.id]
		if j == nil {
			if j, err = h.expand(ctx, x.id, x.seq); err != nil {
				return nil, false, err
			}
		}
		jobs = append(jobs, j)
	}
	return jobs, more, nil
}
