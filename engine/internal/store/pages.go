package store

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Reads and writes in pages, for clients whose answer is one message (the
// command protocol) and for the Go client alike: the children of a fan-out
// parent, and a purge of old jobs.

// Children calls fn with each child of a fan-out parent (a fan-out of
// children) after piece number after, in piece order, until fn returns
// false; a child not created yet is skipped. A job of no fan-out of
// children has none but the children its attempts made, if it is a
// coordinator that does not wait for them yet (or never will: it ended
// first, or its last attempt fanned out to batches): piece.making. The
// parent and the children are read as their records are (Record).
func (s *Store) Children(ctx context.Context, id string, after int, fn func(piece int, child *domain.Job) bool) error {
	snap, err := s.Record(ctx, id)
	if err != nil {
		return err
	}
	total := 0
	if f := snap.Job.Fanout; f != nil && f.Plan.Kind == domain.FanoutChildren {
		total = f.Plan.Total
	} else {
		fam, err := s.readFamily(ctx, id)
		if err != nil {
			return err
		}
		total = fam.making
	}
	for n := max(after+1, 1); n <= total; n++ {
		child, err := s.Record(ctx, ChildID(snap.Job.Spec.Namespace, id, n))
		if errors.Is(err, commands.ErrNotFound) {
			continue // not created (yet)
		}
		if err != nil {
			return err
		}
		if !fn(n, child.Job) {
			return nil
		}
	}
	return nil
}

// PurgePage is one page of a purge (Store.PurgePage).
type PurgePage struct {
	IDs    []string // the jobs selected (parents, without their children), oldest first
	Purged int      // records purged (a parent's children too)
	// LastEnd and LastID are the end and id of the last job selected: the
	// next page starts after them.
	LastEnd time.Time
	LastID  string
	More    bool // the page is full: more may follow
}

// PurgePage selects the terminal jobs that finished more than olderThan
// ago (of namespace ns, if not empty; children are left out, purged with
// their parents), after (afterEnd, afterID) in the order of their ends,
// then ids, at most limit; and, unless dryRun, purges each (the reason
// "purge --older-than <olderThan>"), whatever its namespace's retention. A parent with a child still running
// is left, a job gone meanwhile skipped: the next page starts after them
// either way. It reads the whole jobs bucket once.
func (s *Store) PurgePage(ctx context.Context, olderThan time.Duration, ns string, afterEnd time.Time, afterID string, limit int, dryRun bool) (PurgePage, error) {
	var page PurgePage
	if limit <= 0 {
		return page, fmt.Errorf("purge page of %d jobs", limit)
	}
	var first latestFirst // the limit earliest after the cursor
	now := time.Now()
	err := s.Scan(ctx, func(j *domain.Job) {
		if !purgeable(j, ns) || !commands.Expired(j, olderThan, now) {
			return
		}
		c := expired{j.ID, endOf(j)}
		if !c.after(afterEnd, afterID) {
			return
		}
		switch {
		case len(first) < limit:
			heap.Push(&first, c)
		case first[0].after(c.end, c.id):
			first[0] = c
			heap.Fix(&first, 0)
		}
	})
	if err != nil {
		return page, err
	}
	page.More = len(first) == limit
	sel := make([]expired, len(first))
	for i := len(sel) - 1; i >= 0; i-- {
		sel[i] = heap.Pop(&first).(expired)
	}
	for _, c := range sel {
		page.IDs = append(page.IDs, c.id)
		page.LastEnd, page.LastID = c.end, c.id
		if dryRun {
			continue
		}
		n, err := s.Purge(ctx, c.id, "purge --older-than "+olderThan.String())
		page.Purged += n
		if err != nil && !errors.Is(err, commands.ErrNotFound) && !errors.Is(err, commands.ErrInvalidTransition) {
			return page, err
		}
	}
	return page, nil
}

// purgeable reports whether a purge of namespace ns ("": every one) may
// select j: a terminal job of it that is no child (children are purged
// with their parents).
func purgeable(j *domain.Job, ns string) bool {
	return j.State.Terminal() && j.Spec.Parent == "" && (ns == "" || j.Spec.Namespace == ns)
}

// endOf is when a terminal job ended, as commands.Expired takes it.
func endOf(j *domain.Job) time.Time {
	if j.FinishedAt.IsZero() {
		return j.UpdatedAt
	}
	return j.FinishedAt
}

// after reports whether c comes after (end, id): a later end, or the same
// end and a greater id.
func (c expired) after(end time.Time, id string) bool {
	return c.end.After(end) || c.end.Equal(end) && c.id > id
}

// latestFirst is a heap of expired jobs whose top is the last of them in
// the order of ends, then ids: the first to give way to an earlier one.
type latestFirst []expired

func (h latestFirst) Len() int           { return len(h) }
func (h latestFirst) Less(i, k int) bool { return h[i].after(h[k].end, h[k].id) }
func (h latestFirst) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *latestFirst) Push(x any)        { *h = append(*h, x.(expired)) }
func (h *latestFirst) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
