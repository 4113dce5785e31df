package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// What a transition implies, published after its record is written: the
// work item (or the schedule) of a job it made runnable, the piece event
// of a fan-out (a child that ended, a parent that started waiting), and
// the cancel of the pieces of a parent that ended without succeeding. A
// crash before it is repaired by the Projector, which publishes them
// again (message ids make that a no-op) and repeats cascades.

// after is the jobs' Kind.After: the work item of a job the event made
// runnable (unless its record moved on since: whoever moved it dispatches
// what it needs), and the piece event of a fan-out.
func (s *Store) after(next Version[domain.Job], ev *domain.Event) []streams.Future {
	j := next.Rec
	if j == nil {
		return nil
	}
	var futs []streams.Future
	do := afterOf(j, ev)
	if do.dispatch {
		futs = append(futs, s.dispatchWritten(next))
	}
	if do.piece {
		futs = append(futs, s.PieceAsync(j))
	}
	if do.plan {
		futs = append(futs, s.PlanAsync(j))
	}
	return futs
}

// followUpSet is what a job's change implies beyond its event and record:
// its work item (or schedule), its plan (a parent that waits), its piece
// event (a child that ended).
type followUpSet struct{ dispatch, plan, piece bool }

// afterOf is what a writer publishes after event ev made record j. Write
// passes the record at ev or past it (its own fold when a read after a
// conflict stays behind); a record behind ev would imply nothing (its
// state is not ev's: the Projector repeats what ev implies).
func afterOf(j *domain.Job, ev *domain.Event) followUpSet {
	if j.Seq < ev.Seq {
		return followUpSet{}
	}
	// A record moved on past ev is published from: its outcome is ev's
	// as long as it is still ended (pieceOf reads it from the state).
	piece := ev.To.Terminal() && j.State.Terminal() && j.Spec.Parent != ""
	return followUpSet{
		dispatch: commands.Dispatchable(ev.To) && j.Seq == ev.Seq,
		piece:    piece,
		plan:     !piece && ev.Type == domain.EvWaiting && j.Fanout != nil,
	}
}

// implied is what the Projector repeats for job j whose last event, of
// type lastType, it verifies (a writer may have died before doing it).
func implied(j *domain.Job, lastType string) followUpSet {
	return followUpSet{
		dispatch: commands.Dispatchable(j.State),
		plan:     commands.AwaitsPieces(j.State) && lastType == domain.EvWaiting && j.Fanout != nil,
		piece:    j.State.Terminal() && j.Spec.Parent != "",
	}
}

// RepeatAsync publishes again what job snap's last event, of type
// lastType, implies (implied), for the Projector: each is a no-op when it
// was done (message ids, schedules by subject, pieces by number).
func (s *Store) RepeatAsync(snap Snapshot, lastType string) []streams.Future {
	var futs []streams.Future
	do := implied(snap.Job, lastType)
	if do.dispatch {
		futs = append(futs, s.DispatchAsync(snap))
	}
	if do.plan {
		futs = append(futs, s.repeatPiece(s.planOf(snap.Job)))
	}
	if do.piece {
		futs = append(futs, s.repeatPiece(s.pieceOf(snap.Job)))
	}
	return futs
}

func (a followUpSet) count() int {
	n := 0
	for _, b := range []bool{a.dispatch, a.plan, a.piece} {
		if b {
			n++
		}
	}
	return n
}

// covers says whether a publishes everything b asks for.
func (a followUpSet) covers(b followUpSet) bool {
	return (a.dispatch || !b.dispatch) && (a.plan || !b.plan) && (a.piece || !b.piece)
}

// Dispatch makes a runnable snapshot claimable: a work item for a queued
// job, a schedule for a scheduled one. Anything else is left alone.
func (s *Store) Dispatch(ctx context.Context, snap Snapshot) error {
	if !commands.Dispatchable(snap.Job.State) {
		return nil
	}
	_, err := s.DispatchAsync(snap).Wait(ctx)
	return err
}

// dispatchWritten is DispatchAsync of a record this process just wrote:
// the work item is made of the record's bytes, not encoded again.
func (s *Store) dispatchWritten(v Version[domain.Job]) streams.Future {
	if v.enc != nil {
		return s.w.DispatchRecordAsync(v.Rec, v.Rev, v.enc)
	}
	return s.DispatchAsync(snapshot(v))
}

// DispatchAsync publishes the work item or the schedule of a queued or
// scheduled job (streams.Writer.DispatchAsync).
func (s *Store) DispatchAsync(snap Snapshot) streams.Future {
	return s.w.DispatchAsync(&domain.WorkItem{Rev: snap.Rev, Job: *snap.Job})
}

// PieceAsync publishes what became of child j on its parent's piece subject.
func (s *Store) PieceAsync(j *domain.Job) streams.Future { return s.PublishPiece(s.pieceOf(j)) }

// PlanAsync publishes that parent j waits for its pieces.
func (s *Store) PlanAsync(j *domain.Job) streams.Future { return s.PublishPiece(s.planOf(j)) }

// pieceOf is the piece event of child j, and its message id.
func (s *Store) pieceOf(j *domain.Job) (*domain.Event, string) {
	typ := commands.PieceOutcome(j.State)
	ev := &domain.Event{Type: typ, JobID: j.Spec.Parent, Time: j.FinishedAt, Piece: j.Spec.Piece,
		Actor: s.actor, Fields: map[string]any{"child": j.ID}, Prev: j.LastHash}
	if typ != domain.PcSucceeded && j.Error != nil {
		e := *j.Error
		e.Stack = ""
		ev.Error = &e
	}
	return ev, j.ID + "-piece"
}

// planOf is the piece event of parent j's plan, and its message id.
func (s *Store) planOf(j *domain.Job) (*domain.Event, string) {
	plan := j.Fanout.Plan
	ev := &domain.Event{Type: domain.PcPlanned, JobID: j.ID, Time: j.UpdatedAt, Actor: s.actor,
		Fields: map[string]any{"total": plan.Total}, Plan: &plan, Prev: j.LastHash}
	return ev, j.ID + "-plan-" + strconv.FormatUint(j.Seq, 10)
}

// PublishPiece publishes a piece event on its parent's piece subject,
// once per message id within the duplicate window (through the group
// commit under sync always).
func (s *Store) PublishPiece(ev *domain.Event, msgID string) streams.Future {
	return s.publishPiece(ev, msgID, false)
}

// repeatPiece publishes a piece event the Projector repeats, on its own,
// never through the group commit: a repeat is most often a duplicate, and
// a group holding a duplicate is refused whole by the server and sent
// again one append at a time, each with an fsync of its own.
func (s *Store) repeatPiece(ev *domain.Event, msgID string) streams.Future {
	return s.publishPiece(ev, msgID, true)
}

func (s *Store) publishPiece(ev *domain.Event, msgID string, alone bool) streams.Future {
	m, err := streams.EventMsg(streams.PieceSubject(ev.JobID), ev)
	switch {
	case err != nil:
		return streams.FailedFuture(err)
	case alone:
		return s.w.PublishAsync(m, jetstream.WithMsgID(msgID))
	}
	return s.w.PublishEventAsync(m, msgID)
}

// SendBatches publishes the work items of a fan-out of batches, item(0)
// to item(n-1), pipelined; their message ids (parent-b<piece>) make a
// repeat within the duplicate window a no-op. item's error ends it; an
// item of nil is not sent.
func (s *Store) SendBatches(ctx context.Context, n int, item func(i int) (*domain.BatchItem, error)) error {
	p := newPipeline(ctx, "send batch")
	for i := range n {
		it, err := item(i)
		if err != nil {
			return err
		}
		if it == nil {
			continue
		}
		data, err := streams.Marshal(it)
		if err != nil {
			return err
		}
		err = p.add(s.w.PublishAsync(&nats.Msg{Subject: streams.BatchSubject(it.Queue, it.Type, it.Parent), Data: data, Header: nats.Header{}},
			jetstream.WithMsgID(it.Parent+"-b"+strconv.Itoa(it.Piece))))
		if err != nil {
			return err
		}
	}
	return p.wait()
}

// pipeline waits for pipelined publishes, pipelineWindow at a time: a
// writer adds each one's future as it publishes, and waits at the end.
type pipeline struct {
	ctx  context.Context
	what string // what the publishes do, for an error
	futs []streams.Future
}

const pipelineWindow = 2048

func newPipeline(ctx context.Context, what string) *pipeline {
	return &pipeline{ctx: ctx, what: what, futs: make([]streams.Future, 0, pipelineWindow)}
}

// add keeps f, and waits for every future kept once the window is full.
func (p *pipeline) add(f streams.Future) error {
	p.futs = append(p.futs, f)
	if len(p.futs) == pipelineWindow {
		return p.wait()
	}
	return nil
}

// wait waits for every future kept: the first error ends it.
func (p *pipeline) wait() error {
	for _, fut := range p.futs {
		if _, err := fut.Wait(p.ctx); err != nil {
			return fmt.Errorf("%s: %w", p.what, err)
		}
	}
	p.futs = p.futs[:0]
	return nil
}

// ChildID is the id of piece n (1-based) of parent's fan-out of children:
// derived, so that a coordinator run again creates no duplicates, and so that
// a cascading cancel finds every child without an index.
func ChildID(ns, parent string, piece int) string {
	return domain.KeyedID(ns, "\x00child:"+parent+"/"+strconv.Itoa(piece))
}

// cascadeAfter cancels the descendants of a parent that ev ended without
// succeeding: before it returns with WaitForCascade, else in the
// background. A job that is not a fan-out parent may still have children
// linked to it by parent, unless Childless says it has none.
func (s *Store) cascadeAfter(ctx context.Context, next Snapshot, ev *domain.Event, opts []Option) {
	if !ev.To.Terminal() || next.Job == nil || !commands.ChildBlocked(next.Job) {
		return
	}
	if next.Job.Fanout == nil && has(opts, Childless) {
		return
	}
	reason := "parent job is " + string(ev.To)
	if has(opts, WaitForCascade) {
		if err := s.cascade(ctx, next.Job, reason); err != nil {
			s.Log.Warn("cancel the children of "+ev.JobID, "err", err)
		}
		return
	}
	s.cascadeAsync(next.Job, reason)
}

// ToCascade says which of jobs, which ended without succeeding, have
// children to cancel: a fan-out parent, or a job with piece events
// (children linked to it by parent, or made by an attempt that ended
// before it waited), which one request per 256 jobs tells. The others
// need no cascade.
func (s *Store) ToCascade(ctx context.Context, jobs []*domain.Job) ([]*domain.Job, error) {
	var plain []string
	for _, j := range jobs {
		if j.Fanout == nil {
			plain = append(plain, j.ID)
		}
	}
	linked, err := s.mayHaveChildren(ctx, plain)
	if err != nil {
		return nil, err
	}
	var out []*domain.Job
	for _, j := range jobs {
		if j.Fanout != nil || linked[j.ID] {
			out = append(out, j)
		}
	}
	return out, nil
}

// CascadeEnded repeats the cascade of j, which ended without succeeding:
// the Projector's, which acknowledges j's events only once this returned
// nil, so that a crash meanwhile (its own, or the writer's, whose cascade
// may run in the background) leaves the events, and the cascade, to it
// again. One that fails (not for ctx) is also handed to a background
// cascade of this process, which tries again for 30 minutes (the Projector
// lets events go after their last delivery), and its error is returned.
func (s *Store) CascadeEnded(ctx context.Context, j *domain.Job) error {
	reason := "parent job is " + string(j.State)
	if err := s.cascade(ctx, j, reason); err != nil {
		if ctx.Err() == nil { // not a Stop: the events' next delivery repeats it then
			s.cascadeAsync(j, reason)
		}
		return fmt.Errorf("cancel the children of %s: %w", j.ID, err)
	}
	return nil
}

// cascadeAsync cancels the descendants of a parent that ended without
// succeeding, in the background: the fan-in counter and the reaper are not
// held up by a parent with many children. A cascade already running in this
// process for the parent is not started twice; one that fails tries again
// until it succeeds or its 30 minutes are up (cancelling a cancelled child
// writes nothing). The Projector repeats the cascade (CascadeEnded), on
// its own, before it acknowledges the parent's event, so a crash meanwhile
// loses nothing.
func (s *Store) cascadeAsync(parent *domain.Job, reason string) {
	if !commands.ChildBlocked(parent) {
		return
	}
	if _, busy := s.cascading.LoadOrStore(parent.ID, struct{}{}); busy {
		return
	}
	go func() {
		defer s.cascading.Delete(parent.ID)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		for pause := time.Second; ; pause = min(2*pause, time.Minute) {
			err := s.cascade(ctx, parent, reason)
			if err == nil {
				return
			}
			s.Log.Warn("cancel the children of "+parent.ID+"; trying again", "err", err, "in", pause)
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
		}
	}()
}

// cascade cancels every non-terminal descendant of a parent that did not
// succeed: the children of its fan-out and those linked to it by parent,
// and through their own cancel, grandchildren. A parent of batches has its
// batches still in the queue purged (one subject per parent); the batches
// running meanwhile hear of the cancel, and a batch that escaped the purge
// (it was being redelivered) is skipped by the worker that fetches it,
// which checks its parent first.
func (s *Store) cascade(ctx context.Context, parent *domain.Job, reason string) error {
	if !commands.ChildBlocked(parent) {
		return nil
	}
	if parent.Fanout == nil {
		return s.cancelChildren(ctx, parent.Spec.Namespace, parent.ID, 0, reason)
	}
	plan := parent.Fanout.Plan
	if plan.Kind == domain.FanoutBatches {
		err := s.purgeBatches(ctx, plan.BatchQueue, plan.BatchType, parent.ID)
		// The workers running its batches hear of it now (a cancel was
		// broadcast already; a fan-out that failed was not).
		_ = s.nc.Publish(streams.CancelSubject, []byte(parent.ID))
		return errors.Join(err, s.cancelChildren(ctx, parent.Spec.Namespace, parent.ID, 0, reason))
	}
	return s.cancelChildren(ctx, parent.Spec.Namespace, parent.ID, plan.Total, reason)
}

// purgeBatches removes the batches of parent that no worker took yet.
func (s *Store) purgeBatches(ctx context.Context, queue, batchType, parent string) error {
	if err := s.purgeQueueSubject(ctx, queue, streams.BatchSubject(queue, batchType, parent)); err != nil {
		return fmt.Errorf("the batches of %s: %w", parent, err)
	}
	return nil
}

// purgeQueueSubject removes what a queue's streams hold on subject.
func (s *Store) purgeQueueSubject(ctx context.Context, queue, subject string) error {
	qss, err := streams.QueueStreams(ctx, s.js, queue)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("purge %s: %w", subject, err)
	}
	for _, stream := range qss.All() {
		if !streams.Captures(stream, subject) {
			continue
		}
		if err = stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("purge %s: %w", subject, err)
	}
	return nil
}

// CancelMadeChildren cancels the children a coordinator's attempt made
// when its job ended without waiting for them: it was cancelled while it
// made them, or making them failed for good. (A job that will run again
// keeps them: the next attempt finds the same children, their ids are
// derived.)
func (s *Store) CancelMadeChildren(ctx context.Context, j *domain.Job, children int) {
	if children == 0 || j == nil || !j.State.Terminal() || j.Fanout != nil {
		return
	}
	if err := s.cancelChildren(ctx, j.Spec.Namespace, j.ID, children, "parent job is "+string(j.State)); err != nil {
		s.Log.Warn("cancel the children of an ended coordinator", "job", j.ID, "err", err)
	}
}

// cancelChildren cancels children 1..total of parent's fan-out that exist
// and are not terminal (with no plan, total is what its attempts said they
// make: piece.making), and the children linked to it by parent that have
// not ended. Children whose outcome is in the parent's piece events
// already are skipped without a read each: a cascade repeated (by the
// Projector, after the writer's) costs one read of the parent's piece
// subject.
func (s *Store) cancelChildren(ctx context.Context, ns, parent string, total int, reason string) error {
	fam, err := s.readFamily(ctx, parent)
	if err != nil {
		return err
	}
	ended := fam.pieces
	linked := fam.live()
	// A coordinator that ended before it waited has no plan: the children
	// its attempts made are those they said they would make.
	total = max(total, fam.making)
	if total == 0 && len(linked) == 0 {
		return nil
	}
	var ids []string
	for n := 1; n <= total; n++ {
		if !ended.Ended(n) {
			ids = append(ids, ChildID(ns, parent, n))
		}
	}
	ids = append(ids, linked...)
	// Which of them may have children of their own: one request per few
	// hundred, rather than a read of each one's piece subject.
	parents, err := s.mayHaveChildren(ctx, ids)
	if err != nil {
		return err
	}
	next := make(chan string)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for w := 0; w < min(32, len(ids)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range next {
				var opts []Option
				if !parents[id] {
					opts = append(opts, Childless)
				}
				_, err := s.cancel(ctx, id, reason, opts...)
				crash("cascade:child") // one child cancelled, perhaps not the others
				if err != nil && !errors.Is(err, commands.ErrTerminal) && !errors.Is(err, commands.ErrNotFound) {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
feed:
	for _, id := range ids {
		select {
		case next <- id:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// ReadPieces folds a parent's piece events from the log into p, from the
// event after p.UpTo to the last one (or to upTo, if not 0), in order.
func (s *Store) ReadPieces(ctx context.Context, parent string, p *projections.Pieces, upTo uint64) error {
	return readPieces(ctx, s.nc, parent, p, upTo)
}

// readPieces is Store.ReadPieces on a connection.
func readPieces(ctx context.Context, nc *nats.Conn, parent string, p *projections.Pieces, upTo uint64) error {
	_, err := streams.ReadSubject(ctx, nc, streams.EventsStream, streams.PieceSubject(parent), p.UpTo+1,
		func(seq uint64, data []byte) error {
			if upTo > 0 && seq > upTo {
				return errPastUpTo
			}
			if ev, err := streams.DecodeEvent(data); err == nil {
				p.Fold(seq, ev)
			}
			return nil
		})
	if errors.Is(err, errPastUpTo) {
		err = nil
	}
	return err
}

// errPastUpTo ends a read of piece events at the sequence asked for.
var errPastUpTo = errors.New("past the last piece event asked for")

// CountPieces counts what became of a fan-out parent's pieces from its
// piece events in the log up to sequence upTo (0: all).
func CountPieces(ctx context.Context, nc *nats.Conn, parent string, upTo uint64) (domain.FanoutCounts, error) {
	p := projections.NewPieces()
	if err := readPieces(ctx, nc, parent, p, upTo); err != nil {
		return domain.FanoutCounts{}, err
	}
	return p.Counts, nil
}

// parentState is the state of job id as the log says it is, without its
// record decoded whole (a workflow's record holds its graph, and every
// step's claim asks): the state and event sequence it was last seen at
// (parentHeads; the first time, the record's head, streams.DecodeJobHead),
// moved by the transitions of the events past it, read by their heads (a
// writer's append is ahead of its record for a moment; a fan-in's counts
// are no transition). ok is false when they do not tell (no record, a
// purge, a thousand events past): Current then reads it whole.
func (s *Store) parentState(ctx context.Context, id string) (state domain.State, ok bool) {
	h, known := s.parents.get(id)
	if !known {
		e, err := s.jobs.kv.Get(ctx, id)
		if err != nil {
			return "", false
		}
		head, err := streams.DecodeJobHead(e.Value())
		if err != nil {
			return "", false
		}
		h = parentHead{subject: streams.JobSubject(head), state: head.State, seq: head.Seq}
	}
	// The events past the one seen: is there one? (An answer "none"
	// carries no message; the last event of a workflow that is making its
	// steps holds every step's spec.) Then the rest, in batches.
	seq, data, found, err := streams.NextMsg(ctx, s.nc, streams.EventsStream, h.subject, h.seq+1)
	switch {
	case err != nil:
		return "", false
	case !found:
		s.parents.put(id, h)
		return h.state, true
	}
	var ev domain.Event
	n := 0
	fold := func(seq uint64, data []byte) error {
		if err := streams.DecodeEventHead(data, &ev); err != nil {
			return err
		}
		if ev.Type == domain.EvPurged {
			return errPurged
		}
		if ev.To != "" {
			h.state = ev.To
		}
		h.seq, n = seq, n+1
		return nil
	}
	if fold(seq, data) != nil {
		return "", false
	}
	err = streams.ReadRange(ctx, s.nc, streams.EventsStream, h.subject, h.seq+1, math.MaxUint64, maxParentEvents, fold)
	if err != nil || n > maxParentEvents {
		return "", false
	}
	s.parents.put(id, h)
	return h.state, true
}

var errPurged = errors.New("purged")

// maxParentEvents is how many events past the one seen parentState reads:
// more, and the parent is read whole.
const maxParentEvents = 1000

// parentHead is a parent job as parentState last saw it.
type parentHead struct {
	subject string
	state   domain.State
	seq     uint64 // the last event of the subject folded into state
}

// parentHeads are the parents asked about lately (ParentEnded): at most
// maxParentHeads, forgotten all at once past that.
type parentHeads struct {
	mu sync.Mutex
	m  map[string]parentHead
}

const maxParentHeads = 4096

func (p *parentHeads) get(id string) (parentHead, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.m[id]
	return h, ok
}

// put keeps h unless a later look is kept already.
func (p *parentHeads) put(id string, h parentHead) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if old, ok := p.m[id]; ok && old.seq > h.seq {
		return
	}
	if p.m == nil || len(p.m) >= maxParentHeads {
		p.m = make(map[string]parentHead)
	}
	p.m[id] = h
}

// ErrParentGone: a child's parent ended (or is gone), so the child must
// not run.
var ErrParentGone = errors.New("parent job is no longer running")

// ParentEnded reports whether j has a parent that keeps it from running:
// one that ended without succeeding (commands.ChildBlocked), or is gone.
// Read after the child's own start (or claim) is in the log, it sees every
// parent cancelled before that: a child whose parent is cancelled never
// runs. Children that ask at once share a read begun after they asked
// (parentReads).
func (s *Store) ParentEnded(ctx context.Context, j *domain.Job) bool {
	if j.Spec.Parent == "" {
		return false
	}
	st, ok := s.parentRd.do(ctx, j.Spec.Parent, func() (domain.State, bool) { return s.parentState(ctx, j.Spec.Parent) })
	if ok {
		return commands.ChildBlocked(&domain.Job{State: st})
	}
	p, err := s.Current(ctx, j.Spec.Parent)
	if err != nil {
		return errors.Is(err, commands.ErrNotFound) // a child without a parent runs nowhere
	}
	// The next child's check starts from here, not from where this one
	// gave up.
	s.parents.put(p.Job.ID, parentHead{subject: streams.JobSubject(p.Job), state: p.Job.State, seq: p.Job.Seq})
	return commands.ChildBlocked(p.Job)
}

// followUps are the jobs whose writer, in this process, saw what an event
// implies acknowledged: job id -> the events' sequences (its last few),
// and whether the whole of each was seen done. The Projector repeats what
// a writer may have died before doing; for these it knows the writer did
// not:
//   - followed up: the writer published the event's follow-ups (Kind.After:
//     its work item, its piece event, its plan) and saw them acknowledged;
//     the Projector skips the publish (which the stream would have dropped
//     as a duplicate, at the cost of a round trip each: a backlog of queued
//     jobs older than the Projector's lag used to be dispatched twice);
//   - settled: besides, the job's record was written at that event and
//     acknowledged, and the follow-ups published cover all that the
//     Projector would repeat for the job as it is then (implied), and the
//     job has no children to cancel: the Projector has nothing to read or
//     do for it (a plain job that ended: most of the log).
//
// What this process did not see, another process's writes and everything
// before a restart, is verified as before; so is everything when a
// connection comes back (a server that restarted may have lost its last
// acknowledged writes), and an event whose writer published less than the
// job implies (a reprioritized queued job: the Projector dispatches it). At
// most maxFollowUps, forgotten all at once past that (each forgotten one is
// verified: safe).
//
// The Stores of one process share them (a client's submits, a worker's
// outcomes and the engine's Projector each have a Store of their own), per
// event log: the log's stream, by the time it was created.
type followUps struct {
	mu  sync.Mutex
	m   map[string]jobFollowUps // by value: no allocation of its own per job
	gen atomic.Uint64           // raised by every clear: a write's mark from before one notes nothing
}

// jobFollowUps are the last events of one job seen done, oldest first. The
// Projector reads the log some time behind its writers, so by the time it
// reads one of a job's events the job has often moved on (a step is
// submitted, admitted, started and ended within that time); each event is
// kept, so that a batch of the Projector's ending at an earlier one still
// finds it.
type jobFollowUps struct {
	n int
	e [maxJobFollowUps]followUp
}

type followUp struct {
	seq     uint64
	at      int64 // when the writer saw it done (UnixNano)
	settled bool
	// recordOnly: all the event implies was seen done but its record,
	// which its writer writes later (a local claim's, Write.DeferRecord):
	// settled by a later note of the job that is, whose record folds it in.
	recordOnly bool
}

const (
	maxFollowUps = 1 << 17
	// maxJobFollowUps: the events of one job kept, the latest (a job's
	// life is four to six events).
	maxJobFollowUps = 4
)

// logFollowUps are the follow-ups of each event log this process wrote to.
var logFollowUps sync.Map // creation time of the events stream (UnixNano) -> *followUps

func followUpsOf(evs jetstream.Stream) *followUps {
	f, _ := logFollowUps.LoadOrStore(evs.CachedInfo().Created.UnixNano(), &followUps{})
	return f.(*followUps)
}

// note notes job id's event at seq, unless the follow-ups were cleared
// since mark (mark: their generation when the write started). An event
// older than the job's last noted one is not noted; the job's last one
// noted again is settled, if settled. A settled event settles the job's
// earlier ones noted recordOnly: its record, written at seq, is the fold
// of every event before it (an append expects the job's last event, so
// its writer's record had them all).
func (f *followUps) note(id string, seq uint64, settled bool, mark uint64) {
	f.add(id, followUp{seq: seq, settled: settled}, mark)
}

// noteRecordOnly notes job id's event at seq as done but for its record,
// which its writer writes later (Store.WriteRecord), or a later write of
// the job's record folds in.
func (f *followUps) noteRecordOnly(id string, seq uint64, mark uint64) {
	f.add(id, followUp{seq: seq, recordOnly: true}, mark)
}

// recorded notes that job id's record was written at its event at seq
// (Store.WriteRecord): its events up to seq noted recordOnly are settled.
// Nothing else is noted.
func (f *followUps) recorded(id string, seq uint64, mark uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen.Load() != mark {
		return
	}
	j, ok := f.m[id]
	if !ok {
		return
	}
	if j.settle(seq, time.Now().UnixNano()) {
		f.m[id] = j
	}
}

// settle settles the events up to seq noted recordOnly, at (UnixNano),
// and reports whether there were any.
func (j *jobFollowUps) settle(seq uint64, at int64) bool {
	found := false
	for k := 0; k < j.n; k++ {
		if e := &j.e[k]; e.recordOnly && e.seq <= seq {
			e.settled, e.recordOnly, e.at = true, false, at
			found = true
		}
	}
	return found
}

func (f *followUps) add(id string, u followUp, mark uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gen.Load() != mark {
		return
	}
	if f.m == nil || len(f.m) >= maxFollowUps {
		f.m = make(map[string]jobFollowUps, 1024)
	}
	u.at = time.Now().UnixNano()
	j := f.m[id]
	if u.settled {
		j.settle(u.seq, u.at)
	}
	switch {
	case j.n > 0 && u.seq == j.e[j.n-1].seq:
		// Noted again: settled above, if it is now.
	case j.n > 0 && u.seq < j.e[j.n-1].seq:
		return
	default:
		if j.n == maxJobFollowUps {
			copy(j.e[:], j.e[1:])
			j.n--
		}
		j.e[j.n] = u
		j.n++
	}
	f.m[id] = j
}

// clear forgets every job, and every write under way.
func (f *followUps) clear() {
	f.mu.Lock()
	f.m = nil
	f.gen.Add(1)
	f.mu.Unlock()
}

// take reports what was seen done of job id's event at seq, and forgets
// what it knew of the job up to seq.
func (f *followUps) take(id string, seq uint64) (FollowUp, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.m[id]
	if !ok {
		return NotSeen, time.Time{}
	}
	var got followUp
	k := 0 // the first kept
	for ; k < j.n && j.e[k].seq <= seq; k++ {
		if j.e[k].seq == seq {
			got = j.e[k]
		}
	}
	if k == j.n {
		delete(f.m, id)
	} else if k > 0 {
		j.n = copy(j.e[:], j.e[k:j.n])
		f.m[id] = j
	}
	switch {
	case got.seq == 0:
		return NotSeen, time.Time{}
	case got.settled:
		return Settled, time.Unix(0, got.at)
	default:
		return FollowedUp, time.Unix(0, got.at)
	}
}

// FollowUp is what a writer in this process saw done of a job's event.
type FollowUp int

const (
	NotSeen    FollowUp = iota // the Projector verifies it
	FollowedUp                 // its follow-ups were published: the Projector still checks its record
	Settled                    // its record and all it implies were written: nothing to verify
)

// afterDone notes what a writer saw done of a job's event (Kind.AfterDone),
// unless a connection of this process was lost or came back since the
// write started (mark: FollowMark then): a server that restarted may have
// lost the last writes it acknowledged, the record's among them.
func (s *Store) afterDone(next Version[domain.Job], ev *domain.Event, published int, projected bool, mark uint64) {
	j := next.Rec
	if j == nil {
		return
	}
	did := afterOf(j, ev)
	// A job that ended without succeeding is never settled: the Projector
	// repeats its cascade (it may have children, linked or pieces) before
	// it acknowledges the event.
	whole := j.Seq == ev.Seq && !commands.ChildBlocked(j) && published == did.count() && did.covers(implied(j, ev.Type))
	switch {
	case whole && !projected:
		// Its record is written later (a deferred one), or by a later
		// write of the job's record: settled then.
		s.followedUp.noteRecordOnly(j.ID, ev.Seq, mark)
	case published > 0 || whole:
		s.followedUp.note(j.ID, ev.Seq, whole, mark)
	}
}

// FollowMark is the follow-ups' generation, raised whenever a connection
// of this process is lost or comes back (which forgets them): a mark for
// Steady.
func (s *Store) FollowMark() uint64 { return s.followedUp.gen.Load() }

// Steady says whether this Store's connection is up and no connection of
// the process was lost or came back since mark (FollowMark) was taken.
func (s *Store) Steady(mark uint64) bool { return s.nc.IsConnected() && s.FollowMark() == mark }

// Seen reports what a writer in this process saw done of job id's event
// at seq (followUps), and when; it is then forgotten (the Projector asks
// once per event it verifies).
func (s *Store) Seen(id string, seq uint64) (FollowUp, time.Time) { return s.followedUp.take(id, seq) }

// DurableAfter is how long after the server acknowledged a write to the
// jobs bucket or a queue stream it may still be lost to a power loss: under
// sync always on a single server they persist asynchronously
// (streams.Topology.AsyncDerived), fsynced every sync interval; else 0.
// The Projector acknowledges an event only once what it vouches for (a
// writer's follow-ups, its own repairs) is that old.
func (s *Store) DurableAfter() time.Duration {
	if s.topo.AsyncDerived() {
		return streams.AsyncDurableAfter
	}
	return 0
}
