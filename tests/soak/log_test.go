package soak

import (
	"context"
	"fmt"
	"hash/crc32"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// The event log is read straight from the stream (JETFLOW_EVENTS, every
// subject, in order), not through the engine's projections: what the
// soak asserts is what the log says.

// ev is what the checks need of one event.
type ev struct {
	seq     uint64
	typ     string
	attempt int
	actor   string
	at      time.Time
	from    domain.State
	to      domain.State
	lease   uint64
	piece   int
	runAt   time.Time
	result  []byte
	err     *domain.JobError
	counts  *domain.FanoutCounts
	plan    *domain.FanoutPlan
	message string
}

// jobLog is one job's history.
type jobLog struct {
	id   string
	spec *domain.Spec // from job.submitted (nil: the log has no job.submitted)
	evs  []ev
}

// terminals are the job's events that end it.
func (j *jobLog) terminals() []ev {
	var out []ev
	for _, e := range j.evs {
		if e.to.Terminal() {
			out = append(out, e)
		}
	}
	return out
}

// last is the job's terminal event (the first one, if there are more).
func (j *jobLog) last() *ev {
	for i := range j.evs {
		if j.evs[i].to.Terminal() {
			return &j.evs[i]
		}
	}
	return nil
}

func (j *jobLog) has(typ string) bool {
	for _, e := range j.evs {
		if e.typ == typ {
			return true
		}
	}
	return false
}

func (j *jobLog) count(typ string) int {
	n := 0
	for _, e := range j.evs {
		if e.typ == typ {
			n++
		}
	}
	return n
}

// history is the job's events, one a line, for a report.
func (j *jobLog) history() string {
	var b []byte
	for _, e := range j.evs {
		b = fmt.Appendf(b, "    #%d %s %s attempt=%d actor=%s", e.seq, e.at.Format("15:04:05.000"), e.typ, e.attempt, e.actor)
		if e.to != "" {
			b = fmt.Appendf(b, " %s->%s", e.from, e.to)
		}
		if e.lease != 0 {
			b = fmt.Appendf(b, " lease=%d", e.lease)
		}
		if e.message != "" {
			b = fmt.Appendf(b, " %q", e.message)
		}
		b = append(b, '\n')
	}
	return string(b)
}

// eventLog is the whole log folded by job, and the pieces of each fan-out
// parent.
type eventLog struct {
	jobs   map[string]*jobLog
	pieces map[string][]ev // by parent, in log order
	events int             // job events
	pcs    int             // piece events
	other  int             // the registry's events
	last   uint64
	hashes []uint32 // crc of event seq i+1
	bad    []string // events that did not decode
}

func newEventLog() *eventLog {
	return &eventLog{jobs: map[string]*jobLog{}, pieces: map[string][]ev{}}
}

// add folds the event at seq.
func (l *eventLog) add(seq uint64, subject string, data []byte) {
	if seq != l.last+1 && l.last != 0 {
		l.bad = append(l.bad, fmt.Sprintf("sequence %d follows %d", seq, l.last))
	}
	l.last = seq
	for uint64(len(l.hashes)) < seq-1 {
		l.hashes = append(l.hashes, 0)
	}
	l.hashes = append(l.hashes, crc32.ChecksumIEEE(data))
	if !streams.IsJobSubject(subject) && !streams.IsPieceSubject(subject) {
		l.other++ // the type registry's and namespaces' events
		return
	}
	e, err := streams.DecodeEvent(data)
	if err != nil {
		l.bad = append(l.bad, fmt.Sprintf("event %d: %v", seq, err))
		return
	}
	r := ev{seq: seq, typ: e.Type, attempt: e.Attempt, actor: e.Actor, at: e.Time, from: e.From, to: e.To,
		lease: e.Lease, piece: e.Piece, runAt: e.RunAt, result: e.Result, err: e.Error, counts: e.Counts,
		plan: e.Plan, message: e.Message}
	if streams.IsPieceSubject(subject) {
		l.pcs++
		l.pieces[e.JobID] = append(l.pieces[e.JobID], r)
		return
	}
	l.events++
	j := l.jobs[e.JobID]
	if j == nil {
		j = &jobLog{id: e.JobID}
		l.jobs[e.JobID] = j
	}
	if e.Type == domain.EvSubmitted && j.spec == nil {
		j.spec = e.Spec
	}
	j.evs = append(j.evs, r)
}

// readLog reads the event log from sequence from on into l, to its end as
// the server answers it now.
func readLog(ctx context.Context, nc *nats.Conn, l *eventLog) error {
	return readEvents(ctx, nc, l.last+1, func(seq uint64, subject string, data []byte) error {
		l.add(seq, subject, data)
		return nil
	})
}

// readEvents calls fn with every message of the event log from sequence
// from on, in order, with its subject: job events (jetflow.ev), piece
// events (jetflow.pc) and the registry's (jetflow.reg).
func readEvents(ctx context.Context, nc *nats.Conn, from uint64, fn func(seq uint64, subject string, data []byte) error) error {
	for {
		n := 0
		req := map[string]any{"seq": from, "next_by_subj": "jetflow.>", "batch": 1000}
		more, err := streams.DirectBatch(ctx, nc, streams.EventsStream, req, func(m *nats.Msg) error {
			seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
			if err != nil {
				return fmt.Errorf("event without a sequence: %w", err)
			}
			n++
			from = seq + 1
			return fn(seq, m.Header.Get("Nats-Subject"), m.Data)
		})
		if err != nil || n == 0 || more == 0 {
			return err
		}
	}
}

// tail follows the log while the soak runs: how many jobs finished (for
// the load's backlog and for progress), and a checksum of every event
// read, so that the final read can tell whether anything read once was
// lost or changed later (by a serve restart, say).
type tail struct {
	nc *nats.Conn

	mu          sync.Mutex
	next        uint64
	hashes      []uint32
	jobs        map[string]bool   // every job seen -> finished
	top         map[string]bool   // jobs without a parent -> finished
	held        map[string]string // claimed or running jobs -> their worker
	finished    int
	finishedTop int
	readErrs    int
}

func newTail(nc *nats.Conn) *tail {
	return &tail{nc: nc, next: 1, jobs: map[string]bool{}, top: map[string]bool{}, held: map[string]string{}}
}

// run reads the log until ctx is done.
func (tl *tail) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := tl.poll(ctx); err != nil {
			tl.mu.Lock()
			tl.readErrs++
			tl.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// poll reads what was appended since the last poll.
func (tl *tail) poll(ctx context.Context) error {
	tl.mu.Lock()
	from := tl.next
	tl.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return readEvents(rctx, tl.nc, from, func(seq uint64, subject string, data []byte) error {
		tl.mu.Lock()
		defer tl.mu.Unlock()
		if seq != tl.next {
			return fmt.Errorf("read event %d, expected %d", seq, tl.next)
		}
		tl.next = seq + 1
		tl.hashes = append(tl.hashes, crc32.ChecksumIEEE(data))
		if !streams.IsJobSubject(subject) {
			return nil
		}
		e, err := streams.DecodeEvent(data)
		if err != nil {
			return nil
		}
		if e.Type == domain.EvSubmitted && e.Spec != nil {
			if _, ok := tl.jobs[e.JobID]; !ok {
				tl.jobs[e.JobID] = false
				if e.Spec.Parent == "" {
					tl.top[e.JobID] = false
				}
			}
		}
		switch e.To {
		case "":
		case domain.StateRunning, domain.StateClaimed:
			tl.held[e.JobID] = e.Actor
		default:
			delete(tl.held, e.JobID)
		}
		if e.To.Terminal() && !tl.jobs[e.JobID] {
			tl.jobs[e.JobID] = true
			tl.finished++
			if _, ok := tl.top[e.JobID]; ok {
				tl.top[e.JobID] = true
				tl.finishedTop++
			}
		}
		return nil
	})
}

// counts returns the jobs seen, finished, and finished top-level jobs.
func (tl *tail) counts() (seen, finished, finishedTop int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.jobs), tl.finished, tl.finishedTop
}

// heldBy returns the jobs the log says are held by one of workers.
func (tl *tail) heldBy(workers map[string]bool) []string {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var ids []string
	for id, w := range tl.held {
		if workers[w] {
			ids = append(ids, id)
		}
	}
	return ids
}

// unfinished returns how many of ids have no terminal event yet, plus the
// children seen in the log without one.
func (tl *tail) unfinished(ids []string) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	n := 0
	for _, id := range ids {
		if !tl.top[id] {
			n++
		}
	}
	for id, done := range tl.jobs {
		if _, isTop := tl.top[id]; !isTop && !done {
			n++
		}
	}
	return n
}

// changedSince compares the checksums the tail took while the soak ran
// with those of the final read: events that were read once and are now
// gone or different.
func (tl *tail) changedSince(l *eventLog) (changed []uint64) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	for i, h := range tl.hashes {
		if i >= len(l.hashes) || l.hashes[i] != h {
			changed = append(changed, uint64(i+1))
			if len(changed) >= 20 {
				break
			}
		}
	}
	return changed
}
