package jetflow

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// Cursor is the position of the job in List's order (newest first: by
// creation time, then id), for ListFilter.Before: the next page starts
// after it. It holds the creation time as well as the id because ids of
// idempotency keys and fan-out children do not sort by time.
func (j *JobInfo) Cursor() string {
	return j.ID + "." + strconv.FormatInt(j.CreatedAt.UnixNano(), 36)
}

// listCursor is a parsed ListFilter.Before.
type listCursor struct {
	id      string
	created time.Time
}

// parseCursor parses a JobInfo.Cursor ("": none).
func parseCursor(s string) (*listCursor, error) {
	if s == "" {
		return nil, nil
	}
	id, at, ok := strings.Cut(s, ".")
	n, err := strconv.ParseInt(at, 36, 64)
	if !ok || err != nil || !domain.ValidID(id) {
		return nil, &commands.InputError{Field: "before", Value: s, Reason: "not a cursor of jetflow ls (a job's Cursor())"}
	}
	return &listCursor{id: id, created: time.Unix(0, n)}, nil
}

// after reports whether a job created at created with id comes after the
// cursor in List's order.
func (c *listCursor) after(created time.Time, id string) bool {
	if !created.Equal(c.created) {
		return created.Before(c.created)
	}
	return id < c.id
}

// listPage lists the jobs after cur (nil: from the start), at most f.Limit
// of them (0: all), by asking list for growing pages: the backend's own
// limit counts from the newest job, so the page must reach past the
// cursor. A backend whose list reads every job anyway asks for all at
// once (grow false).
func listPage(ctx context.Context, f engine.Filter, cur *listCursor, grow bool,
	list func(ctx context.Context, f engine.Filter) ([]*projections.JobView, error)) ([]*projections.JobView, error) {
	if cur == nil {
		return list(ctx, f)
	}
	want := f.Limit
	ask := f
	if !grow || want == 0 {
		ask.Limit = 0
	} else {
		ask.Limit = 2 * want
	}
	for {
		all, err := list(ctx, ask)
		if err != nil {
			return nil, err
		}
		var out []*projections.JobView
		for _, v := range all {
			if cur.after(v.CreatedAt, v.ID) {
				out = append(out, v)
			}
		}
		if ask.Limit == 0 || len(all) < ask.Limit || len(out) >= want {
			if want > 0 && len(out) > want {
				out = out[:want]
			}
			if out == nil {
				out = []*projections.JobView{}
			}
			return out, nil
		}
		ask.Limit *= 4
	}
}
