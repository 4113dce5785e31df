package projections

import (
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// Statistics: the fold of the event log into what happened per interval
// (throughput, start latency) and what waited at its end (queue depth, the
// oldest waiting job), per namespace and queue. The engine's StatsKeeper
// folds the log with it into time slots kept in KV buckets; replay
// --verify folds the log again and compares.

// StatsDim is what a series counts: the jobs of a namespace and a queue,
// "" meaning every namespace or every queue.
type StatsDim struct {
	Namespace string
	Queue     string
}

// Dims are the four series an event of namespace ns and queue q counts in:
// its own, its namespace's, its queue's and everything's.
func statsDims(ns, q string) [4]StatsDim {
	return [4]StatsDim{{ns, q}, {ns, ""}, {"", q}, {"", ""}}
}

// StatsSlot is one series' interval: what happened in it, and what waited
// at its end (as of the last event of the interval).
type StatsSlot struct {
	Submitted int `msgpack:"sub,omitempty"`
	Started   int `msgpack:"sta,omitempty"` // job.started: an attempt began
	Succeeded int `msgpack:"suc,omitempty"`
	Failed    int `msgpack:"fai,omitempty"`
	Cancelled int `msgpack:"can,omitempty"`
	Retried   int `msgpack:"ret,omitempty"` // job.retry_scheduled
	// Start latency: from entering queued to leaving it for a worker
	// (claimed or running), of the jobs that left in the interval.
	LatencyN   int     `msgpack:"ln,omitempty"`
	LatencySum float64 `msgpack:"ls,omitempty"` // seconds
	LatencyMax float64 `msgpack:"lm,omitempty"` // seconds
	// Depth is how many jobs were queued at the end; OldestSince since
	// when the oldest of them waited (unix nanoseconds, 0: none).
	Depth       int   `msgpack:"d"`
	OldestSince int64 `msgpack:"o,omitempty"`
	// UpTo is the last event (stream sequence) counted in the slot: an
	// event at or before it was counted already.
	UpTo uint64 `msgpack:"u,omitempty"`
}

// statsEffect is what one event does to the slots it falls in.
type statsEffect struct {
	Time                                                    time.Time
	Submitted, Started, Succeeded, Failed, Cancelled, Retry bool
	Latency                                                 float64 // seconds; with HasLatency
	HasLatency                                              bool
}

// Add counts an effect in a slot.
func (s *StatsSlot) Add(e statsEffect) {
	s.Submitted += b2i(e.Submitted)
	s.Started += b2i(e.Started)
	s.Succeeded += b2i(e.Succeeded)
	s.Failed += b2i(e.Failed)
	s.Cancelled += b2i(e.Cancelled)
	s.Retried += b2i(e.Retry)
	if e.HasLatency {
		s.LatencyN++
		s.LatencySum += e.Latency
		s.LatencyMax = max(s.LatencyMax, e.Latency)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Defaults of StatsFold's bounds.
const (
	DefaultStatsMaxDims    = 4000      // series kept (namespace and queue pairs, and their sums)
	DefaultStatsMaxWaiting = 1_000_000 // queued jobs whose wait is followed
)

// StatsFold folds job events into statistics. It keeps the jobs that are
// queued (since when, for the oldest wait and the start latency) and the
// depth of every series. It is bounded: past MaxDims series an event is
// counted in the series it already has only (everything's always), past
// MaxWaiting queued jobs a newly queued one counts in the depth but its
// wait is not followed.
//
// It runs once per event of the log, so its per-event path looks up an
// event's (namespace, queue) once and works on the series from there.
type StatsFold struct {
	MaxDims, MaxWaiting int

	series  map[StatsDim]*StatsFoldSeries
	pairs   map[StatsDim]*[4]*StatsFoldSeries // by (namespace, queue): the series its events count in
	waiting map[string]int64                  // queued job -> since when (unix nanoseconds)
}

// StatsFoldSeries is one series the fold keeps: its depth, and its queued jobs
// by since when they wait.
type StatsFoldSeries struct {
	Dim   StatsDim
	depth int
	heap  sinceHeap
	fold  *StatsFold
}

// NewStatsFold returns an empty fold.
func NewStatsFold() *StatsFold {
	return &StatsFold{MaxDims: DefaultStatsMaxDims, MaxWaiting: DefaultStatsMaxWaiting,
		series: map[StatsDim]*StatsFoldSeries{}, pairs: map[StatsDim]*[4]*StatsFoldSeries{}, waiting: map[string]int64{}}
}

// SetDepth seeds the depth of a series (a fold resumed from a checkpoint).
func (f *StatsFold) SetDepth(d StatsDim, n int) {
	if n > 0 {
		f.add(d).depth = n
	}
}

// Depths are the depths of every series with jobs queued.
func (f *StatsFold) Depths() map[StatsDim]int {
	out := map[StatsDim]int{}
	for d, s := range f.series {
		if s.depth > 0 {
			out[d] = s.depth
		}
	}
	return out
}

// tracked reports whether the fold keeps series d.
func (f *StatsFold) tracked(d StatsDim) bool {
	_, ok := f.series[d]
	return ok || (d == StatsDim{})
}

func (f *StatsFold) add(d StatsDim) *StatsFoldSeries {
	s := f.series[d]
	if s == nil {
		s = &StatsFoldSeries{Dim: d, fold: f}
		f.series[d] = s
	}
	return s
}

// seriesOf are the series the events of namespace ns and queue q count in
// (nil where the bound keeps a series out). Past the bound no series is
// added, so what a pair counts in does not change once looked up.
func (f *StatsFold) seriesOf(ns, q string) *[4]*StatsFoldSeries {
	if p := f.pairs[StatsDim{ns, q}]; p != nil {
		return p
	}
	var p [4]*StatsFoldSeries
	for k, d := range statsDims(ns, q) {
		if f.tracked(d) || len(f.series) < f.MaxDims {
			p[k] = f.add(d)
		}
	}
	if p[0] != nil { // a pair past the bound is looked up each time
		f.pairs[StatsDim{ns, q}] = &p
	}
	return &p
}

// SeedWaiting adds a job that is queued since since (a fold resumed from
// the jobs' records rather than from the start of the log).
func (f *StatsFold) SeedWaiting(id, ns, q string, since time.Time) {
	f.enter(f.seriesOf(ns, q), id, since.UnixNano(), false)
}

func (f *StatsFold) enter(ss *[4]*StatsFoldSeries, id string, since int64, count bool) {
	if count {
		for _, s := range ss {
			if s != nil {
				s.depth++
			}
		}
	}
	if _, ok := f.waiting[id]; !ok && len(f.waiting) >= f.MaxWaiting {
		return
	}
	f.waiting[id] = since
	for _, s := range ss {
		if s != nil {
			s.heap.push(sinceEntry{since: since, id: id})
		}
	}
}

// leave takes a job out of queued; it returns since when it was queued (0:
// not followed).
func (f *StatsFold) leave(ss *[4]*StatsFoldSeries, id string) int64 {
	for _, s := range ss {
		if s != nil && s.depth > 0 {
			s.depth--
		}
	}
	since, ok := f.waiting[id]
	if !ok {
		return 0
	}
	delete(f.waiting, id)
	return since
}

// oldestOf is since when the oldest queued job of series d waits (unix
// nanoseconds; 0: none, or none followed).
func (f *StatsFold) oldestOf(d StatsDim) int64 {
	if s := f.series[d]; s != nil {
		return s.oldest()
	}
	return 0
}

func (s *StatsFoldSeries) oldest() int64 {
	for len(s.heap) > 0 {
		top := s.heap[0]
		if since, ok := s.fold.waiting[top.id]; ok && since == top.since {
			return top.since
		}
		s.heap.pop() // left, or queued again since: stale
	}
	return 0
}

// Gauges are series d's depth and oldest wait now.
func (f *StatsFold) Gauges(d StatsDim) (depth int, oldestSince int64) {
	if s := f.series[d]; s != nil {
		return s.Gauges()
	}
	return 0, 0
}

// Gauges are the series' depth and oldest wait now.
func (s *StatsFoldSeries) Gauges() (depth int, oldestSince int64) {
	if s.depth == 0 {
		return 0, 0
	}
	return s.depth, s.oldest()
}

// Fold takes the event of a job of namespace ns and queue q (from its
// subject), in log order, and returns what it does to the slots it falls
// in, and the series it counts in (those the fold keeps; nil for the
// others).
func (f *StatsFold) Fold(ev *domain.Event, ns, q string) (statsEffect, *[4]*StatsFoldSeries) {
	e := statsEffect{Time: ev.Time}
	t := ev.Time.UnixNano()
	ss := f.seriesOf(ns, q)
	switch {
	case ev.From == domain.StateQueued && ev.To != domain.StateNew && ev.To != domain.StateQueued:
		since := f.leave(ss, ev.JobID)
		if since != 0 && (ev.To == domain.StateClaimed || ev.To == domain.StateRunning) {
			e.Latency, e.HasLatency = max(0, float64(t-since)/1e9), true
		}
	case ev.From != domain.StateQueued && ev.To != domain.StateQueued:
		// Seeded as waiting from a record behind the log (an in-process
		// claim writes its record late): it left the queue before the
		// fold's start, and its later moves say so.
		delete(f.waiting, ev.JobID)
	}
	if ev.To == domain.StateQueued && ev.From != domain.StateQueued {
		f.enter(ss, ev.JobID, t, true)
	}
	switch ev.Type {
	case domain.EvSubmitted:
		e.Submitted = true
	case domain.EvStarted:
		e.Started = true
	case domain.EvRetryScheduled:
		e.Retry = true
	}
	switch ev.To {
	case domain.StateSucceeded:
		e.Succeeded = true
	case domain.StateFailed:
		e.Failed = true
	case domain.StateCancelled:
		e.Cancelled = true
	}
	return e, ss
}

// sinceHeap orders queued jobs by since when they wait (lazy deletion: an
// entry whose job left, or was queued again, is dropped when it surfaces).
type sinceEntry struct {
	since int64
	id    string
}

// sinceHeap is a binary min-heap by since.
type sinceHeap []sinceEntry

func (h *sinceHeap) push(e sinceEntry) {
	*h = append(*h, e)
	a := *h
	for k := len(a) - 1; k > 0; {
		p := (k - 1) / 2
		if a[p].since <= a[k].since {
			break
		}
		a[p], a[k] = a[k], a[p]
		k = p
	}
}

func (h *sinceHeap) pop() {
	a := *h
	last := len(a) - 1
	a[0] = a[last]
	a[last] = sinceEntry{}
	a = a[:last]
	for k := 0; ; {
		l, m := 2*k+1, k
		if l < len(a) && a[l].since < a[m].since {
			m = l
		}
		if r := l + 1; r < len(a) && a[r].since < a[m].since {
			m = r
		}
		if m == k {
			break
		}
		a[k], a[m] = a[m], a[k]
		k = m
	}
	*h = a
}

// StatsResolution is one granularity of the series: the width of its
// slots, and how far back it is kept.
type StatsResolution struct {
	Name   string // "1m", "10m", "1h"
	Step   time.Duration
	Keep   time.Duration // slots older than this are not written (and expire)
	Points int           // slots a range of this resolution shows
	Range  string        // the range it serves: hour, day, week
}

// StatsResolutions are the three granularities: a minute for the last
// hour, ten minutes for the last day, an hour for the last week.
var StatsResolutions = [...]StatsResolution{
	{Name: "1m", Step: time.Minute, Keep: 2 * time.Hour, Points: 60, Range: "hour"},
	{Name: "10m", Step: 10 * time.Minute, Keep: 26 * time.Hour, Points: 144, Range: "day"},
	{Name: "1h", Step: time.Hour, Keep: 8 * 24 * time.Hour, Points: 168, Range: "week"},
}

// StatsSeries is a series over a range, as the HTTP API returns it: one
// array per measure, a value per slot (oldest first), columns that a chart
// takes as they are. A slot no event fell in counts 0; its depth is 0.
type StatsSeries struct {
	Range       string     `json:"range"`
	StepSeconds int        `json:"step_seconds"`
	Namespace   string     `json:"namespace,omitempty"`
	Queue       string     `json:"queue,omitempty"`
	Time        []int64    `json:"t"` // each slot's start, unix seconds
	Submitted   []int      `json:"submitted"`
	Started     []int      `json:"started"`
	Succeeded   []int      `json:"succeeded"`
	Failed      []int      `json:"failed"`
	Cancelled   []int      `json:"cancelled"`
	Retried     []int      `json:"retried"`
	Depth       []int      `json:"depth"`
	OldestWait  []*float64 `json:"oldest_wait_seconds"` // at the slot's end (now for the current one); null: nothing waited
	LatencyAvg  []*float64 `json:"latency_avg_seconds"` // null: no job started
	LatencyMax  []*float64 `json:"latency_max_seconds"`
	// AsOf is the time of the last event the statistics include (absent:
	// none yet); events after it are not counted yet.
	AsOf *time.Time `json:"as_of,omitempty"`
}

// ViewStatsSeries renders the slots starting at starts (nil: no record)
// as a series; now bounds the current slot's oldest wait.
func ViewStatsSeries(res StatsResolution, d StatsDim, starts []time.Time, slots []*StatsSlot, now time.Time) *StatsSeries {
	n := len(starts)
	s := &StatsSeries{Range: res.Range, StepSeconds: int(res.Step / time.Second), Namespace: d.Namespace, Queue: d.Queue,
		Time: make([]int64, n), Submitted: make([]int, n), Started: make([]int, n), Succeeded: make([]int, n),
		Failed: make([]int, n), Cancelled: make([]int, n), Retried: make([]int, n), Depth: make([]int, n),
		OldestWait: make([]*float64, n), LatencyAvg: make([]*float64, n), LatencyMax: make([]*float64, n)}
	for i, start := range starts {
		s.Time[i] = start.Unix()
		sl := slots[i]
		if sl == nil && i == n-1 && i > 0 && slots[i-1] != nil {
			// The current slot's first write comes within a flush of its
			// start: until then, what waited is what waited at the end of
			// the one before.
			sl = &StatsSlot{Depth: slots[i-1].Depth, OldestSince: slots[i-1].OldestSince}
		}
		if sl == nil {
			continue
		}
		s.Submitted[i], s.Started[i], s.Succeeded[i] = sl.Submitted, sl.Started, sl.Succeeded
		s.Failed[i], s.Cancelled[i], s.Retried[i], s.Depth[i] = sl.Failed, sl.Cancelled, sl.Retried, sl.Depth
		if sl.Depth > 0 && sl.OldestSince > 0 {
			end := start.Add(res.Step)
			if now.Before(end) {
				end = now
			}
			w := max(0, end.Sub(time.Unix(0, sl.OldestSince)).Seconds())
			s.OldestWait[i] = &w
		}
		if sl.LatencyN > 0 {
			avg, mx := sl.LatencySum/float64(sl.LatencyN), sl.LatencyMax
			s.LatencyAvg[i], s.LatencyMax[i] = &avg, &mx
		}
	}
	return s
}
