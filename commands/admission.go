package commands

import (
	"container/heap"
	"slices"
	"sort"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// Admission decides which pending jobs of one queue with limits take its
// free slots. It holds no counter of its own: its state is the set of the
// queue's jobs that are not terminal, each in the state the log last gave
// it (Observe), and the admissions of the last rate period the log told
// (CountAdmission), so rebuilding it from the log rebuilds the counts.
//
// A job holds a slot while it is queued (once admitted), claimed or
// running, and while an admission of it is being written. A job waiting
// for a retry (scheduled) or for its children (waiting) holds none.
//
// Pending jobs wait in lanes: the jobs of one user with one concurrency
// key and one rate key, each lane in order (higher priority first, then
// the oldest). Admission is fair across lanes: it takes the head of one
// lane in turn (round-robin: the lane served longest ago first), skipping
// a lane whose head its limits hold (its user's, its key's, its rate
// key's). A job with a concurrency key in a queue with max_running_per_key
// waits for the jobs of its key ahead of it, in every lane: one at a time
// per key means in submit order.
type Admission struct {
	Queue  string
	Limits domain.QueueLimits
	jobs   map[string]*slotJob
	users  map[string]*holder // by SlotUser
	keys   map[string]*holder // by scoped concurrency key (jobs with one)
	lanes  map[string]*lane
	// active are the lanes Next looks at: every lane with pending jobs
	// but those parked on a user or key whose limit held their head (a
	// queue with 1,000 keys at their limit is not scanned 1,000 lanes a
	// pass: a lane comes back when its holder frees a slot or admits).
	active  map[*lane]struct{}
	rates   map[string]*rateWindow // by scoped rate key; "": the queue's
	holding int
	queued  int        // jobs admitted (or being) and not yet claimed: the window's (QueueLimits.Window)
	served  uint64     // admissions so far: every AgedEvery-th goes to the oldest (a queue with priorities)
	byAge   []entry    // pending jobs in the order they became pending (a queue with priorities)
	turns   uint64     // lanes served so far: a lane's turn is the count when it was last served
	fresh   []*slotJob // became pending, oldest first, not yet looked at by Holds
}

// SlotUser is whom a job's slots count against: its user within its
// namespace ("acme/ada"), since two namespaces' users of one name (their
// tokens' names) are two users. The admission's counts are by SlotUser.
func SlotUser(namespace, user string) string { return namespace + "/" + user }

// slotKey is a concurrency or rate key within its namespace ("acme/c42"):
// the keys of two namespaces never share a limit. "" for no key.
func slotKey(namespace, key string) string {
	if key == "" {
		return ""
	}
	return namespace + "/" + key
}

// Slot is what Admission needs to know of a job: the state the log gives
// it, whom and what key it counts against and when it was created (its
// age among the pending).
type Slot struct {
	ID       string
	User     string // SlotUser
	Key      string // slotKey of its concurrency key; "" none
	RateKey  string // slotKey of its rate key in a queue with a rate limit per key
	Priority int
	State    domain.State
	Created  time.Time
	Hold     *domain.Hold // why it waits, as its record says (job.pending)
	Seq      uint64       // the event that gave it this state: an older one is ignored (0: take it)
}

// SlotOf is the slot of a job of spec in a queue with limits l: its user,
// keys and priority (the caller adds its state, age and sequence).
func SlotOf(id string, spec *domain.Spec, l domain.QueueLimits) Slot {
	return Slot{ID: id, User: SlotUser(spec.Namespace, spec.User), Key: slotKey(spec.Namespace, spec.ConcurrencyKey),
		RateKey: rateKey(l, spec), Priority: spec.Priority}
}

type slotJob struct {
	Slot
	admitting bool        // an admission is being written
	rate      *rateWindow // the rate window its admission being written counts in
	since     time.Time   // when admission saw it become pending
	gen       uint32      // stays in pending so far: an entry of an earlier stay is stale
	lane      *lane
}

// entry is a pending job in a list, as of one stay in pending.
type entry struct {
	j   *slotJob
	gen uint32
}

func (e entry) valid() bool { return e.j.gen == e.gen && waiting(e.j) }

// holder is what a user or a key holds, and its pending jobs.
type holder struct {
	holding  int
	npending int
	pending  []entry // keys only, with max_running_per_key: in order, for one at a time in submit order
	parked   []*lane // lanes whose head this holder's limit held: active again when it frees a slot or admits
}

// SetLimits gives the queue new limits of the same rate shape (a new
// rate limit, period or key makes a new Admission): every parked lane is
// looked at again, since a raised limit frees slots without a job ending.
func (a *Admission) SetLimits(l domain.QueueLimits) {
	a.Limits = l
	for _, h := range a.users {
		a.unpark(h)
	}
	for _, h := range a.keys {
		a.unpark(h)
	}
}

// park takes l out of the lanes Next looks at until h frees a slot or
// admits a job (unpark). A lane parked already stays where it is.
func (a *Admission) park(l *lane, h *holder) {
	delete(a.active, l)
	if l.parked {
		return
	}
	l.parked = true
	h.parked = append(h.parked, l)
}

// unpark gives Next the lanes h's limit held.
func (a *Admission) unpark(h *holder) {
	if h == nil || len(h.parked) == 0 {
		return
	}
	for _, l := range h.parked {
		l.parked = false
		if a.lanes[l.id] == l && l.npending > 0 {
			a.active[l] = struct{}{}
		}
	}
	clear(h.parked)
	h.parked = h.parked[:0]
}

// lane is the pending jobs of one user with one concurrency key and one
// rate key: the limits that hold its head hold all of it.
type lane struct {
	id       string
	user     string
	key      string
	pending  []entry // in order (before)
	npending int
	turn     uint64
	parked   bool // in a holder's parked list
}

// rateWindow is the admissions of one rate key (or of the queue) in the
// last rate period: those the log told, and those being written.
type rateWindow struct {
	times     []time.Time // oldest first
	admitting int
}

// holdAfter is how long a job waits in pending before admission records
// why (job.pending): a job admitted sooner gets none, so a burst that the
// slots absorb within a second costs no write per job.
const holdAfter = time.Second

// NewAdmission returns an empty admission for queue with limits l.
func NewAdmission(queue string, l domain.QueueLimits) *Admission {
	return &Admission{Queue: queue, Limits: l, jobs: map[string]*slotJob{}, users: map[string]*holder{},
		keys: map[string]*holder{}, lanes: map[string]*lane{}, active: map[*lane]struct{}{}, rates: map[string]*rateWindow{}}
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

// inWindow reports whether j counts in the queue's window: admitted (or
// being) and not claimed yet.
func inWindow(j *slotJob) bool { return j.admitting || j.State == domain.StateQueued }

// AgedEvery: in a queue with priorities, every AgedEvery-th admission goes
// to the job pending longest that its own limits do not hold, whatever
// its priority: no job starves.
const AgedEvery = 10

// agedScan bounds how many of the oldest pending jobs an aged admission
// looks at for one its own limits do not hold.
const agedScan = 64

// waiting reports whether j is a pending job to admit (not held by
// something other than its limits: a workflow's step waiting for its
// dependencies).
func waiting(j *slotJob) bool {
	return j.State == domain.StatePending && !j.admitting && !j.Hold.Blocks()
}

// before orders pending jobs: higher priority first, then the oldest.
func before(x, y *slotJob) bool {
	if x.Priority != y.Priority {
		return x.Priority > y.Priority
	}
	if !x.Created.Equal(y.Created) {
		return x.Created.Before(y.Created)
	}
	return x.ID < y.ID
}

func (a *Admission) user(name string) *holder {
	u := a.users[name]
	if u == nil {
		u = &holder{}
		a.users[name] = u
	}
	return u
}

func (a *Admission) key(name string) *holder {
	if name == "" {
		return nil
	}
	k := a.keys[name]
	if k == nil {
		k = &holder{}
		a.keys[name] = k
	}
	return k
}

// forget drops holders and lanes that hold and wait for nothing.
func (a *Admission) forget(j *slotJob) {
	if u := a.users[j.User]; u != nil && u.holding == 0 && u.npending == 0 {
		delete(a.users, j.User)
	}
	if k := a.keys[j.Key]; k != nil && k.holding == 0 && k.npending == 0 {
		delete(a.keys, j.Key)
	}
	if l := j.lane; l != nil && l.npending == 0 && a.lanes[l.id] == l {
		delete(a.lanes, l.id)
		delete(a.active, l)
	}
}

// hold adds d to the slots j holds: of the queue, its user, its key.
func (a *Admission) hold(j *slotJob, d int) {
	a.holding += d
	u := a.user(j.User)
	u.holding += d
	k := a.key(j.Key)
	if k != nil {
		k.holding += d
	}
	if d < 0 {
		a.unpark(u)
		a.unpark(k)
	}
}

// Observe records the state the log gives a job of the queue.
func (a *Admission) Observe(s Slot) {
	j := a.jobs[s.ID]
	if j == nil {
		if s.State.Terminal() || s.State == domain.StateNew {
			return
		}
		j = &slotJob{Slot: Slot{ID: s.ID, User: s.User, Key: s.Key, RateKey: s.RateKey, Priority: s.Priority, Created: s.Created}}
		a.jobs[s.ID] = j
	}
	if s.Seq != 0 && s.Seq <= j.Seq {
		return // the log told more already
	}
	if s.Seq != 0 {
		j.Seq = s.Seq
	}
	held, wasWaiting, wasQueued := holdsSlot(j), waiting(j), inWindow(j)
	// Whatever was being written, the log now says where the job is (an
	// admission that landed is counted by CountAdmission).
	j.admitting = false
	a.unrate(j)
	j.State = s.State
	if s.State != domain.StatePending {
		j.Hold = nil
	} else if s.Hold != nil {
		j.Hold = s.Hold
	}
	if s.State.Terminal() {
		delete(a.jobs, s.ID)
	}
	if now := inWindow(j) && !s.State.Terminal(); now != wasQueued {
		if now {
			a.queued++
		} else {
			a.queued--
		}
	}
	if now := holdsSlot(j) && !s.State.Terminal(); now != held {
		if now {
			a.hold(j, 1)
		} else {
			a.hold(j, -1)
		}
	}
	switch nowWaiting := waiting(j); {
	case nowWaiting && !wasWaiting:
		a.enqueue(j)
		j.since = time.Now()
		a.fresh = append(a.fresh, j)
	case !nowWaiting && wasWaiting:
		a.dequeued(j)
	}
	a.forget(j)
}

// unrate gives back the place in its rate window that j's admission being
// written held.
func (a *Admission) unrate(j *slotJob) {
	if j.rate != nil {
		j.rate.admitting--
		j.rate = nil
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

// SetHold records why a pending job waits, as its record now says.
//
// A job whose hold kept it out of admission (a workflow's step waiting
// for its dependencies: Hold.Blocks) and no longer does takes its place
// among the pending.
func (a *Admission) SetHold(id string, h *domain.Hold) {
	j := a.jobs[id]
	if j == nil || j.State != domain.StatePending {
		return
	}
	was := waiting(j)
	j.Hold = h
	switch now := waiting(j); {
	case now && !was:
		a.enqueue(j)
		j.since = time.Now()
		a.fresh = append(a.fresh, j)
	case was && !now:
		a.dequeued(j)
	}
}

// SetPriority gives a job of the queue another priority
// (job.reprioritized): a pending one takes its new place in its lane and
// its key's list, keeping its age (its place among the oldest for an aged
// admission, its since); another takes it when it is pending again.
func (a *Admission) SetPriority(id string, priority int) {
	j := a.jobs[id]
	if j == nil || j.Priority == priority {
		return
	}
	// Its entries go, stale ones too: the lists are in order by priority,
	// an entry whose job's priority changed would break it.
	var lists []*[]entry
	if j.lane != nil {
		lists = append(lists, &j.lane.pending)
	}
	if k := a.keys[j.Key]; k != nil {
		lists = append(lists, &k.pending)
	}
	for _, list := range lists {
		*list = slices.DeleteFunc(*list, func(e entry) bool { return e.j == j })
	}
	j.Priority = priority
	// Its key's order changed: a lane parked behind it may lead now.
	a.unpark(a.keys[j.Key])
	if waiting(j) {
		e := entry{j: j, gen: j.gen}
		for _, list := range lists {
			*list = insert(*list, e)
		}
	}
}

// insert puts e in list, in order.
func insert(list []entry, e entry) []entry {
	n := len(list)
	if n == 0 || !before(e.j, list[n-1].j) {
		return append(list, e)
	}
	i := sort.Search(n, func(i int) bool { return before(e.j, list[i].j) })
	list = append(list, entry{})
	copy(list[i+1:], list[i:])
	list[i] = e
	return list
}

// head drops the stale entries at the front of list and returns its first
// pending job (nil: none).
func head(list *[]entry) *slotJob {
	for len(*list) > 0 {
		if e := (*list)[0]; e.valid() {
			return e.j
		}
		(*list)[0] = entry{}
		*list = (*list)[1:]
	}
	return nil
}

// enqueue puts j, which just became pending, in its lane (and its key's
// list), in order.
func (a *Admission) enqueue(j *slotJob) {
	j.gen++
	id := j.User + "\x00" + j.Key + "\x00" + j.RateKey
	l := j.lane
	if l == nil || a.lanes[id] != l {
		l = a.lanes[id]
		if l == nil {
			// A new lane's turn is now: it waits for the lanes not served
			// since, as if it had just been served.
			l = &lane{id: id, user: j.User, key: j.Key, turn: a.turns}
			a.lanes[id] = l
		}
		j.lane = l
	}
	a.active[l] = struct{}{}
	e := entry{j: j, gen: j.gen}
	if a.Limits.Priorities {
		head(&a.byAge)
		a.byAge = append(a.byAge, e)
	}
	head(&l.pending) // drop what went stale at the front
	l.pending = insert(l.pending, e)
	l.npending++
	a.user(j.User).npending++
	if k := a.key(j.Key); k != nil {
		k.npending++
		head(&k.pending)
		k.pending = insert(k.pending, e)
	}
}

// dequeued counts j, which stopped waiting (admitted, or moved on), out
// of its lane; its entries go stale.
func (a *Admission) dequeued(j *slotJob) {
	j.lane.npending--
	a.user(j.User).npending--
	if k := a.key(j.Key); k != nil {
		k.npending--
		// Its key's next job in submit order may lead now, in a lane
		// parked behind this one: a key with nothing running has no slot
		// to free that would bring it back.
		a.unpark(k)
	}
}

func (a *Admission) window(key string) *rateWindow {
	w := a.rates[key]
	if w == nil {
		w = &rateWindow{}
		a.rates[key] = w
	}
	return w
}

// rateKeyOf is the rate window j counts in ("" the queue's); false if the
// queue has no rate limit.
func (a *Admission) rateKeyOf(j *slotJob) (string, bool) {
	if a.Limits.RateLimit <= 0 {
		return "", false
	}
	if a.Limits.RateKey == "" {
		return "", true
	}
	return j.RateKey, true
}

// prune drops the admissions that left the period as of now.
func (w *rateWindow) prune(now time.Time, period time.Duration) {
	from := now.Add(-period)
	i := 0
	for i < len(w.times) && !w.times[i].After(from) {
		i++
	}
	if i > 0 {
		w.times = append(w.times[:0], w.times[i:]...)
	}
}

func (w *rateWindow) count() int { return len(w.times) + w.admitting }

// rateLeft is how many more admissions rate window key allows now, and
// when it allows one more if none (zero: not known, an admission being
// written holds it); -1 with no rate limit.
func (a *Admission) rateLeft(key string, now time.Time) (int, time.Time) {
	if a.Limits.RateLimit <= 0 {
		return -1, time.Time{}
	}
	w := a.rates[key]
	if w == nil {
		return a.Limits.RateLimit, time.Time{}
	}
	w.prune(now, a.Limits.RatePeriod)
	left := a.Limits.RateLimit - w.count()
	if left > 0 {
		return left, time.Time{}
	}
	// The window frees a place when enough of its oldest leave it.
	if i := -left; i < len(w.times) {
		return 0, w.times[i].Add(a.Limits.RatePeriod)
	}
	return 0, time.Time{}
}

// CountAdmission counts an admission the log told (job.admitted, at its
// time, under rateKey: the event's, "" in a queue whose rate limit is the
// queue's) in its rate window. An admitter counts each admission once:
// those of the last period when it starts, then each new one.
func (a *Admission) CountAdmission(rateKey string, at time.Time, now time.Time) {
	if a.Limits.RateLimit <= 0 || a.Limits.RatePeriod <= 0 || !at.After(now.Add(-a.Limits.RatePeriod)) {
		return
	}
	if a.Limits.RateKey == "" {
		rateKey = ""
	}
	w := a.window(rateKey)
	n := len(w.times)
	if n == 0 || !at.Before(w.times[n-1]) {
		w.times = append(w.times, at)
		return
	}
	i := sort.Search(n, func(i int) bool { return at.Before(w.times[i]) })
	w.times = append(w.times, time.Time{})
	copy(w.times[i+1:], w.times[i:])
	w.times[i] = at
}

// blocked reports whether a limit of its own (its user's, its key's, its
// rate key's) holds pending job j now, with the hold to tell.
func (a *Admission) blocked(j *slotJob, now time.Time) (domain.Hold, bool) {
	l := a.Limits
	if l.MaxRunningPerUser > 0 && a.user(j.User).holding >= l.MaxRunningPerUser {
		return domain.Hold{Limit: domain.LimitUser, Max: l.MaxRunningPerUser}, true
	}
	if k := a.keys[j.Key]; l.MaxRunningPerKey > 0 && k != nil {
		// Its key's earlier jobs go first, whoever they run for.
		if k.holding >= l.MaxRunningPerKey || head(&k.pending) != j {
			return domain.Hold{Limit: domain.LimitKey, Max: l.MaxRunningPerKey, Key: keyName(j.Key)}, true
		}
	}
	if l.RateLimit > 0 && l.RateKey != "" {
		if left, until := a.rateLeft(j.RateKey, now); left == 0 {
			return domain.Hold{Limit: domain.LimitRate, Max: l.RateLimit, Key: keyName(j.RateKey), Until: until}, true
		}
	}
	return domain.Hold{}, false
}

// keyName is a scoped key without its namespace.
func keyName(scoped string) string {
	for i := 0; i < len(scoped); i++ {
		if scoped[i] == '/' {
			return scoped[i+1:]
		}
	}
	return scoped
}

// queueFree is how many jobs the queue's own limits let admission take
// now (-1: no bound), and the hold that stops it when none.
func (a *Admission) queueFree(now time.Time) (int, domain.Hold) {
	free := -1 // no queue limit
	if a.Limits.MaxRunning > 0 {
		// A limit lowered under what runs leaves no slot (not a negative
		// count, which would read as no limit).
		free = max(0, a.Limits.MaxRunning-a.holding)
		if free == 0 {
			return 0, domain.Hold{Limit: domain.LimitQueue, Max: a.Limits.MaxRunning}
		}
	}
	if w := a.Limits.Window(); w > 0 {
		left := max(0, w-a.queued)
		if left == 0 {
			return 0, domain.Hold{Limit: domain.LimitQueued, Max: w}
		}
		if free < 0 || left < free {
			free = left
		}
	}
	if a.Limits.RateLimit > 0 && a.Limits.RateKey == "" {
		left, until := a.rateLeft("", now)
		if left == 0 {
			return 0, domain.Hold{Limit: domain.LimitRate, Max: a.Limits.RateLimit, Until: until}
		}
		if free < 0 || left < free {
			free = left
		}
	}
	return free, domain.Hold{}
}

// laneHeap orders the lanes whose heads may be admitted: the head of
// higher priority first, then the lane served longest ago, then the
// oldest head.
type laneHeap struct {
	ls    []*lane
	heads []*slotJob
}

func (h *laneHeap) Len() int { return len(h.ls) }
func (h *laneHeap) Less(i, k int) bool {
	x, y := h.heads[i], h.heads[k]
	if x.Priority != y.Priority {
		return x.Priority > y.Priority
	}
	if h.ls[i].turn != h.ls[k].turn {
		return h.ls[i].turn < h.ls[k].turn
	}
	return before(x, y)
}
func (h *laneHeap) Swap(i, k int) {
	h.ls[i], h.ls[k] = h.ls[k], h.ls[i]
	h.heads[i], h.heads[k] = h.heads[k], h.heads[i]
}
func (h *laneHeap) Push(x any) {
	p := x.(laneHead)
	h.ls, h.heads = append(h.ls, p.l), append(h.heads, p.j)
}
func (h *laneHeap) Pop() any {
	n := len(h.ls) - 1
	p := laneHead{h.ls[n], h.heads[n]}
	h.ls, h.heads = h.ls[:n], h.heads[:n]
	return p
}

type laneHead struct {
	l *lane
	j *slotJob
}

// Next picks the pending jobs that take the queue's free slots now, marks
// them admitting (they hold their slots, and their places in their rate
// windows, from here) and returns their ids, in the order admitted. The
// caller writes each admission and reports it with Settled.
func (a *Admission) Next(now time.Time) []string {
	free, _ := a.queueFree(now)
	if free == 0 {
		return nil
	}
	h := &laneHeap{}
	for l := range a.active {
		j := head(&l.pending)
		if l.npending == 0 || j == nil || a.lanes[l.id] != l {
			delete(a.active, l)
			continue
		}
		if !a.parkIfHeld(l, j, now) {
			h.ls, h.heads = append(h.ls, l), append(h.heads, j)
		}
	}
	heap.Init(h)
	var out []string
	admit := func(j *slotJob) {
		j.admitting = true
		a.dequeued(j)
		a.hold(j, 1)
		a.queued++
		if key, ok := a.rateKeyOf(j); ok {
			j.rate = a.window(key)
			j.rate.admitting++
		}
		a.turns++
		j.lane.turn = a.turns
		a.served++
		if free > 0 {
			free--
		}
		out = append(out, j.ID)
	}
	for free != 0 {
		if a.Limits.Priorities && a.served%AgedEvery == AgedEvery-1 {
			if j := a.oldest(now); j != nil {
				admit(j)
				continue
			}
		}
		if h.Len() == 0 {
			break
		}
		p := heap.Pop(h).(laneHead)
		j := p.j
		if !waiting(j) || j.lane != p.l {
			// Admitted out of turn (oldest): the lane's next head
			// takes its place.
			if next := head(&p.l.pending); next != nil && a.lanes[p.l.id] == p.l {
				if _, no := a.blocked(next, now); !no {
					heap.Push(h, laneHead{p.l, next})
				}
			}
			continue
		}
		if a.parkIfHeld(p.l, j, now) {
			continue // held by what this pass admitted: nothing frees within a pass
		}
		admit(j)
		if next := head(&p.l.pending); next != nil {
			if _, no := a.blocked(next, now); !no {
				heap.Push(h, laneHead{p.l, next})
			}
		}
	}
	return out
}

// parkIfHeld reports whether a limit of its own holds j, the head of
// lane l, now; a user's or key's parks the lane on its holder.
func (a *Admission) parkIfHeld(l *lane, j *slotJob, now time.Time) bool {
	hold, no := a.blocked(j, now)
	switch {
	case !no:
		return false
	case hold.Limit == domain.LimitUser:
		a.park(l, a.user(j.User))
	case hold.Limit == domain.LimitKey:
		a.park(l, a.keys[j.Key])
	}
	return true
}

// oldest is the job pending longest (of the first agedScan) that its own
// limits do not hold now; nil if none.
func (a *Admission) oldest(now time.Time) *slotJob {
	head(&a.byAge)
	for i, e := range a.byAge {
		if i == agedScan {
			break
		}
		if !e.valid() {
			continue
		}
		if _, no := a.blocked(e.j, now); !no {
			return e.j
		}
	}
	return nil
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
	a.unrate(j)
	if j.State != domain.StateQueued && j.State != domain.StateClaimed && j.State != domain.StateRunning {
		a.hold(j, -1)
	}
	if j.State != domain.StateQueued {
		a.queued--
	}
	if j.State == domain.StatePending {
		a.enqueue(j)
	}
}

// Hold is a pending job to record why it waits (job.pending).
type Hold struct {
	ID   string
	Hold domain.Hold
}

// Holds returns the jobs that have been pending for holdAfter (as of
// now) and whose records do not say why yet, with the limit that holds
// them, at most max of them (max < 0: no bound); the rest wait for a
// later call, and those admitted meanwhile need none. Each job is looked
// at once per stay in pending.
func (a *Admission) Holds(now time.Time, max int) []Hold {
	var out []Hold
	n := 0
	for _, j := range a.fresh {
		if j.since.After(now.Add(-holdAfter)) || max >= 0 && len(out) == max {
			break // the rest came later, or wait for another call
		}
		n++
		if !waiting(j) || a.jobs[j.ID] != j {
			continue
		}
		h, ok := a.reason(j, now)
		if !ok || j.Hold != nil && j.Hold.Limit == h.Limit && j.Hold.Max == h.Max && j.Hold.Key == h.Key {
			continue
		}
		j.Hold = &h
		out = append(out, Hold{ID: j.ID, Hold: h})
	}
	a.fresh = a.fresh[n:]
	return out
}

// reason is the limit that holds pending job j now: its own (its user's,
// its key's, its rate key's) first, since those are what it waits for
// whatever the queue; else the queue's. False if nothing holds it (its
// turn comes at the next Next).
func (a *Admission) reason(j *slotJob, now time.Time) (domain.Hold, bool) {
	h, ok := a.blocked(j, now)
	if !ok {
		var free int
		free, h = a.queueFree(now)
		ok = free == 0
	}
	h.Since = now
	return h, ok
}

// Reason is the limit that holds pending job id now, since when it has
// been pending; false if id is not pending here or nothing holds it.
func (a *Admission) Reason(id string, now time.Time) (domain.Hold, bool) {
	j := a.jobs[id]
	if j == nil || !waiting(j) {
		return domain.Hold{}, false
	}
	h, ok := a.reason(j, now)
	h.Since = j.since
	return h, ok
}

// Position is how many pending jobs of the queue admission takes before
// pending job id, if slots free one at a time (lanes in turn, each in its
// order), and false if id is not pending here. It leaves out the limits
// of users, keys and rates.
func (a *Admission) Position(id string) (int, bool) {
	j := a.jobs[id]
	if j == nil || !waiting(j) || j.lane == nil {
		return 0, false
	}
	mine := j.lane
	k := 0 // jobs of its own lane ahead
	for _, e := range mine.pending {
		if e.j == j {
			break
		}
		if e.valid() {
			k++
		}
	}
	mineHead := head(&mine.pending)
	ahead := k
	for _, l := range a.lanes {
		if l == mine || l.npending == 0 {
			continue
		}
		// Its jobs of a higher priority all come first; of the same, one
		// a round, this lane's first in a round if its turn comes first.
		turns := k
		if lh := head(&l.pending); lh != nil && mineHead != nil &&
			(l.turn < mine.turn || l.turn == mine.turn && before(lh, mineHead)) {
			turns++
		}
		same := 0
		for _, e := range l.pending {
			if !e.valid() {
				continue
			}
			if e.j.Priority > j.Priority {
				ahead++
				continue
			}
			if e.j.Priority < j.Priority || same == turns {
				break
			}
			same++
		}
		ahead += same
	}
	return ahead, true
}

// Counts are a queue's slots as admission sees them.
type Counts struct {
	Holding int              `json:"running"`         // jobs holding a slot (queued after admission, claimed or running)
	Pending int              `json:"pending"`         // jobs waiting for one
	Users   map[string]Count `json:"users,omitempty"` // by SlotUser ("ns/user"; "ns/": no one in particular)
	Keys    map[string]Count `json:"keys,omitempty"`  // by concurrency key ("ns/key"), the jobs with one
}

// Count is one user's (or key's) share of a queue's slots.
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
	for name, k := range a.keys {
		if k.holding == 0 && k.npending == 0 {
			continue
		}
		if c.Keys == nil {
			c.Keys = map[string]Count{}
		}
		c.Keys[name] = Count{Holding: k.holding, Pending: k.npending}
	}
	return c
}

// Admitted is how many admissions rate window key (slotKey; "" the
// queue's) counts as of now: those of the last rate period and those being
// written.
func (a *Admission) admittedIn(key string, now time.Time) int {
	w := a.rates[key]
	if w == nil || a.Limits.RateLimit <= 0 {
		return 0
	}
	w.prune(now, a.Limits.RatePeriod)
	return w.count()
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
