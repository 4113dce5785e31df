package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// jobKind is the jobs' aggregate: events on the job's subject (found by
// its id when there is no record yet), records in the jobs bucket, folded
// by projections.Fold; job.purged ends a record for good; a change
// implies dispatch and piece events (after).
func jobKind(s *Store) Kind[domain.Job] {
	return Kind[domain.Job]{
		Name:   "job",
		Bucket: streams.JobsBucket,
		Subject: func(id string, j *domain.Job) string {
			if j == nil {
				return streams.EventFilter(id) // not projected yet: find its events anywhere
			}
			return streams.JobSubject(j)
		},
		Seq:    func(j *domain.Job) uint64 { return j.Seq },
		Head:   func(j *domain.Job) []byte { return j.LastHash },
		Fold:   projections.Fold,
		Encode: streams.EncodeJob,
		Decode: streams.DecodeJob,
		Gone: func(ev *domain.Event) error {
			if ev.Type != domain.EvPurged {
				return nil
			}
			ns, _, _, _ := streams.EventScope(ev.Subject)
			return &commands.GoneError{JobID: ev.JobID, Namespace: ns, At: ev.Time, Reason: ev.Message}
		},
		After:     s.after,
		Mark:      s.FollowMark,
		AfterDone: s.afterDone,
		Early:     claimEarly,
	}
}

// claimEarly says whether a job's record behind ev may be a claim's whose
// writer has not written it yet (DeferRecord): ev is a start, younger than
// twice ClaimRecordAfter.
func claimEarly(ev *domain.Event) bool {
	return ev.Type == domain.EvStarted && time.Since(ev.Time) < 2*ClaimRecordAfter
}

func snapshot(v Version[domain.Job]) Snapshot { return Snapshot{Job: v.Rec, Rev: v.Rev} }

func version(s Snapshot) Version[domain.Job] {
	v := Version[domain.Job]{Rec: s.Job, Rev: s.Rev}
	if s.Job != nil {
		v.Last = s.Job.Seq
	}
	return v
}

// Record reads a job's record from the KV bucket (the projection as it is).
func (s *Store) Record(ctx context.Context, id string) (Snapshot, error) {
	if !domain.ValidID(id) {
		return Snapshot{}, &commands.InputError{Field: "id", Reason: fmt.Sprintf("%q is not a job id", id)}
	}
	v, err := s.jobs.Record(ctx, id)
	if err != nil {
		return Snapshot{}, err
	}
	if v.Rec == nil {
		return Snapshot{}, fmt.Errorf("job %s: %w", id, commands.ErrNotFound)
	}
	return snapshot(v), nil
}

// Current returns a job's current state as the log says it is: the KV
// record, plus any events the record is missing (a writer that crashed
// between its append and its KV write), which are folded in and written
// back. A job whose last event is job.purged is gone: its record, if a
// purge that crashed left it, is deleted, and the error is a
// *commands.GoneError. Decisions that lost a race are taken again on what
// Current returns.
func (s *Store) Current(ctx context.Context, id string) (Snapshot, error) {
	if !domain.ValidID(id) {
		return Snapshot{}, &commands.InputError{Field: "id", Reason: fmt.Sprintf("%q is not a job id", id)}
	}
	v, err := s.jobs.Current(ctx, Ref{Key: id})
	switch {
	case err != nil:
		return Snapshot{}, err
	case v.Last == 0 && v.Rec != nil:
		return Snapshot{}, fmt.Errorf("job %s: record without events (event log purged?)", id)
	case v.Rec == nil:
		return Snapshot{}, fmt.Errorf("job %s: %w", id, commands.ErrNotFound)
	}
	return snapshot(v), nil
}

// Read reads a job to show it: its record as it is, or, when only the log
// has it yet (its submitter crashed between the event and the record), the
// fold of its events (Current). One read, as for Record, but for a queued
// record: an in-process worker's claim writes its record later
// (DeferRecord), so a queued record is shown with the log's last event of
// the job folded in (a second read; Behind, nothing written). Any other
// record behind the log is shown as it is (the Projector repairs it).
// Decisions are taken on Current.
func (s *Store) Read(ctx context.Context, id string) (Snapshot, error) {
	snap, err := s.Record(ctx, id)
	return s.readOn(ctx, id, snap, err)
}

// readOn is Read after its read of the record (snap, err).
func (s *Store) readOn(ctx context.Context, id string, snap Snapshot, err error) (Snapshot, error) {
	switch {
	case errors.Is(err, commands.ErrNotFound):
		return s.Current(ctx, id)
	case err != nil || !commands.InQueue(snap.Job.State):
		return snap, err
	}
	subject := streams.JobSubject(snap.Job)
	m, err := s.lastMsg(ctx, subject)
	if err != nil || m == nil {
		return snap, nil // the log not read (a leader election): the record as it is
	}
	shown, gone := s.foldQueued(ctx, snap, m.Sequence, m.Subject, m.Data)
	if gone {
		return s.Current(ctx, id) // purged: its record goes
	}
	return shown, nil
}

// ReadSeen reads job id for principal p (Read): a job of a namespace p
// does not see is answered as one that does not exist (not found; a
// purged one too, commands.Unseen), and in about the time one takes.
func (s *Store) ReadSeen(ctx context.Context, p *commands.Principal, id string) (Snapshot, error) {
	if !p.Scoped() {
		return s.Read(ctx, id)
	}
	snap, err := s.Record(ctx, id)
	if err == nil && !p.Sees(snap.Job.Spec.Namespace) {
		// After the reads an unknown id's Read goes on to (Current's
		// record and log), so that the time does not tell the two apart.
		return Snapshot{}, s.absent(ctx, id, func(ctx context.Context) error {
			_, err := s.jobs.Current(ctx, Ref{Key: absentID})
			return err
		})
	}
	if snap, err = s.readOn(ctx, id, snap, err); err != nil {
		return snap, commands.Unseen(p, id, err)
	}
	if !p.Sees(snap.Job.Spec.Namespace) { // only the log had it
		return Snapshot{}, fmt.Errorf("job %s: %w", id, commands.ErrNotFound)
	}
	return snap, nil
}

// absentID is a job id no job has (a ULID of time 0: jetflow makes none).
const absentID = "00000000000000000000000000"

// NotSeen is the error of job id, known to be of a namespace the caller
// does not see (from an index), given after the reads Read makes of an id
// no job has: the answer and the time it takes are those of an unknown id.
func (s *Store) NotSeen(ctx context.Context, id string) error {
	return s.absent(ctx, id, func(ctx context.Context) error {
		_, err := s.Read(ctx, absentID)
		return err
	})
}

// absent is the answer to job id as one that does not exist, after read,
// the reads of an id no job has: not found, or, when those reads failed
// (NATS did not answer, ctx ended), their error, as an unknown id's read
// would have failed.
func (s *Store) absent(ctx context.Context, id string, read func(context.Context) error) error {
	err := read(ctx)
	if err == nil || errors.Is(err, commands.ErrNotFound) {
		return fmt.Errorf("job %s: %w", id, commands.ErrNotFound)
	}
	return &renamedErr{strings.ReplaceAll(err.Error(), absentID, id), err}
}

// renamedErr is an error of a read of absentID told of another id: its
// text names that id, and it matches what the read's error matches.
type renamedErr struct {
	msg string
	err error
}

func (e *renamedErr) Error() string { return e.msg }
func (e *renamedErr) Unwrap() error { return e.err }

// foldQueued is a queued record as shown (Read): with the log's last event
// of its job (seq, data on subject) folded in when it is past the record,
// the record as it is when not, or when that event does not decode (not
// jetflow's: another program publishing on its subjects) or fold. gone:
// the last event purged the job.
func (s *Store) foldQueued(ctx context.Context, snap Snapshot, seq uint64, subject string, data []byte) (shown Snapshot, gone bool) {
	if seq <= snap.Job.Seq {
		return snap, false // the record at the log's end
	}
	last, err := streams.DecodeEvent(data)
	if err != nil {
		return snap, false
	}
	last.Seq, last.Subject = seq, subject
	if s.jobs.k.Gone(last) != nil {
		return snap, true
	}
	folded, err := s.jobs.catchUp(ctx, snap.Job, subject, last)
	if err != nil {
		return snap, false
	}
	return Snapshot{Job: folded, Rev: snap.Rev, Behind: true}, false
}

// An Option changes how Apply writes.
type Option int

const (
	// WaitForCascade: a parent the transition ends without success has its
	// descendants cancelled (the pieces of its fan-out, the children linked
	// to it by parent) before Apply returns (the caller cancelled the job),
	// not in the background (the fan-in counter, the reaper, a failure).
	WaitForCascade Option = iota + 1
	// Childless: the job is known to have no piece events, so no children
	// linked to it by parent are looked for when it ends (a cascade asked
	// which of the children it cancels have any).
	Childless
	// DeferRecord: the event is appended and its record not written
	// (Write.DeferRecord); the snapshot returned is Behind, and its caller
	// writes the record (WriteRecord) unless its next write comes first.
	DeferRecord
)

// has reports whether opts holds o.
func has(opts []Option, o Option) bool {
	for _, x := range opts {
		if x == o {
			return true
		}
	}
	return false
}

// Apply decides on cur, appends the event and projects it, then publishes
// what the transition implies (after). If another writer moved the job
// first, it reads the job again (Current) and decides again on what it
// finds, so the returned error is the decider's refusal, not the race. It
// returns the snapshot the last decision was made on (on refusal) or the
// one written (on success), and the event written. op names the operation
// for crash points ("<op>:appended", "<op>:projected", "<op>:dispatched").
func (s *Store) Apply(ctx context.Context, op string, cur Snapshot, decide Decider, opts ...Option) (Snapshot, *domain.Event, error) {
	if cur.Job == nil {
		return cur, nil, errors.New("apply: no job")
	}
	for attempt := 0; ; attempt++ {
		ev, err := decide(cur.Job)
		if err != nil {
			return cur, nil, err
		}
		w := &Write[domain.Job]{Ref: Ref{Key: cur.Job.ID}, Cur: version(cur), Ev: ev, DeferRecord: has(opts, DeferRecord)}
		s.jobs.Write(ctx, op, w)
		if w.Lost && attempt < maxDecisions {
			if cur, err = s.Current(ctx, cur.Job.ID); err != nil {
				return cur, nil, err
			}
			continue
		}
		if !w.Appended() {
			return cur, nil, w.Err
		}
		if w.Err != nil {
			return cur, ev, w.Err
		}
		next := snapshot(w.Next)
		next.Behind = w.DeferRecord
		s.cascadeAfter(ctx, next, ev, opts)
		return next, ev, nil
	}
}

// WriteRecord writes the record of a snapshot that is Behind (Apply with
// DeferRecord) at its revision. A record that moved meanwhile (a Current
// repaired it, or another writer wrote the job) is read again as the log
// has it (Current).
func (s *Store) WriteRecord(ctx context.Context, cur Snapshot) (Snapshot, error) {
	if !cur.Behind {
		return cur, nil
	}
	mark := s.FollowMark()
	rev, err := s.jobs.put(cur.Job.ID, cur.Job, cur.Rev).Wait(ctx)
	switch {
	case err == nil:
		s.followedUp.recorded(cur.Job.ID, cur.Job.Seq, mark)
		return Snapshot{Job: cur.Job, Rev: rev}, nil
	case streams.IsConflict(err):
		return s.Current(ctx, cur.Job.ID)
	default:
		return cur, fmt.Errorf("write the record of job %s: %w", cur.Job.ID, err)
	}
}

// ApplyMany is Apply for many jobs at once, with the writes of each step
// pipelined across them (Write): one round trip a step, not three per
// job. A job whose append lost a race is read again and decided again
// through Apply. It returns each job's error (nil: written).
func (s *Store) ApplyMany(ctx context.Context, op string, curs []Snapshot, decide Decider) []error {
	errs := make([]error, len(curs))
	ws := make([]*Write[domain.Job], len(curs))
	var todo []*Write[domain.Job]
	for i, cur := range curs {
		if cur.Job == nil {
			errs[i] = errors.New("apply: no job")
			continue
		}
		ev, err := decide(cur.Job)
		if err != nil {
			errs[i] = err
			continue
		}
		ws[i] = &Write[domain.Job]{Ref: Ref{Key: cur.Job.ID}, Cur: version(cur), Ev: ev}
		todo = append(todo, ws[i])
	}
	s.jobs.Write(ctx, op, todo...)
	for i, w := range ws {
		switch {
		case w == nil:
		case w.Lost:
			// Another writer came first: decided again on the job as it is now.
			cur, err := s.Current(ctx, curs[i].Job.ID)
			if err != nil {
				errs[i] = err
				continue
			}
			_, _, errs[i] = s.Apply(ctx, op, cur, decide)
		case w.Err != nil:
			// Not appended, or appended but not projected: the transition
			// stands, and the Projector writes the record.
			errs[i] = w.Err
		default:
			s.cascadeAfter(ctx, snapshot(w.Next), w.Ev, nil)
		}
	}
	return errs
}

// Submitted is the outcome of one submit.
type Submitted struct {
	Snapshot
	Created bool  // false: the idempotency key named an existing job
	Err     error // the submit's error, if it failed
}

// Submit creates a job: job.submitted, then its record, then its work item.
// With an idempotency key the job id is derived from the key, and a second
// submit returns the existing job (Created false).
func (s *Store) Submit(ctx context.Context, req *commands.SubmitRequest) (Submitted, error) {
	out := s.SubmitBatch(ctx, []*commands.SubmitRequest{req})
	return out[0], out[0].Err
}

// SubmitBatch submits many jobs with the writes of each step pipelined
// across them (Write): all appends, then all records, then all work items.
func (s *Store) SubmitBatch(ctx context.Context, reqs []*commands.SubmitRequest) []Submitted {
	out := make([]Submitted, len(reqs))
	now := time.Now().UTC()
	var actor string // the request's principal, if any (events of a process's own submits name none)
	if p := PrincipalOf(ctx); p != nil {
		actor = p.Actor()
	}
	ws := make([]*Write[domain.Job], len(reqs))
	var todo []*Write[domain.Job]
	uniques := s.submitUniques(ctx, reqs, out, actor, now) // they read their keys' holders first
	for i, req := range reqs {
		if req.Unique() {
			continue
		}
		w, err := s.submission(ctx, req, actor, now)
		if err != nil {
			out[i].Err = err
			continue
		}
		ws[i] = w
		todo = append(todo, w)
	}
	spans := traceSubmits(ctx, ws)
	// A child linked by parent is recorded on the parent's piece subject
	// before it exists: a cascade of the parent finds it (one of a child
	// that was never made cancels nothing).
	if len(todo) > 0 && anyLinked(reqs) {
		todo = s.link(ctx, reqs, ws, out, actor, now)
	}
	// A failed dispatch is not the submit's failure: the job exists and is
	// in the log, and reporting it would make callers submit it twice.
	s.jobs.Write(ctx, "submit", todo...)
	uniques()
	for i, w := range ws {
		switch {
		case w == nil:
		case w.Lost && w.ExpectOn != "":
			// The derived id names an existing job: return it as it is.
			existing, err := s.Current(ctx, w.Ev.JobID)
			out[i] = Submitted{Snapshot: existing, Err: err}
		case w.Err != nil:
			out[i].Err = w.Err
		default:
			out[i] = Submitted{Snapshot: snapshot(w.Next), Created: true}
		}
	}
	for i, req := range reqs {
		if out[i].Created && linked(req) {
			s.dropIfParentEnded(ctx, out[i].Job)
		}
	}
	endSubmits(spans, out)
	return out
}

// anyLinked reports whether any of reqs is a child linked by parent.
func anyLinked(reqs []*commands.SubmitRequest) bool {
	for _, req := range reqs {
		if linked(req) {
			return true
		}
	}
	return false
}

// submission decides the first event of a submit: its spec, its type
// (resolved by the registry), its id (derived from the key, if any) and
// whether its queue's limits make it wait for admission.
func (s *Store) submission(ctx context.Context, req *commands.SubmitRequest, actor string, now time.Time) (*Write[domain.Job], error) {
	spec, err := req.Spec(now)
	if err == nil && s.types != nil {
		spec.Type, err = s.types.Resolve(ctx, spec.Namespace, spec.Type, spec.Payload)
	}
	if err != nil {
		return nil, err
	}
	id := domain.NewID()
	switch {
	case req.ID != "":
		id = req.ID
	case spec.Key != "":
		id = domain.KeyedID(spec.Namespace, spec.Key)
	}
	lim, err := s.limits.Of(ctx, spec.Queue)
	if err != nil {
		return nil, err
	}
	ev, err := commands.Submit(id, spec, lim.Limited(), now)
	if err != nil {
		return nil, err
	}
	ev.Actor = actor
	if err := s.queues.Ensure(ctx, spec.Queue); err != nil {
		return nil, err
	}
	w := &Write[domain.Job]{Ref: Ref{Key: id, Subject: streams.EventSubject(spec.Namespace, spec.Queue, spec.Type, id)}, Ev: ev}
	if spec.Key != "" || req.ID != "" {
		// A derived id must be new on every subject, which makes
		// idempotency keys hold across namespaces, queues and types; a
		// random one only needs its own subject to be empty.
		w.ExpectOn = streams.EventFilter(id)
	}
	return w, nil
}

// Cancel cancels a job that is not terminal and tells its worker, if one
// runs it. Cancelling a terminal job writes nothing and returns the job as
// it is, with an error matching commands.ErrTerminal. Its unfinished
// descendants (the pieces of a fan-out parent, the children linked to it by
// parent) are cancelled before it returns.
func (s *Store) Cancel(ctx context.Context, id, reason string) (Snapshot, error) {
	return s.cancel(ctx, id, reason)
}

// Reprioritize gives a job that has not started (pending, scheduled or
// queued) another priority: job.reprioritized. In a queue with priorities
// a pending job takes its new place at once; a job admitted already
// (queued) keeps its place in the work queue. A job that has the priority
// already is returned as it is, with nothing written; one that started or
// ended is refused with an error matching commands.ErrInvalidTransition.
func (s *Store) Reprioritize(ctx context.Context, id string, priority int) (Snapshot, error) {
	cur, err := s.Current(ctx, id)
	if err != nil {
		return cur, err
	}
	snap, _, err := s.Apply(ctx, "reprioritize", cur, func(j *domain.Job) (*domain.Event, error) {
		return commands.Reprioritize(j, priority, s.ActorOf(ctx), time.Now().UTC())
	})
	if errors.Is(err, commands.ErrSamePriority) {
		return snap, nil
	}
	return snap, err
}

// cancel is Cancel, with more options for Apply (Childless).
func (s *Store) cancel(ctx context.Context, id, reason string, opts ...Option) (Snapshot, error) {
	cur, err := s.Current(ctx, id)
	if err != nil {
		return cur, err
	}
	snap, ev, err := s.Apply(ctx, "cancel", cur, func(j *domain.Job) (*domain.Event, error) {
		return commands.Cancel(j, reason, s.ActorOf(ctx), time.Now().UTC())
	}, append(opts, WaitForCascade)...)
	if err != nil {
		return snap, err
	}
	if commands.CancelNotifies(ev.From) {
		// Best effort: a worker that misses this sees the cancel at its next
		// lease renewal.
		_ = s.nc.Publish(streams.CancelSubject, []byte(id))
	}
	return snap, nil
}
