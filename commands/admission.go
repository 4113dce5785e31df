package commands

import (
	"sort"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// Admission decides which pending jobs of one queue with limits take its
// free slots. It holds no counter of its own: its state is the set of the
// queue's jobs that are not terminal, each in the state the log last gave
// it (Observe), so rebuilding it from the log rebuilds the counts.
//
// A job holds a slot while it is queued (once admitted), claimed or
// running, and while an admission of it is being written. A job waiting
// for a retry (scheduled) or for its children (waiting) holds none.
// Admission is fair across users: one job per user in turn (round-robin),
// the oldest first within a user, skipping users at their own limit.
type Admission struct {
	Queue   string
	Limits  domain.QueueLimits
	jobs    map[string]*slotJob
	users   map[string]*userSlots
	ring    []string // users with pending jobs, in turn
	cursor  int
	holding int
	fresh   []*slotJob // became pending, oldest first, not yet looked at by Holds
}

// SlotUser is whom a job's slots count against: its user within its
// namespace ("acme/ada"), since two namespaces' users of one name (their
// tokens' names) are two users. The admission's counts are by SlotUser.
func SlotUser(namespace, user string) string { return namespace + "/" + user }

// Slot is what Admission needs to know of a job: the state the log gives
// it, its user and when it was created (its age among the pending).
type Slot struct {
	ID      string
	User    string // SlotUser
	State   domain.State
	Created time.Time
	Hold    *domain.Hold // why it waits, as its record says (job.pending)
	Seq     uint64       // the event that gave it this state: an older one is ignored (0: take it)
}

type slotJob struct {
	Slot
	admitting bool      // an admission is being written
	since     time.Time // when admission saw it become pending
}

// HoldAfter is how long a job waits in pending before admission records
// why (job.pending): a job admitted sooner gets none, so a burst that the
// slots absorb within a second costs no write per job.
const HoldAfter = time.Second

type userSlots struct {
	holding  int
	pending  []*slotJob // oldest first; entries no longer pending are skipped lazily
	npending int        // entries of pending that are pending and not admitting
	inRing   bool
}

// NewAdmission returns an empty admission for queue with limits l.
func NewAdmission(queue string, l domain.QueueLimits) *Admission {
	return &Admission{Queue: queue, Limits: l, jobs: map[string]*slotJob{}, users: map[string]*userSlots{}}
}

func holdsSlot(j *slotJob) bool {
	if j.admitting {
		return true
	}
	switch j.State {
	case domain.StateQueued, domain.StateClaimed, domain.StateRunning:
		return true
	}
	return false
}

func (a *Admission) user(name string) *userSlots {
	u := a.users[name]
	if u == nil {
		u = &userSlots{}
		a.users[name] = u
	}
	return u
}

// Observe records the state the log gives a job of the queue.
func (a *Admission) Observe(s Slot) {
	j := a.jobs[s.ID]
	if j == nil {
		if s.State.Terminal() || s.State == domain.StateNew {
			return
		}
		j = &slotJob{Slot: Slot{ID: s.ID, User: s.User, Created: s.Created}}
		a.jobs[s.ID] = j
	}
	if s.Seq != 0 && s.Seq <= j.Seq {
		return // the log told more already
	}
	if s.Seq != 0 {
		j.Seq = s.Seq
	}
	u := a.user(j.User)
	held, pending := holdsSlot(j), waiting(j)
	j.admitting = false // whatever was being written, the log now says where the job is
	j.State = s.State
	if s.State != domain.StatePending {
		j.Hold = nil
	} else if s.Hold != nil {
		j.Hold = s.Hold
	}
	if s.State.Terminal() {
		delete(a.jobs, s.ID)
	}
	if now := holdsSlot(j) && !s.State.Terminal(); now != held {
		if now {
			a.holding++
			u.holding++
		} else {
			a.holding--
			u.holding--
		}
	}
	switch nowPending := waiting(j); {
	case nowPending && !pending:
		a.enqueue(u, j)
		j.since = time.Now()
		a.fresh = append(a.fresh, j)
	case !nowPending && pending:
		u.npending--
	}
	if u.holding == 0 && u.npending == 0 && !u.inRing {
		delete(a.users, j.User)
	}
}

// Queued returns the jobs that hold a slot and are queued (admitted and
// waiting for a worker), as the log says.
func (a *Admission) Queued() []string {
	var out []string
	for id, j := range a.jobs {
		if j.State == domain.StateQueued && !j.admitting {
			out = append(out, id)
		}
	}
	return out
}

// Known reports whether a job of the queue that is not terminal is known.
func (a *Admission) Known(id string) bool { return a.jobs[id] != nil }

// SetHold records why a pending job waits, as its record now says. A job
// whose hold kept it out of admission (a workflow's step waiting for its
// dependencies: Hold.Blocks) and no longer does takes its place among
// the pending.
func (a *Admission) SetHold(id string, h *domain.Hold) {
	j := a.jobs[id]
	if j == nil || j.State != domain.StatePending {
		return
	}
	was := waiting(j)
	j.Hold = h
	switch now := waiting(j); {
	case now && !was:
		a.enqueue(a.user(j.User), j)
		j.since = time.Now()
		a.fresh = append(a.fresh, j)
	case was && !now:
		a.user(j.User).npending--
	}
}

// enqueue puts j among its user's pending jobs, oldest first.
func (a *Admission) enqueue(u *userSlots, j *slotJob) {
	older := func(x, y *slotJob) bool {
		return x.Created.Before(y.Created) || x.Created.Equal(y.Created) && x.ID < y.ID
	}
	n := len(u.pending)
	if n == 0 || !older(j, u.pending[n-1]) {
		u.pending = append(u.pending, j)
	} else {
		i := sort.Search(n, func(i int) bool { return older(j, u.pending[i]) })
		u.pending = append(u.pending, nil)
		copy(u.pending[i+1:], u.pending[i:])
		u.pending[i] = j
	}
	u.npending++
	if !u.inRing {
		u.inRing = true
		a.ring = append(a.ring, j.User)
	}
}

// waiting reports whether j is one of its user's pending jobs to admit:
// pending, not being admitted, and not held by something other than a
// slot (a workflow's step waiting for its dependencies).
func waiting(j *slotJob) bool {
	return j.State == domain.StatePending && !j.admitting && !j.Hold.Blocks()
}

// Next picks the pending jobs that take the queue's free slots now, marks
// them admitting (they hold their slots from here) and returns their ids,
// in the order admitted. The caller writes each admission and reports it
// with Settled.
func (a *Admission) Next() []string {
	var out []string
	free := -1 // no queue limit
	if a.Limits.MaxRunning > 0 {
		// A limit lowered under what runs leaves no slot (not a negative
		// count, which would read as no limit).
		free = max(0, a.Limits.MaxRunning-a.holding)
	}
	for free != 0 && len(a.ring) > 0 {
		progressed := false
		for turns := len(a.ring); turns > 0 && free != 0 && len(a.ring) > 0; turns-- {
			if a.cursor >= len(a.ring) {
				a.cursor = 0
			}
			name := a.ring[a.cursor]
			u := a.users[name]
			if u == nil || u.npending == 0 {
				a.dropFromRing(a.cursor)
				continue
			}
			a.cursor++
			if a.Limits.MaxRunningPerUser > 0 && u.holding >= a.Limits.MaxRunningPerUser {
				continue
			}
			j := u.popOldest()
			j.admitting = true
			u.npending--
			u.holding++
			a.holding++
			if free > 0 {
				free--
			}
			out = append(out, j.ID)
			progressed = true
		}
		if !progressed {
			break
		}
	}
	return out
}

func (u *userSlots) popOldest() *slotJob {
	for i, j := range u.pending {
		if waiting(j) {
			u.pending[i] = nil
			u.pending = u.pending[i+1:]
			return j
		}
	}
	panic("admission: npending > 0 with no pending job")
}

func (a *Admission) dropFromRing(i int) {
	name := a.ring[i]
	if u := a.users[name]; u != nil {
		u.inRing = false
		u.pending = nil
		if u.holding == 0 {
			delete(a.users, name)
		}
	}
	a.ring = append(a.ring[:i], a.ring[i+1:]...)
	if a.cursor > i {
		a.cursor--
	}
}

// Settled reports how the admission of id went: written (the log will say
// queued), or not (the job moved on first, or the write failed): then it
// gives its slot back, and, if it is still pending, takes its place again.
func (a *Admission) Settled(id string, written bool) {
	j := a.jobs[id]
	if written || j == nil || !j.admitting {
		return
	}
	j.admitting = false
	u := a.user(j.User)
	if j.State != domain.StateQueued && j.State != domain.StateClaimed && j.State != domain.StateRunning {
		a.holding--
		u.holding--
	}
	if j.State == domain.StatePending {
		a.enqueue(u, j)
	}
}

// Hold is a pending job to record why it waits (job.pending).
type Hold struct {
	ID   string
	Hold domain.Hold
}

// Holds returns the jobs that have been pending for HoldAfter (as of
// now) and whose records do not say why yet, with the limit that holds
// them. Each job is looked at once per stay in pending.
func (a *Admission) Holds(now time.Time) []Hold {
	var out []Hold
	n := 0
	for _, j := range a.fresh {
		if j.since.After(now.Add(-HoldAfter)) {
			break // the rest came later
		}
		n++
		if !waiting(j) || a.jobs[j.ID] != j {
			continue
		}
		h, ok := a.reason(j, now)
		if !ok || j.Hold != nil && j.Hold.Limit == h.Limit && j.Hold.Max == h.Max {
			continue
		}
		j.Hold = &h
		out = append(out, Hold{ID: j.ID, Hold: h})
	}
	a.fresh = a.fresh[n:]
	return out
}

// reason is the limit that holds pending job j now (its user's, if the
// user is at it; else the queue's); false if a slot is free for it (its
// turn comes at the next Next).
func (a *Admission) reason(j *slotJob, now time.Time) (domain.Hold, bool) {
	// A user at their own limit waits for one of their own jobs, whatever
	// the queue: that is the reason to tell.
	switch {
	case a.Limits.MaxRunningPerUser > 0 && a.user(j.User).holding >= a.Limits.MaxRunningPerUser:
		return domain.Hold{Limit: domain.LimitUser, Max: a.Limits.MaxRunningPerUser, Since: now}, true
	case a.Limits.MaxRunning > 0 && a.holding >= a.Limits.MaxRunning:
		return domain.Hold{Limit: domain.LimitQueue, Max: a.Limits.MaxRunning, Since: now}, true
	}
	return domain.Hold{}, false
}

// Reason is the limit that holds pending job id now, since when it has
// been pending; false if id is not pending here or nothing holds it.
func (a *Admission) Reason(id string) (domain.Hold, bool) {
	j := a.jobs[id]
	if j == nil || !waiting(j) {
		return domain.Hold{}, false
	}
	h, ok := a.reason(j, j.since)
	return h, ok
}

// Position is how many pending jobs of the queue admission takes before
// pending job id, if slots free one at a time (round-robin over users,
// oldest first within one), and false if id is not pending here.
func (a *Admission) Position(id string) (int, bool) {
	j := a.jobs[id]
	if j == nil || !waiting(j) {
		return 0, false
	}
	u := a.users[j.User]
	if u == nil {
		return 0, false
	}
	k := 0 // the user's own pending jobs ahead
	for _, x := range u.pending {
		if x == j {
			break
		}
		if waiting(x) {
			k++
		}
	}
	mine := -1
	for i := range a.ring {
		if a.ring[(a.cursor+i)%len(a.ring)] == j.User {
			mine = i
			break
		}
	}
	ahead := k
	for i := range a.ring {
		name := a.ring[(a.cursor+i)%len(a.ring)]
		if name == j.User {
			continue
		}
		turns := k
		if mine < 0 || i < mine {
			turns++ // its turn comes before this user's in each round
		}
		ahead += min(a.users[name].npending, turns)
	}
	return ahead, true
}

// Counts are a queue's slots as admission sees them.
type Counts struct {
	Holding int              `json:"running"`         // jobs holding a slot (queued after admission, claimed, running)
	Pending int              `json:"pending"`         // jobs waiting for one
	Users   map[string]Count `json:"users,omitempty"` // by SlotUser ("ns/user"; "ns/": no one in particular)
}

// Count is one user's share of a queue's slots.
type Count struct {
	Holding int `json:"running"`
	Pending int `json:"pending"`
}

// Counts returns the queue's counts now.
func (a *Admission) Counts() Counts {
	c := Counts{Holding: a.holding, Users: map[string]Count{}}
	for name, u := range a.users {
		if u.holding == 0 && u.npending == 0 {
			continue
		}
		c.Pending += u.npending
		c.Users[name] = Count{Holding: u.holding, Pending: u.npending}
	}
	return c
}

// CountSlots counts the slots of a queue's jobs as the log gives them,
// the way Admission does: replay --verify compares it with a live one.
func CountSlots(jobs []Slot) Counts {
	a := NewAdmission("", domain.QueueLimits{})
	for _, s := range jobs {
		a.Observe(s)
	}
	return a.Counts()
}
