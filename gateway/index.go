package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/lifecycle"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// summary is what the index keeps of a job: enough to filter, sort, count
// and draw a row of the dashboard, and what the live stream sends.
type summary struct {
	ID              string                    `json:"id"`
	Namespace       string                    `json:"namespace"`
	Type            string                    `json:"type"`
	Queue           string                    `json:"queue"`
	State           domain.State              `json:"state"`
	ParentID        string                    `json:"parent_id,omitempty"`
	RetryOf         string                    `json:"retry_of,omitempty"`
	Attempts        int                       `json:"attempts"`
	Worker          string                    `json:"worker,omitempty"`
	Progress        *projections.ProgressView `json:"progress,omitempty"`
	Error           *domain.JobError          `json:"error,omitempty"`
	Tags            []string                  `json:"tags,omitempty"`
	CreatedAt       time.Time                 `json:"created_at"`
	UpdatedAt       time.Time                 `json:"updated_at"`
	FinishedAt      *time.Time                `json:"finished_at,omitempty"`
	DurationSeconds *float64                  `json:"duration_seconds,omitempty"`
	Seq             uint64                    `json:"seq"`
	Rev             uint64                    `json:"-"`
	Deleted         bool                      `json:"deleted,omitempty"` // in the live stream: the record was purged
}

func summarize(j *domain.Job, rev uint64) *summary {
	v := projections.View(j)
	s := &summary{ID: v.ID, Namespace: v.Namespace, Type: v.Type, Queue: v.Queue, State: v.State,
		ParentID: v.ParentID, RetryOf: v.RetryOf, Attempts: v.Attempts, Worker: v.Worker, Progress: v.Progress,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, FinishedAt: v.FinishedAt, DurationSeconds: v.DurationSeconds,
		Seq: v.Seq, Rev: rev, Tags: j.Spec.Tags}
	if v.Error != nil {
		e := *v.Error
		e.Stack = ""
		if len(e.Message) > 500 {
			e.Message = e.Message[:500] + "…"
		}
		s.Error = &e
	}
	return s
}

// before reports whether a sorts before b: older first, id breaking ties
// (the index is kept in this order; lists walk it backwards, newest first).
func before(aT time.Time, aID string, bT time.Time, bID string) bool {
	if !aT.Equal(bT) {
		return aT.Before(bT)
	}
	return aID < bID
}

type pairKey struct{ ns, queue, jobType string }

// index keeps a summary of every job in memory, fed by one watch of the jobs
// bucket (every record at start, then every change), so that lists, counts
// and the dashboard's live stream never read the bucket per request. Each
// gateway keeps its own; it is derived state, rebuilt at every start.
type index struct {
	kv  jetstream.KeyValue
	log *slog.Logger

	mu     sync.RWMutex
	byID   map[string]*summary
	order  []*summary // oldest first
	counts map[pairKey]map[domain.State]int
	subs   map[*subscriber]struct{}
	loaded bool

	synced     chan struct{}
	syncedOnce sync.Once
	life       lifecycle.Loop

	// posMu guards pos, the bucket's stream sequence the index holds every
	// change up to, and moved, closed (and replaced) each time pos grows.
	posMu sync.Mutex
	pos   uint64
	moved chan struct{}
}

// newIndex returns an index of the jobs bucket kv.
func newIndex(kv jetstream.KeyValue, log *slog.Logger) *index {
	if log == nil {
		log = slog.Default()
	}
	return &index{kv: kv, log: log.With("component", "index"), byID: map[string]*summary{},
		counts: map[pairKey]map[domain.State]int{}, subs: map[*subscriber]struct{}{}, synced: make(chan struct{}),
		moved: make(chan struct{})}
}

// Start starts watching the bucket. Idempotent.
func (x *index) Start(context.Context) error {
	return x.life.Start(func() (func(context.Context), error) { return x.run, nil })
}

// Stop stops watching. Idempotent.
func (x *index) Stop(ctx context.Context) { x.life.Stop(ctx) }

// Synced is closed once the index holds every record the bucket had when
// it started.
func (x *index) Synced() <-chan struct{} { return x.synced }

// indexLoadWait is how long a request waits for the index's first load
// before it is told to come back (503).
const indexLoadWait = 10 * time.Second

// waitSynced waits a while for the first load, or returns an unavailable
// problem.
func (x *index) waitSynced(ctx context.Context) error {
	t := time.NewTimer(indexLoadWait)
	defer t.Stop()
	select {
	case <-x.synced:
		return nil
	case <-ctx.Done():
	case <-t.C:
	}
	return newProblem(problemUnavailable, http.StatusServiceUnavailable, "the job index is still loading; try again")
}

// indexCatchUpWait bounds how long catchUp waits for the watch.
const indexCatchUpWait = 5 * time.Second

// catchUp waits until the index holds every record written to the bucket
// before it was called, so that a selection acting on jobs (a bulk
// operation) sees each change a client was already shown by a read of the
// record. The watch usually trails by a few milliseconds; under load, by
// more. When the bucket's last message is gone (a delete marker removed by
// a purge of old markers), the index can never reach it: after
// indexCatchUpWait it goes on with what it holds.
func (x *index) catchUp(ctx context.Context) error {
	if err := x.waitSynced(ctx); err != nil {
		return err
	}
	st, err := x.kv.Status(ctx)
	if err != nil {
		return err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return nil
	}
	last := bs.StreamInfo().State.LastSeq
	t := time.NewTimer(indexCatchUpWait)
	defer t.Stop()
	for {
		x.posMu.Lock()
		pos, moved := x.pos, x.moved
		x.posMu.Unlock()
		if pos >= last {
			return nil
		}
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			x.log.Debug("the index did not reach the bucket's last sequence; going on", "at", pos, "last", last)
			return nil
		}
	}
}

// advance records that the index holds every change up to seq.
func (x *index) advance(seq uint64) {
	x.posMu.Lock()
	defer x.posMu.Unlock()
	if seq <= x.pos {
		return
	}
	x.pos = seq
	close(x.moved)
	x.moved = make(chan struct{})
}

func (x *index) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := x.watch(ctx); err != nil && ctx.Err() == nil {
			x.log.Warn("jobs watch ended; watching again", "err", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// watch loads every record, then follows changes until the watch ends.
func (x *index) watch(ctx context.Context) error {
	w, err := x.kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	fresh := map[string]*summary{}
	initial := true
	var loaded uint64 // the last sequence of the initial load
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok = <-w.Updates():
		}
		if !ok {
			return errors.New("watch closed")
		}
		if initial {
			if e == nil {
				x.replace(fresh)
				x.advance(loaded)
				initial = false
				x.syncedOnce.Do(func() { close(x.synced) })
				continue
			}
			loaded = max(loaded, e.Revision())
			if e.Operation() != jetstream.KeyValuePut {
				continue
			}
			if s := x.decode(e); s != nil {
				fresh[s.ID] = s
			}
			continue
		}
		if e == nil {
			continue
		}
		if e.Operation() != jetstream.KeyValuePut {
			x.remove(e.Key(), e.Revision())
		} else if s := x.decode(e); s != nil {
			x.put(s)
		}
		x.advance(e.Revision())
	}
}

func (x *index) decode(e jetstream.KeyValueEntry) *summary {
	j, err := streams.DecodeJob(e.Value())
	if err != nil {
		x.log.Warn("undecodable job record", "key", e.Key(), "err", err)
		return nil
	}
	return summarize(j, e.Revision())
}

// replace swaps in a full load (the first, or after a watch was lost).
func (x *index) replace(fresh map[string]*summary) {
	order := make([]*summary, 0, len(fresh))
	counts := map[pairKey]map[domain.State]int{}
	for _, s := range fresh {
		order = append(order, s)
		addCount(counts, s, 1)
	}
	sort.Slice(order, func(i, k int) bool {
		return before(order[i].CreatedAt, order[i].ID, order[k].CreatedAt, order[k].ID)
	})
	x.mu.Lock()
	had := x.loaded
	x.byID, x.order, x.counts, x.loaded = fresh, order, counts, true
	if had {
		for s := range x.subs {
			s.overflow() // a reload: the subscriber must start over (never blocks)
		}
	}
	x.mu.Unlock()
}

func addCount(counts map[pairKey]map[domain.State]int, s *summary, n int) {
	k := pairKey{s.Namespace, s.Queue, s.Type}
	m := counts[k]
	if m == nil {
		m = map[domain.State]int{}
		counts[k] = m
	}
	m[s.State] += n
	if m[s.State] == 0 {
		delete(m, s.State)
	}
}

// Put records a job's record at KV revision rev, unless the index already
// has a newer one. The gateway calls it with what it wrote itself, so that
// a client reads its own writes in lists at once.
func (x *index) Put(j *domain.Job, rev uint64) {
	if j == nil {
		return
	}
	x.put(summarize(j, rev))
}

func (x *index) put(s *summary) {
	x.mu.Lock()
	old := x.byID[s.ID]
	if old != nil && old.Rev >= s.Rev {
		x.mu.Unlock()
		return
	}
	x.byID[s.ID] = s
	if old != nil {
		addCount(x.counts, old, -1)
		x.order[x.position(old.CreatedAt, old.ID)] = s
	} else {
		i := x.position(s.CreatedAt, s.ID)
		x.order = append(x.order, nil)
		copy(x.order[i+1:], x.order[i:])
		x.order[i] = s
	}
	addCount(x.counts, s, 1)
	x.notifyLocked(s)
	x.mu.Unlock()
}

func (x *index) remove(id string, rev uint64) {
	x.mu.Lock()
	old := x.byID[id]
	if old == nil || old.Rev >= rev {
		x.mu.Unlock()
		return
	}
	delete(x.byID, id)
	i := x.position(old.CreatedAt, old.ID)
	x.order = append(x.order[:i], x.order[i+1:]...)
	addCount(x.counts, old, -1)
	gone := *old
	gone.Deleted = true
	x.notifyLocked(&gone)
	x.mu.Unlock()
}

// notifyLocked sends a change to every subscriber. It is called with mu
// held, so that subscribers get the changes in the order the index took
// them (a Put and the watch racing on one job could otherwise deliver the
// older record last), and a change the index holds has reached them.
// send never blocks.
func (x *index) notifyLocked(s *summary) {
	for sub := range x.subs {
		sub.send(s)
	}
}

// position is the index in order of the first entry not before (t, id).
func (x *index) position(t time.Time, id string) int {
	return sort.Search(len(x.order), func(i int) bool {
		return !before(x.order[i].CreatedAt, x.order[i].ID, t, id)
	})
}

// Get returns a job's summary, or nil.
func (x *index) Get(id string) *summary {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return x.byID[id]
}

// Len is the number of jobs in the index.
func (x *index) Len() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return len(x.byID)
}

// Counts returns the number of jobs in each state among those of queue
// and jobType (empty: any).
func (x *index) Counts(queue, jobType string) map[domain.State]int {
	return x.CountsIn("", queue, jobType)
}

// CountsIn counts the jobs of a namespace ("": every one) by state, for a
// queue and a type ("": every one).
func (x *index) CountsIn(ns, queue, jobType string) map[domain.State]int {
	out := make(map[domain.State]int, len(domain.States))
	for _, s := range domain.States {
		out[s] = 0
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	for k, m := range x.counts {
		if (ns == "" || k.ns == ns) && (queue == "" || k.queue == queue) && (jobType == "" || k.jobType == jobType) {
			for st, n := range m {
				out[st] += n
			}
		}
	}
	return out
}

// Namespaces are the namespaces the index has jobs in.
func (x *index) Namespaces() []string {
	seen := map[string]bool{}
	x.mu.RLock()
	for k, m := range x.counts {
		if len(m) > 0 {
			seen[k.ns] = true
		}
	}
	x.mu.RUnlock()
	out := make([]string, 0, len(seen))
	for ns := range seen {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

// Names returns the queues and job types the index has seen in a
// namespace ("": every one), sorted.
func (x *index) Names(ns string) (queues, types []string) {
	qs, ts := map[string]bool{}, map[string]bool{}
	x.mu.RLock()
	for k, m := range x.counts {
		if len(m) > 0 && (ns == "" || k.ns == ns) {
			qs[k.queue], ts[k.jobType] = true, true
		}
	}
	x.mu.RUnlock()
	for q := range qs {
		queues = append(queues, q)
	}
	for t := range ts {
		types = append(types, t)
	}
	sort.Strings(queues)
	sort.Strings(types)
	return queues, types
}

// Cursor is a position in the newest-first order of jobs: the last job of
// a page. Encoded, it is opaque to clients.
type Cursor struct {
	CreatedAt time.Time
	ID        string
}

// Encode returns the cursor's opaque form (engine.EncodeCursor: the NATS
// list command's cursors are the same).
func (c Cursor) Encode() string { return engine.EncodeCursor(c.CreatedAt, c.ID) }

// decodeCursor reads a cursor from Encode; anything else is a bad-cursor
// problem.
func decodeCursor(s string) (Cursor, error) {
	at, id, err := engine.DecodeCursor(s)
	if err != nil {
		return Cursor{}, err
	}
	return Cursor{CreatedAt: at, ID: id}, nil
}

// List returns up to limit summaries of jobs that match f, newest first,
// after the cursor (nil: from the newest), and the cursor of the next page
// (nil: no more).
func (x *index) List(f engine.Filter, after *Cursor, limit int) ([]*summary, *Cursor) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	i := len(x.order)
	if after != nil {
		i = x.position(after.CreatedAt, after.ID)
	}
	var out []*summary
	for i--; i >= 0; i-- {
		s := x.order[i]
		if !matches(&f, s) {
			continue
		}
		if len(out) == limit {
			last := out[len(out)-1]
			return out, &Cursor{CreatedAt: last.CreatedAt, ID: last.ID}
		}
		out = append(out, s)
	}
	return out, nil
}

func matches(f *engine.Filter, s *summary) bool {
	return (f.State == "" || s.State == f.State) && (f.Queue == "" || s.Queue == f.Queue) &&
		(f.Type == "" || s.Type == f.Type) && (f.Namespace == "" || s.Namespace == f.Namespace) &&
		(f.Parent == "" || s.ParentID == f.Parent) && searchSummary(f, s)
}

// subscriber receives every change of the index (the live stream). It
// never blocks the index: when its buffer is full it is told to start over.
type subscriber struct {
	ch       chan *summary
	mu       sync.Mutex
	overflew bool
	wake     chan struct{}
}

func (s *subscriber) send(sum *summary) {
	select {
	case s.ch <- sum:
	default:
		s.overflow()
	}
}

func (s *subscriber) overflow() {
	s.mu.Lock()
	s.overflew = true
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// takeOverflow reports (and clears) whether changes were dropped.
func (s *subscriber) takeOverflow() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	o := s.overflew
	s.overflew = false
	return o
}

func (x *index) subscribe() *subscriber {
	s := &subscriber{ch: make(chan *summary, 4096), wake: make(chan struct{}, 1)}
	x.mu.Lock()
	x.subs[s] = struct{}{}
	x.mu.Unlock()
	return s
}

func (x *index) unsubscribe(s *subscriber) {
	x.mu.Lock()
	delete(x.subs, s)
	x.mu.Unlock()
}
