package store

import (
	"container/heap"
	"context"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Expired lists the ids of terminal jobs older than the retention of their
// namespace (ns: only that one, if not empty), oldest first, at most max.
// Children are left out: they are purged with their parent. It reads the
// whole bucket once and keeps only the max oldest, so a backlog of any size
// costs one scan and max entries of memory.
func (s *Store) Expired(ctx context.Context, retention func(ns string) time.Duration, ns string, max int) ([]string, error) {
	var oldest newestFirst
	now := time.Now()
	per := map[string]time.Duration{}
	err := s.Scan(ctx, func(j *domain.Job) {
		if !purgeable(j, ns) {
			return
		}
		r, ok := per[j.Spec.Namespace]
		if !ok {
			r = retention(j.Spec.Namespace)
			per[j.Spec.Namespace] = r
		}
		if !commands.Expired(j, r, now) {
			return
		}
		c := expired{j.ID, j.FinishedAt}
		switch {
		case len(oldest) < max:
			heap.Push(&oldest, c)
		case c.end.Before(oldest[0].end):
			oldest[0] = c
			heap.Fix(&oldest, 0)
		}
	})
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(oldest))
	for i := len(ids) - 1; i >= 0; i-- {
		ids[i] = heap.Pop(&oldest).(expired).id
	}
	return ids, nil
}

type expired struct {
	id  string
	end time.Time
}

// newestFirst is a heap of expired jobs whose top is the most recent one:
// the first to give way to an older one.
type newestFirst []expired

func (h newestFirst) Len() int           { return len(h) }
func (h newestFirst) Less(i, k int) bool { return h[i].end.After(h[k].end) }
func (h newestFirst) Swap(i, k int)      { h[i], h[k] = h[k], h[i] }
func (h *newestFirst) Push(x any)        { *h = append(*h, x.(expired)) }
func (h *newestFirst) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
