package maintenance

import (
	"sync"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// liveJobs is the Reaper's list of the jobs that are not terminal, each
// with when it must be looked at again, kept from the log as the
// StatsKeeper reads it. With it a pass reads only the jobs that may be due
// (a record each) instead of every record in the bucket, which, after a
// burst, is mostly jobs that ended: 50,000 of them cost a pass about 0.3 s
// of both cores of a 2-core machine, every Interval.
//
// It is a hint, never the truth: a job is decided on as the log has it
// (Store.Current) and the Reaper reads the whole bucket again every
// Reconcile, or when the feed fell behind, so that what the list missed (an
// event the feed could not decode, a record behind its event when the full
// read saw it) is found then.
type liveJobs struct {
	mu    sync.Mutex
	jobs  map[string]liveJob
	max   int       // more than this and passes read the bucket (over)
	over  bool      // the list overflowed: not kept until a full read finds few enough
	fedAt time.Time // when the feed last read to the log's end
	epoch uint32    // of the read of the whole bucket under way, or the last
}

type liveJob struct {
	seq   uint64    // the last event seen of the job
	known bool      // due (or never) is known for the job as of seq
	never bool      // no deadline in its state: looked at again after its next event
	due   time.Time // after this, the reaper looks at it
	seen  uint32    // the epoch of the last read of the whole bucket that saw it
}

func newLiveJobs(max int) *liveJobs {
	return &liveJobs{jobs: map[string]liveJob{}, max: max}
}

// moved records event seq of job id, which moved it to state to ("" for an
// event that is not a move).
func (l *liveJobs) moved(id string, to domain.State, seq uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.jobs[id]
	if ok && seq <= e.seq {
		return // an event read again (the feed resumed from its checkpoint)
	}
	switch {
	case to.Terminal():
		delete(l.jobs, id)
	case to == "":
		if ok {
			l.jobs[id] = liveJob{seq: seq}
		}
	case l.over:
	default:
		l.putLocked(id, liveJob{seq: seq})
	}
}

// putLocked stores e as job id's entry; past max the list overflows: it is
// dropped, and kept again only once a full read finds few enough.
func (l *liveJobs) putLocked(id string, e liveJob) {
	l.jobs[id] = e
	if len(l.jobs) > l.max {
		l.over, l.jobs = true, map[string]liveJob{}
	}
}

// caughtUp records that the feed read to the log's end at now.
func (l *liveJobs) caughtUp(now time.Time) {
	l.mu.Lock()
	l.fedAt = now
	l.mu.Unlock()
}

// fresh reports whether the list can stand for the bucket at now: it did
// not overflow, and its feed read to the log's end within stale.
func (l *liveJobs) fresh(now time.Time, stale time.Duration) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.over && !l.fedAt.IsZero() && now.Sub(l.fedAt) <= stale
}

// toLook lists the jobs to look at now: those whose deadline is not known
// as of their last event, and those past it; at most limit+1 of them (more
// than limit: the caller reads the bucket instead).
func (l *liveJobs) toLook(now time.Time, limit int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ids []string
	for id, e := range l.jobs {
		if !e.known || (!e.never && now.After(e.due)) {
			ids = append(ids, id)
			if len(ids) > limit {
				break
			}
		}
	}
	return ids
}

// learn records what j (read at its event j.Seq) says: ended, or its
// deadline (due, ok as commands.DueAt). A read behind the last event seen
// leaves the job to be looked at again; a job the list does not hold is
// added when it is live (seed: from a read of the whole bucket).
func (l *liveJobs) learn(j *domain.Job, due time.Time, ok bool) {
	l.mu.Lock()
	l.learnLocked(j, due, ok, 0)
	l.mu.Unlock()
}

// learnLocked is learn; seen is the epoch of the full read j comes from (0
// for a look), marked on the job's entry.
func (l *liveJobs) learnLocked(j *domain.Job, due time.Time, ok bool, seen uint32) {
	e, held := l.jobs[j.ID]
	if seen == 0 {
		seen = e.seen
	}
	switch {
	case held && j.Seq < e.seq:
		e.seen = seen
		l.jobs[j.ID] = e
	case j.State.Terminal():
		delete(l.jobs, j.ID)
	case !held && l.over:
	default:
		l.putLocked(j.ID, liveJob{seq: j.Seq, known: true, never: !ok, due: due, seen: seen})
	}
}

// forget drops job id (it is gone: purged).
func (l *liveJobs) forget(id string) {
	l.mu.Lock()
	delete(l.jobs, id)
	l.mu.Unlock()
}

// clear empties the list, as at a new leader term: what the feed of an
// earlier term left in it may be long gone (a job purged while another
// engine led is never read again).
func (l *liveJobs) clear() {
	l.mu.Lock()
	l.jobs, l.over, l.fedAt = map[string]liveJob{}, false, time.Time{}
	l.mu.Unlock()
}

// readAll starts a read of the whole bucket and returns its seen, which
// marks each job the read saw (seed, then sweep). An overflowed list is
// kept again when the last such read found at most half its room of live
// jobs (the jobs it holds and those the read adds).
func (l *liveJobs) readAll(lastLive int) (seed func(j *domain.Job, due time.Time, ok bool)) {
	l.mu.Lock()
	if l.over && lastLive <= l.max/2 {
		l.over = false
	}
	l.epoch++
	epoch := l.epoch
	l.mu.Unlock()
	return func(j *domain.Job, due time.Time, ok bool) {
		l.mu.Lock()
		l.learnLocked(j, due, ok, epoch)
		l.mu.Unlock()
	}
}

// sweep ends the read of the whole bucket begun last: it drops the jobs
// once read (known) that the read did not see and whose last event seen is
// at most upTo, the log's last event when the read began: their record is
// gone (purged). Jobs with events after it stay, and so do jobs never read
// (a record may not be written yet: the next pass reads the log).
func (l *liveJobs) sweep(upTo uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, e := range l.jobs {
		if e.known && e.seen != l.epoch && e.seq <= upTo {
			delete(l.jobs, id)
		}
	}
}

// len is how many jobs the list holds.
func (l *liveJobs) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.jobs)
}
