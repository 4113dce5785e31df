package cmdservice

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// What the command protocol offers beyond one read: waiting for a job's
// end (wait), its history in pages (history), lists in pages (list with a
// cursor).

// Bounds of the command protocol's waits and pages.
const (
	// MaxCommandWait caps a wait command's timeout (and is its default).
	MaxCommandWait = 60 * time.Second
	// MaxCommandWaits bounds the wait commands one engine holds at once;
	// past it a wait is refused with overloaded.
	MaxCommandWaits = 1000
	// DefaultHistoryLimit and MaxHistoryLimit bound a history page.
	DefaultHistoryLimit = 1000
	MaxHistoryLimit     = 10000
)

// waitCommand is the body of the wait command.
type waitCommand struct {
	ID      string             `json:"id" msgpack:"id"`
	Timeout *commands.Duration `json:"timeout,omitempty" msgpack:"timeout,omitempty"`
}

// historyCommand is the body of the history command.
type historyCommand struct {
	ID    string `json:"id" msgpack:"id"`
	After uint64 `json:"after,omitempty" msgpack:"after,omitempty"`
	Limit *int   `json:"limit,omitempty" msgpack:"limit,omitempty"`
}

// listCommand is the body of the list command: a filter, a page size and
// where the page starts.
type listCommand struct {
	store.Filter `msgpack:",inline"`
	Cursor       string `json:"cursor,omitempty" msgpack:"cursor,omitempty"`
}

// errPageFull ends a history read at its page's size.
var errPageFull = errors.New("page full")

// historyPage reads the events of job id after sequence after, at most
// limit, and says whether more follow.
func historyPage(ctx context.Context, s *store.Store, id string, after uint64, limit int) ([]*domain.Event, bool, error) {
	var evs []*domain.Event
	more := false
	err := s.History(ctx, id, after, false, func(e *domain.Event) error {
		if len(evs) == limit {
			more = true
			return errPageFull
		}
		evs = append(evs, e)
		return nil
	})
	if errors.Is(err, errPageFull) {
		err = nil
	}
	return evs, more, err
}

// Cursors of lists: the position of the last job of a page in the
// newest-first order (its creation time, then its id), opaque to clients.
// The HTTP API's cursors are the same (gateway.Cursor, through the
// engine's facade).
const cursorVersion = 1

// EncodeCursor is the cursor of the page after the job created at with id.
func EncodeCursor(at time.Time, id string) string {
	b := make([]byte, 9, 9+len(id))
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(at.UnixNano()))
	return base64.RawURLEncoding.EncodeToString(append(b, id...))
}

// DecodeCursor reads a cursor of EncodeCursor; anything else is a
// bad-cursor problem.
func DecodeCursor(s string) (time.Time, string, error) {
	bad := problems.New(problems.BadCursor, http.StatusBadRequest, "the cursor is not one this API handed out; start again without it")
	bad.Field = "cursor"
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 9+26 || b[0] != cursorVersion {
		return time.Time{}, "", bad
	}
	id := string(b[9:])
	if !domain.ValidID(id) {
		return time.Time{}, "", bad
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b[1:9]))).UTC(), id, nil
}

// page cuts jobs (newest first) to those after the cursor, at most limit
// (0: all), and returns the cursor of the next page ("" if none).
func page(jobs []*domain.Job, cursor string, limit int) ([]*domain.Job, string, error) {
	if cursor != "" {
		at, id, err := DecodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		i := 0
		for i < len(jobs) && !older(jobs[i], at, id) {
			i++
		}
		jobs = jobs[i:]
	}
	if limit <= 0 || len(jobs) <= limit {
		return jobs, "", nil
	}
	last := jobs[limit-1]
	return jobs[:limit], EncodeCursor(last.CreatedAt, last.ID), nil
}

// older reports whether j comes after (at, id) in the newest-first order.
func older(j *domain.Job, at time.Time, id string) bool {
	if !j.CreatedAt.Equal(at) {
		return j.CreatedAt.Before(at)
	}
	return j.ID < id
}

// knownID refuses an id that cannot be a job's as the HTTP API does: no
// job has it (not-found), whatever transport asks.
func knownID(id string) error {
	if !domain.ValidID(id) {
		return fmt.Errorf("no job has the id %q: %w", id, commands.ErrNotFound)
	}
	return nil
}

// wait answers the wait command: the job as soon as it is terminal, or as
// it is when the timeout (capped at MaxCommandWait, its default) passed,
// with timed_out. At most MaxCommandWaits wait at once in one engine.
func (c *CommandServer) wait(ctx context.Context, p *commands.Principal, decode func(any) *cmdReply, failed func(error, string) *cmdReply) *cmdReply {
	var req waitCommand
	if r := decode(&req); r != nil {
		return r
	}
	if err := knownID(req.ID); err != nil {
		return failed(err, req.ID)
	}
	d := MaxCommandWait
	if req.Timeout != nil {
		if *req.Timeout < 0 {
			return failed(&commands.InputError{Field: "timeout", Value: time.Duration(*req.Timeout).String(), Reason: "must not be negative"}, req.ID)
		}
		d = min(time.Duration(*req.Timeout), MaxCommandWait)
	}
	snap, err := c.store.ReadSeen(ctx, p, req.ID)
	if err != nil {
		return failed(err, req.ID)
	}
	j := snap.Job
	if !j.State.Terminal() && d > 0 {
		select {
		case c.waits <- struct{}{}:
			defer func() { <-c.waits }()
		default:
			return failed(problems.New(problems.Overloaded, http.StatusServiceUnavailable, fmt.Sprintf(
				"this engine holds its maximum of %d waits; retry shortly", MaxCommandWaits)), req.ID)
		}
		// The command's own deadline is 30 s: a wait has its own.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
		defer cancel()
		stop := context.AfterFunc(ctx, func() {
			if !errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				cancel() // the server stops
			}
		})
		defer stop()
		if j, err = c.store.WaitTerminal(wctx, req.ID, d, j); err != nil {
			return failed(err, req.ID)
		}
	}
	timedOut := !j.State.Terminal()
	return &cmdReply{Job: projections.View(j), TimedOut: &timedOut}
}

// history answers the history command: a page of the job's events after
// a sequence, and where the next page starts.
func (c *CommandServer) history(ctx context.Context, p *commands.Principal, decode func(any) *cmdReply, failed func(error, string) *cmdReply) *cmdReply {
	var req historyCommand
	if r := decode(&req); r != nil {
		return r
	}
	if err := knownID(req.ID); err != nil {
		return failed(err, req.ID)
	}
	limit := DefaultHistoryLimit
	if req.Limit != nil {
		if *req.Limit < 1 || *req.Limit > MaxHistoryLimit {
			return failed(&commands.InputError{Field: "limit", Value: fmt.Sprint(*req.Limit),
				Reason: fmt.Sprintf("want 1-%d", MaxHistoryLimit)}, req.ID)
		}
		limit = *req.Limit
	}
	if err := c.sees(ctx, p, req.ID); err != nil {
		return failed(err, req.ID)
	}
	evs, more, err := historyPage(ctx, c.store, req.ID, req.After, limit)
	if err != nil {
		return failed(err, req.ID)
	}
	out := &cmdReply{Events: make([]*projections.EventView, len(evs)), More: &more}
	next := req.After
	for i, e := range evs {
		out.Events[i] = projections.ViewEvent(e)
		next = e.Seq
	}
	out.Next = &next
	return out
}
