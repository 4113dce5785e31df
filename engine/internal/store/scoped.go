package store

import "github.com/jetflow/jetflow/internal/domain"

// Scoped is q as a principal held to one namespace is shown it
// (commands.Principal.SeesQueue): every count from jobs, its namespace's
// jobs on the queue by state (none from the queue's stream, which holds
// every namespace's work items), without the admitter's slots (they count,
// and name, every namespace's users; the limits themselves are shown). q
// itself is not changed.
func (q *QueueInfo) Scoped(jobs map[domain.State]int) *QueueInfo {
	c := *q
	c.Jobs = jobs
	c.Running = jobs[domain.StateRunning] + jobs[domain.StateClaimed]
	c.Depth, c.Held = uint64(jobs[domain.StateQueued]), c.Running
	c.Delayed = uint64(jobs[domain.StateScheduled])
	c.Slots = nil
	return &c
}
