package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Snapshot is a job record and the KV revision it was read or written at.
type Snapshot struct {
	Job *domain.Job
	Rev uint64
}

// Decider turns a job's current state into the event that changes it, or a
// refusal. The functions of package commands, bound to their arguments.
type Decider func(j *domain.Job) (*domain.Event, error)

// Store is the write path. Every transition of every job goes through
// Store.Apply (or Store.Submit for the first one):
//
//  1. decide: the Decider, with the lifecycle table, produces one event;
//  2. append: the event goes to the job's subject on the condition that the
//     subject's last sequence is the one the decision was made on, so of two
//     racing writers exactly one succeeds;
//  3. project: the fold of the event goes to the KV bucket, revision-checked;
//  4. dispatch, if the job became runnable: a work item, or a schedule.
//
// A crash between any two steps leaves the log ahead of the KV bucket or a
// runnable job without a work item; Load and the Projector repair both.
type Store struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	W      streams.Writer
	KV     jetstream.KeyValue
	Events jetstream.Stream
	Queues *streams.Queues
	Topo   streams.Topology
	// Workers is the worker registry: who is alive, and which jobs each
	// holds, for the lease rules.
	Workers *Workers
	// Types is the type registry and the namespaces' settings.
	Types *Registry
	// Tokens are the access tokens.
	Tokens *Tokens
	// Limits are the queues' limits (quotas), from a watch.
	Limits *Limits
	Actor  string // who writes: recorded on the events of this process
	Log    *slog.Logger

	// Repairs counts job records this Store rebuilt from the log because
	// they were missing or behind it.
	Repairs atomic.Int64

	cascading sync.Map // parent id -> struct{}: cascades in flight in this process

	presenceMu sync.Mutex
	presences  map[string]*presence // by worker id: the SDK workers of this process

	connected atomic.Int64 // unix nanos: when the connection was opened or last came back

	filesMu sync.Mutex
	files   *files.Store // opened by Files, once
}

// Files is the object store of jobs' files (docs/files.md), opened (and
// created if need be) at the first call, again after a failure.
func (s *Store) Files(ctx context.Context) (*files.Store, error) {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	if s.files == nil {
		fs, err := files.Open(ctx, s.JS, s.Topo)
		if err != nil {
			return nil, err
		}
		s.files = fs
	}
	return s.files, nil
}

// ConnectedSince is when this Store's connection was opened, or last came
// back after it was lost: before it, nothing this process saw of other
// workers' heartbeats can be trusted to be recent.
func (s *Store) ConnectedSince() time.Time { return time.Unix(0, s.connected.Load()) }

// watchReconnects keeps ConnectedSince current, calling any reconnect
// handler the connection had before.
func (s *Store) watchReconnects() {
	s.connected.Store(time.Now().UnixNano())
	prev := s.NC.Opts.ReconnectedCB
	s.NC.SetReconnectHandler(func(c *nats.Conn) {
		s.connected.Store(time.Now().UnixNano())
		if prev != nil {
			prev(c)
		}
	})
}

// OpenStore connects a Store to JetStream, provisioning the topology.
func OpenStore(ctx context.Context, nc *nats.Conn, topo streams.Topology, actor string) (*Store, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	if topo.Replicas <= 0 {
		if topo.Replicas, err = autoReplicas(ctx, nc, js); err != nil {
			return nil, err
		}
	}
	if err := topo.Ensure(ctx, js); err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, streams.JobsBucket)
	if err != nil {
		return nil, fmt.Errorf("jobs bucket: %w", err)
	}
	evs, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	workers, err := openWorkers(ctx, js)
	if err != nil {
		return nil, err
	}
	s := &Store{NC: nc, JS: js, W: streams.Writer{JS: js}, KV: kv, Events: evs, Workers: workers,
		Queues: streams.NewQueues(js, topo), Topo: topo, Actor: actor, Log: slog.Default()}
	s.Limits = newLimits(s)
	if s.Types, err = openRegistry(ctx, s); err != nil {
		return nil, err
	}
	if s.Tokens, err = openTokens(ctx, s); err != nil {
		return nil, err
	}
	s.watchReconnects()
	return s, nil
}

// autoReplicas is the replica count of a process that was not told one: the
// count of the system it joins (its event log's), so that every process
// provisions queues alike whichever started first; on a new system, 3 on a
// cluster and 1 on a single server.
func autoReplicas(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (int, error) {
	s, err := js.Stream(ctx, streams.EventsStream)
	if err == nil {
		return max(s.CachedInfo().Config.Replicas, 1), nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("events stream: %w", err)
	}
	if nc.ConnectedClusterName() != "" {
		return 3, nil
	}
	return 1, nil
}

// Get reads a job's record from the KV bucket (the projection as it is).
func (s *Store) Get(ctx context.Context, id string) (Snapshot, error) {
	if !domain.ValidID(id) {
		return Snapshot{}, &commands.InputError{Field: "id", Reason: fmt.Sprintf("%q is not a job id", id)}
	}
	e, err := s.KV.Get(ctx, streams.KVKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Snapshot{}, fmt.Errorf("job %s: %w", id, commands.ErrNotFound)
	}
	if err != nil {
		return Snapshot{}, fmt.Errorf("get job %s: %w", id, err)
	}
	j, err := streams.DecodeJob(e.Value())
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{Job: j, Rev: e.Revision()}, nil
}

// Load returns a job's current state as the log says it is: the KV record,
// plus any events the record is missing (a writer that crashed between its
// append and its KV write), which are folded in and written back. Decisions
// that lost a race are retried on what Load returns.
func (s *Store) Load(ctx context.Context, id string) (Snapshot, error) {
	for attempt := 0; ; attempt++ {
		snap, err := s.Get(ctx, id)
		var subject string
		switch {
		case errors.Is(err, commands.ErrNotFound):
			subject = streams.EventFilter(id) // not projected yet: find its events anywhere
		case err != nil:
			return Snapshot{}, err
		default:
			subject = streams.JobSubject(snap.Job)
		}
		lastMsg, err := s.lastMsg(ctx, subject)
		if err != nil {
			return Snapshot{}, err
		}
		var last uint64
		if lastMsg != nil {
			last = lastMsg.Sequence
		}
		if last == 0 {
			if snap.Job != nil {
				return Snapshot{}, fmt.Errorf("job %s: record without events (event log purged?)", id)
			}
			return Snapshot{}, fmt.Errorf("job %s: %w", id, commands.ErrNotFound)
		}
		if snap.Job != nil && snap.Job.Seq >= last {
			return snap, nil
		}
		if err := s.purged(ctx, lastMsg, snap); err != nil {
			if streams.IsConflict(err) && attempt < 20 {
				continue // the record moved while it was being deleted: look again
			}
			return Snapshot{}, err
		}
		job := snap.Job
		from := uint64(1)
		if job != nil {
			from = job.Seq + 1
		}
		job, err = s.foldFrom(ctx, job, subject, from, last)
		if err != nil {
			return Snapshot{}, err
		}
		rev, err := s.W.PutJobAsync(job, snap.Rev).Wait(ctx)
		if err == nil {
			s.Repairs.Add(1)
			s.Log.Info("job record rebuilt from the log", "job", id, "seq", job.Seq, "was", snap.Job != nil)
			return Snapshot{Job: job, Rev: rev}, nil
		}
		if !streams.IsConflict(err) || attempt >= 20 {
			return Snapshot{}, fmt.Errorf("repair job %s: %w", id, err)
		}
		// Someone else wrote the record meanwhile: read it again.
	}
}

// lastSeq is the sequence of the last event on subject, 0 if none.
func (s *Store) lastSeq(ctx context.Context, subject string) (uint64, error) {
	m, err := s.lastMsg(ctx, subject)
	if err != nil || m == nil {
		return 0, err
	}
	return m.Sequence, nil
}

// foldFrom folds the events on subject from sequence from up to last into j.
func (s *Store) foldFrom(ctx context.Context, j *domain.Job, subject string, from, last uint64) (*domain.Job, error) {
	for seq := from; seq <= last; {
		m, err := s.Events.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read events on %s: %w", subject, err)
		}
		ev, err := streams.DecodeEvent(m.Data)
		if err != nil {
			return nil, fmt.Errorf("event %d: %w", m.Sequence, err)
		}
		ev.Seq, ev.Subject = m.Sequence, m.Subject
		if j, err = projections.Fold(j, ev); err != nil {
			return nil, err
		}
		if subject != m.Subject && streams.EventFilter(ev.JobID) == subject {
			subject = m.Subject // found the job's own subject: no need to match wildcards any more
		}
		seq = m.Sequence + 1
	}
	if j == nil {
		return nil, fmt.Errorf("job events on %s: %w", subject, commands.ErrNotFound)
	}
	return j, nil
}

// maxDecisions bounds how often Apply re-decides after losing a race.
const maxDecisions = 16

// Apply decides on cur, appends the event and projects it. If another writer
// moved the job first, it loads the job again and decides again on what it
// finds, so the returned error is the decider's refusal, not the race. It
// returns the snapshot the last decision was made on (on refusal) or the
// one written (on success), and the event written. op names the operation
// for crash points ("<op>:appended", "<op>:projected").
func (s *Store) Apply(ctx context.Context, op string, cur Snapshot, decide Decider) (Snapshot, *domain.Event, error) {
	if cur.Job == nil {
		return cur, nil, errors.New("apply: no job")
	}
	for attempt := 0; ; attempt++ {
		ev, err := decide(cur.Job)
		if err != nil {
			return cur, nil, err
		}
		stamp(ctx, ev)
		seq, err := s.W.AppendAsync(streams.JobSubject(cur.Job), ev, cur.Job.Seq).Wait(ctx)
		if streams.IsConflict(err) && attempt < maxDecisions {
			if cur, err = s.Load(ctx, cur.Job.ID); err != nil {
				return cur, nil, err
			}
			continue
		}
		if err != nil {
			return cur, nil, fmt.Errorf("%s job %s: append %s: %w", op, cur.Job.ID, ev.Type, err)
		}
		ev.Seq, ev.Subject = seq, streams.JobSubject(cur.Job)
		crash(op + ":appended")
		next, err := s.project(ctx, cur, ev)
		if err != nil {
			return cur, ev, err
		}
		crash(op + ":projected")
		if err := s.afterApply(ctx, next, ev); err != nil {
			// The transition stands; the Projector repeats what is missing.
			s.Log.Warn("after "+ev.Type, "job", ev.JobID, "err", err)
		}
		crash(op + ":dispatched")
		if ev.To.Terminal() && commands.ChildBlocked(next.Job) && !cascades(next.Job) && op != "cancel" {
			// Not a fan-out parent, it may still have children linked to
			// it by parent: looked for in the background (a cancel looks
			// before it answers: Store.cancel).
			s.CascadeAsync(next.Job, "parent job is "+string(ev.To))
		}
		if ev.To.Terminal() && cascades(next.Job) {
			reason := "parent job is " + string(ev.To)
			if op == "cancel" {
				// The caller cancelled this job: its descendants are
				// cancelled before it hears back.
				if err := s.cascade(ctx, next.Job, reason); err != nil {
					s.Log.Warn("cancel the children of "+ev.JobID, "err", err)
				}
			} else {
				// The fan-in counter or the reaper: not held up by it.
				s.CascadeAsync(next.Job, reason)
			}
		}
		return next, ev, nil
	}
}

// ApplyMany is Apply for many jobs at once, with the writes of each step
// pipelined across them (every append, then every record, then every work
// item or schedule), as SubmitBatch does: one round trip a step, not three
// per job. It serves transitions whose only consequence is dispatch (an
// admission, a hold): a decision that ends a job or makes it wait for
// pieces goes through Apply on its own, and one whose append lost a race
// is loaded and decided again through Apply. It
// returns each job's error (nil: written).
func (s *Store) ApplyMany(ctx context.Context, op string, curs []Snapshot, decide Decider) []error {
	errs := make([]error, len(curs))
	evs := make([]*domain.Event, len(curs))
	futs := make([]streams.Future, len(curs))
	var alone, lost []int // decided alone (they end a job or wait); lost a race
	for i, cur := range curs {
		if cur.Job == nil {
			errs[i] = errors.New("apply: no job")
			continue
		}
		ev, err := decide(cur.Job)
		switch {
		case err != nil:
			errs[i] = err
		case ev.To.Terminal() || ev.Type == domain.EvWaiting:
			alone = append(alone, i)
		default:
			evs[i] = ev
			futs[i] = s.W.AppendAsync(streams.JobSubject(cur.Job), ev, cur.Job.Seq)
		}
	}
	for i, ev := range evs {
		if ev == nil {
			continue
		}
		seq, err := futs[i].Wait(ctx)
		switch {
		case streams.IsConflict(err):
			lost = append(lost, i)
			evs[i] = nil
		case err != nil:
			errs[i] = fmt.Errorf("%s job %s: append %s: %w", op, curs[i].Job.ID, ev.Type, err)
			evs[i] = nil
		default:
			ev.Seq, ev.Subject = seq, streams.JobSubject(curs[i].Job)
		}
	}
	crash(op + ":appended")
	nexts := make([]*domain.Job, len(curs))
	for i, ev := range evs {
		if ev == nil {
			continue
		}
		next, err := projections.Fold(curs[i].Job, ev)
		if err != nil {
			errs[i] = fmt.Errorf("fold %s into job %s: %w", ev.Type, ev.JobID, err)
			evs[i] = nil
			continue
		}
		nexts[i] = next
		futs[i] = s.W.PutJobAsync(next, curs[i].Rev)
	}
	snaps := make([]Snapshot, len(curs))
	for i, ev := range evs {
		if ev == nil {
			continue
		}
		rev, err := futs[i].Wait(ctx)
		snaps[i] = Snapshot{Job: nexts[i], Rev: rev}
		if streams.IsConflict(err) {
			// As in project: Load reconciles the record with the log.
			snaps[i], err = s.Load(ctx, ev.JobID)
		}
		if err != nil {
			// The transition stands; the Projector writes the record.
			errs[i] = fmt.Errorf("project job %s: %w", ev.JobID, err)
			evs[i] = nil
		}
	}
	crash(op + ":projected")
	for i, ev := range evs {
		if ev != nil && ev.To != domain.StateQueued && ev.To != domain.StateScheduled {
			evs[i] = nil
		}
	}
	s.dispatchMany(ctx, snaps, evs)
	crash(op + ":dispatched")
	for _, i := range alone {
		_, _, errs[i] = s.Apply(ctx, op, curs[i], decide)
	}
	for _, i := range lost {
		// Another writer came first: decided again on the job as it is now.
		cur, err := s.Load(ctx, curs[i].Job.ID)
		if err != nil {
			errs[i] = err
			continue
		}
		_, _, errs[i] = s.Apply(ctx, op, cur, decide)
	}
	return errs
}

// project writes the fold of ev (just appended) into the job's KV record.
// If the record moved meanwhile (the Projector repaired it, or a later
// writer got there first), Load reconciles it with the log, which has ev.
func (s *Store) project(ctx context.Context, cur Snapshot, ev *domain.Event) (Snapshot, error) {
	next, err := projections.Fold(cur.Job, ev)
	if err != nil {
		return cur, fmt.Errorf("fold %s into job %s: %w", ev.Type, ev.JobID, err)
	}
	rev, err := s.W.PutJobAsync(next, cur.Rev).Wait(ctx)
	if err == nil {
		return Snapshot{Job: next, Rev: rev}, nil
	}
	if !streams.IsConflict(err) {
		return cur, fmt.Errorf("project job %s: %w", ev.JobID, err)
	}
	return s.Load(ctx, ev.JobID)
}

// Dispatch makes a runnable snapshot claimable: a work item for a queued
// job, a schedule for a scheduled one. Anything else is left alone.
func (s *Store) Dispatch(ctx context.Context, snap Snapshot) error {
	if st := snap.Job.State; st != domain.StateQueued && st != domain.StateScheduled {
		return nil
	}
	_, err := s.dispatchAsync(snap).Wait(ctx)
	return err
}

func (s *Store) dispatchAsync(snap Snapshot) streams.Future {
	return s.W.DispatchAsync(&domain.WorkItem{Rev: snap.Rev, Job: *snap.Job})
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
// across them: all appends, then all records, then all work items.
func (s *Store) SubmitBatch(ctx context.Context, reqs []*commands.SubmitRequest) []Submitted {
	out := make([]Submitted, len(reqs))
	now := time.Now().UTC()
	var actor string // the request's principal, if any (events of a process's own submits name none)
	if p := PrincipalOf(ctx); p != nil {
		actor = p.Actor()
	}
	evs := make([]*domain.Event, len(reqs))
	futs := make([]streams.Future, len(reqs))
	for i, req := range reqs {
		spec, err := req.Spec(now)
		if err == nil {
			spec.Type, err = s.Types.Resolve(ctx, spec.Namespace, spec.Type, spec.Payload)
		}
		if err != nil {
			out[i].Err = err
			continue
		}
		id := domain.NewID()
		switch {
		case req.ID != "":
			id = req.ID
		case spec.Key != "":
			id = domain.KeyedID(spec.Namespace, spec.Key)
		}
		lim, err := s.Limits.Of(ctx, spec.Queue)
		if err != nil {
			out[i].Err = err
			continue
		}
		ev, err := commands.Submit(id, spec, lim.Limited(), now)
		if err != nil {
			out[i].Err = err
			continue
		}
		ev.Actor = actor
		if err := s.Queues.Ensure(ctx, spec.Queue); err != nil {
			out[i].Err = err
			continue
		}
		evs[i] = ev
	}
	// A child linked by parent is recorded on the parent's piece subject
	// before it exists: a cascade of the parent finds it (one of a child
	// that was never made cancels nothing).
	s.link(ctx, reqs, evs, out, actor, now)
	for i, ev := range evs {
		if ev != nil {
			futs[i] = s.W.AppendFirstAsync(ev, streams.EventSubject(ev.Spec.Namespace, ev.Spec.Queue, ev.Spec.Type, ev.JobID),
				ev.Spec.Key != "" || reqs[i].ID != "")
		}
	}
	for i, ev := range evs {
		if ev == nil {
			continue
		}
		seq, err := futs[i].Wait(ctx)
		if derived := ev.Spec.Key != "" || reqs[i].ID != ""; derived && streams.IsConflict(err) {
			// The derived id names an existing job: return it as it is.
			existing, lerr := s.Load(ctx, ev.JobID)
			out[i] = Submitted{Snapshot: existing, Err: lerr}
			evs[i] = nil
			continue
		}
		if err != nil {
			out[i].Err = fmt.Errorf("submit %s: %w", ev.JobID, err)
			evs[i] = nil
			continue
		}
		ev.Seq = seq
	}
	crash("submit:appended")
	jobs := make([]*domain.Job, len(reqs))
	for i, ev := range evs {
		if ev == nil {
			continue
		}
		ev.Subject = streams.EventSubject(ev.Spec.Namespace, ev.Spec.Queue, ev.Spec.Type, ev.JobID)
		j, err := projections.Fold(nil, ev)
		if err != nil {
			out[i].Err = err
			evs[i] = nil
			continue
		}
		jobs[i] = j
		futs[i] = s.W.PutJobAsync(j, 0)
	}
	for i, ev := range evs {
		if ev == nil {
			continue
		}
		rev, err := futs[i].Wait(ctx)
		snap := Snapshot{Job: jobs[i], Rev: rev}
		if streams.IsConflict(err) {
			// The Projector created the record first (this writer was slow).
			snap, err = s.Load(ctx, ev.JobID)
		}
		if err != nil {
			out[i].Err = fmt.Errorf("submit %s: record: %w", ev.JobID, err)
			evs[i] = nil
			continue
		}
		out[i] = Submitted{Snapshot: snap, Created: true}
	}
	crash("submit:projected")
	for i, ev := range evs {
		if ev == nil || out[i].Job.Seq != ev.Seq || ev.To == domain.StatePending {
			evs[i] = nil // failed, moved on already (cancelled), or waits for admission: nothing to dispatch
		}
	}
	snaps := make([]Snapshot, len(out))
	for i := range out {
		snaps[i] = out[i].Snapshot
	}
	// A failed dispatch is not the submit's failure: the job exists and is
	// in the log, and reporting it would make callers submit it twice.
	s.dispatchMany(ctx, snaps, evs)
	for i, req := range reqs {
		if out[i].Created && linked(req) {
			s.dropIfParentEnded(ctx, out[i].Job)
		}
	}
	return out
}

// dispatchMany publishes the work item (or schedule) of each snaps[i]
// whose evs[i] is not nil, pipelined, and waits for them. A failure is
// logged: the job is in the log, and the Projector dispatches it.
func (s *Store) dispatchMany(ctx context.Context, snaps []Snapshot, evs []*domain.Event) {
	futs := make([]streams.Future, len(evs))
	for i, ev := range evs {
		if ev != nil {
			futs[i] = s.dispatchAsync(snaps[i])
		}
	}
	for i, ev := range evs {
		if ev == nil {
			continue
		}
		if _, err := futs[i].Wait(ctx); err != nil {
			s.Log.Warn("dispatch after "+ev.Type+" failed; the projector repeats it", "job", ev.JobID, "err", err)
		}
	}
}

// Cancel cancels a job that is not terminal and tells its worker, if it is
// running, and cancels its unfinished descendants before it returns.
// Cancelling a terminal job writes nothing and returns the job as it is,
// with an error matching commands.ErrTerminal.
func (s *Store) Cancel(ctx context.Context, id, reason string) (Snapshot, error) {
	return s.cancel(ctx, id, reason, true)
}

// cancel is Cancel; without family, the job is known to have no children
// linked to it by parent (no piece events), and none are looked for.
func (s *Store) cancel(ctx context.Context, id, reason string, family bool) (Snapshot, error) {
	cur, err := s.Load(ctx, id)
	if err != nil {
		return cur, err
	}
	snap, ev, err := s.Apply(ctx, "cancel", cur, func(j *domain.Job) (*domain.Event, error) {
		return commands.Cancel(j, reason, s.ActorOf(ctx), time.Now().UTC())
	})
	if err != nil {
		return snap, err
	}
	if ev.From == domain.StateRunning || ev.From == domain.StateClaimed || ev.From == domain.StateWaiting {
		// Best effort: a worker that misses this sees the cancel at its next
		// lease renewal.
		_ = s.NC.Publish(streams.CancelSubject, []byte(id))
	}
	if family && snap.Job.Fanout == nil {
		// A fan-out parent's cascade (in Apply) covers its linked children.
		if err := s.cancelChildren(ctx, snap.Job.Spec.Namespace, id, 0, "parent job is cancelled"); err != nil {
			s.Log.Warn("cancel the children of "+id, "err", err)
		}
	}
	return snap, nil
}
