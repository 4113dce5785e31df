package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// ChildID is the id of piece n (1-based) of parent's fan-out of children:
// derived, so that a coordinator run again creates no duplicates, and so that
// a cascading cancel finds every child without an index.
func ChildID(ns, parent string, piece int) string {
	return domain.KeyedID(ns, "\x00child:"+parent+"/"+strconv.Itoa(piece))
}

// afterApply decides nothing: it publishes what a transition implies, in
// one pipelined round: the work item (or the schedule) of a job it made
// runnable, and the piece event of a fan-out: a child that ended, or a
// parent that started waiting. A crash before it is repaired by the
// Projector, which publishes them again (message ids make that a no-op).
func (s *Store) afterApply(ctx context.Context, next Snapshot, ev *domain.Event) error {
	j := next.Job
	var futs [2]streams.Future
	n := 0
	if ev.To == domain.StateQueued || ev.To == domain.StateScheduled {
		futs[n] = s.dispatchAsync(next)
		n++
	}
	switch {
	case ev.To.Terminal() && j.Spec.Parent != "":
		futs[n] = s.pieceAsync(j)
		n++
	case ev.Type == domain.EvWaiting:
		futs[n] = s.planAsync(j)
		n++
	}
	var errs []error
	for _, f := range futs[:n] {
		if _, err := f.Wait(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pieceAsync publishes what became of child j on its parent's piece subject.
func (s *Store) pieceAsync(j *domain.Job) streams.Future {
	typ := domain.PcSucceeded
	switch j.State {
	case domain.StateFailed:
		typ = domain.PcFailed
	case domain.StateCancelled:
		typ = domain.PcCancelled
	}
	ev := &domain.Event{Type: typ, JobID: j.Spec.Parent, Time: j.FinishedAt, Piece: j.Spec.Piece,
		Actor: s.Actor, Fields: map[string]any{"child": j.ID}}
	if j.State != domain.StateSucceeded && j.Error != nil {
		e := *j.Error
		e.Stack = ""
		ev.Error = &e
	}
	return s.publishPiece(ev, j.ID+"-piece")
}

// planAsync publishes that parent j waits for its pieces.
func (s *Store) planAsync(j *domain.Job) streams.Future {
	plan := j.Fanout.Plan
	ev := &domain.Event{Type: domain.PcPlanned, JobID: j.ID, Time: j.UpdatedAt, Actor: s.Actor,
		Fields: map[string]any{"total": plan.Total}, Plan: &plan}
	return s.publishPiece(ev, j.ID+"-plan-"+strconv.FormatUint(j.Seq, 10))
}

func (s *Store) publishPiece(ev *domain.Event, msgID string) streams.Future {
	data, err := streams.EncodeEvent(ev)
	if err != nil {
		return streams.FailedFuture(err)
	}
	return s.W.PublishAsync(&nats.Msg{Subject: streams.PieceSubject(ev.JobID), Data: data, Header: nats.Header{}},
		jetstream.WithMsgID(msgID))
}

// cascades reports whether j is a fan-out parent that ended without
// succeeding (commands.ChildBlocked): its unfinished pieces, and the
// children linked to it by parent, must not run.
func cascades(j *domain.Job) bool {
	return j.Fanout != nil && commands.ChildBlocked(j)
}

// CascadeAsync cancels the descendants of a parent that ended without
// succeeding, in the background: the fan-in counter and the reaper are not
// held up by a parent with many children. A cascade already running in this
// process for the parent is not started twice (the Projector's repeat of a
// cascade that the writer started in this same process is therefore one),
// so a cascade that fails tries again until it succeeds or its 30 minutes
// are up (cancelling a cancelled child writes nothing).
func (s *Store) CascadeAsync(parent *domain.Job, reason string) {
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
		_ = s.NC.Publish(streams.CancelSubject, []byte(parent.ID))
		return errors.Join(err, s.cancelChildren(ctx, parent.Spec.Namespace, parent.ID, 0, reason))
	}
	return s.cancelChildren(ctx, parent.Spec.Namespace, parent.ID, plan.Total, reason)
}

// purgeBatches removes the batches of parent that no worker took yet.
func (s *Store) purgeBatches(ctx context.Context, queue, batchType, parent string) error {
	stream, err := s.JS.Stream(ctx, streams.QueueStream(queue))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("purge the batches of %s: %w", parent, err)
	}
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(streams.BatchSubject(queue, batchType, parent))); err != nil {
		return fmt.Errorf("purge the batches of %s: %w", parent, err)
	}
	return nil
}

// cancelChildren cancels children 1..total of parent's fan-out that exist
// and are not terminal, and the children linked to it by parent that have
// not ended. Children whose outcome is in the parent's piece events
// already are skipped without a read each: a cascade repeated (by the
// Projector, after the writer's) costs one read of the parent's piece
// subject.
func (s *Store) cancelChildren(ctx context.Context, ns, parent string, total int, reason string) error {
	fam, err := readFamily(ctx, s.NC, parent)
	if err != nil {
		return err
	}
	ended := fam.pieces
	linked := fam.live()
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
				_, err := s.cancel(ctx, id, reason, parents[id])
				if err != nil && !errors.Is(err, commands.ErrTerminal) && !errors.Is(err, commands.ErrNotFound) {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, id := range ids {
		next <- id
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

// parentOf caches whether parents are terminal, for batch workers, which
// check it before every batch: a terminal parent stays terminal, and a
// running one is read again after a second.
type parentCache struct {
	store   *Store
	mu      sync.Mutex
	entries map[string]parentEntry
}

type parentEntry struct {
	terminal bool
	at       time.Time
}

// forget drops what the cache knows of parent id: it was just cancelled.
func (c *parentCache) forget(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.mu.Unlock()
}

func (c *parentCache) terminal(ctx context.Context, id string) bool {
	c.mu.Lock()
	e, ok := c.entries[id]
	c.mu.Unlock()
	if ok && (e.terminal || time.Since(e.at) < time.Second) {
		return e.terminal
	}
	snap, err := c.store.Get(ctx, id)
	t := err == nil && snap.Job.State.Terminal() || errors.Is(err, commands.ErrNotFound)
	c.mu.Lock()
	if c.entries == nil || len(c.entries) > 10000 {
		c.entries = map[string]parentEntry{}
	}
	c.entries[id] = parentEntry{terminal: t, at: time.Now()}
	c.mu.Unlock()
	return t
}
