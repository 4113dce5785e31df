package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Purge purges terminal job id (commands.Purge): job.purged is appended to
// its subject, then its record, files and queue leftovers are deleted. A
// parent's children are purged first, with it, whatever their age; a parent
// with a child that is not terminal is refused (ErrInvalidTransition). It
// returns how many jobs it purged (the job and its descendants).
//
// A purge is not a transition: it goes around Store.Apply, as nothing of
// what Apply does after an append (dispatch, piece events, cascades) applies
// to a job that ended long ago. A crash after the append leaves the record
// in place; Load (and so the Projector, which sees the event) deletes it,
// and the FileSweeper deletes the files of a job that no longer exists.
func (s *Store) Purge(ctx context.Context, id, reason string) (int, error) {
	fs, err := s.Files(ctx)
	if err != nil {
		return 0, err
	}
	return s.purge(ctx, fs, id, reason)
}

func (s *Store) purge(ctx context.Context, fs *files.Store, id, reason string) (int, error) {
	cur, err := s.Load(ctx, id)
	if err != nil {
		return 0, err
	}
	n := 0
	for attempt := 0; ; attempt++ {
		m, children, err := s.purgeChildren(ctx, fs, cur.Job, reason)
		n += m
		if err != nil {
			return n, err
		}
		ev, err := commands.Purge(cur.Job, children, reason, s.ActorOf(ctx), time.Now().UTC())
		if err != nil {
			return n, err
		}
		subject := streams.JobSubject(cur.Job)
		seq, err := s.W.AppendAsync(subject, ev, cur.Job.Seq).Wait(ctx)
		if streams.IsConflict(err) && attempt < maxDecisions {
			if cur, err = s.Load(ctx, id); err != nil {
				return n, err
			}
			continue
		}
		if err != nil {
			return n, fmt.Errorf("purge job %s: append: %w", id, err)
		}
		ev.Seq, ev.Subject = seq, subject
		crash("purge:appended")
		if err := s.forget(ctx, fs, cur, ev); err != nil {
			// Purged in the log: Load and the FileSweeper finish it.
			s.Log.Warn("after job.purged", "job", id, "err", err)
		}
		return n + 1, nil
	}
}

// purgeChildren purges the children of parent j that exist, those of its
// fan-out and those linked to it by parent, and returns the states of
// those it could not purge (not terminal).
func (s *Store) purgeChildren(ctx context.Context, fs *files.Store, j *domain.Job, reason string) (int, []domain.State, error) {
	n, left, err := s.purgeLinked(ctx, func(id string) (int, error) { return s.purge(ctx, fs, id, reason) }, j)
	if err != nil {
		return n, nil, err
	}
	if j.Fanout == nil || j.Fanout.Plan.Kind != domain.FanoutChildren {
		return n, left, nil
	}
	for piece := 1; piece <= j.Fanout.Plan.Total; piece++ {
		id := ChildID(j.Spec.Namespace, j.ID, piece)
		snap, err := s.Get(ctx, id)
		if errors.Is(err, commands.ErrNotFound) {
			continue // never made, or purged
		}
		if err != nil {
			return n, nil, err
		}
		if !snap.Job.State.Terminal() {
			left = append(left, snap.Job.State)
			continue
		}
		m, err := s.purge(ctx, fs, id, reason)
		n += m
		switch {
		case errors.Is(err, commands.ErrNotFound):
		case errors.Is(err, commands.ErrInvalidTransition):
			left = append(left, domain.StateRunning) // a grandchild still runs
		case err != nil:
			return n, nil, err
		}
	}
	return n, left, nil
}

// forget deletes what a purged job leaves: its record (revision-checked:
// one that moved is deleted by Load, which finds job.purged last), its
// files, its schedule and a parent's batches that are still queued.
func (s *Store) forget(ctx context.Context, fs *files.Store, cur Snapshot, ev *domain.Event) error {
	j := cur.Job
	var errs []error
	err := s.KV.Delete(ctx, streams.KVKey(j.ID), jetstream.LastRevision(cur.Rev))
	if streams.IsConflict(err) {
		_, err = s.Load(ctx, j.ID)
		if errors.Is(err, commands.ErrGone) {
			err = nil
		}
	}
	errs = append(errs, err)
	names := make([]string, len(j.Spec.Files))
	for i, f := range j.Spec.Files {
		names[i] = f.Name
	}
	if _, err := fs.DeleteJob(ctx, j.ID, names); err != nil {
		errs = append(errs, err)
	}
	if !j.RunAt.IsZero() { // it was scheduled once: a schedule may be left
		errs = append(errs, s.purgeQueueSubject(ctx, j.Spec.Queue, streams.SchedSubject(j.Spec.Queue, j.ID)))
	}
	if p := j.Fanout; p != nil && p.Plan.Kind == domain.FanoutBatches {
		errs = append(errs, s.purgeBatches(ctx, p.Plan.BatchQueue, p.Plan.BatchType, j.ID))
	}
	return errors.Join(errs...)
}

func (s *Store) purgeQueueSubject(ctx context.Context, queue, subject string) error {
	stream, err := s.JS.Stream(ctx, streams.QueueStream(queue))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err == nil {
		err = stream.Purge(ctx, jetstream.WithPurgeSubject(subject))
	}
	if err != nil {
		return fmt.Errorf("purge %s: %w", subject, err)
	}
	return nil
}

// purged is Load's check of a job's last event m: if it is job.purged, any
// record left (a purge that crashed before deleting it) is deleted, and a
// *commands.GoneError returned. A record that moved meanwhile is a conflict.
func (s *Store) purged(ctx context.Context, m *jetstream.RawStreamMsg, snap Snapshot) error {
	if m == nil {
		return nil
	}
	ev, err := streams.DecodeEvent(m.Data)
	if err != nil || ev.Type != domain.EvPurged {
		return nil // an undecodable event is foldFrom's to report
	}
	if snap.Job != nil {
		if err := s.KV.Delete(ctx, streams.KVKey(ev.JobID), jetstream.LastRevision(snap.Rev)); err != nil {
			return fmt.Errorf("delete the record of purged job %s: %w", ev.JobID, err)
		}
		s.Repairs.Add(1)
		s.Log.Info("record of a purged job deleted", "job", ev.JobID)
	}
	return &commands.GoneError{JobID: ev.JobID, At: ev.Time, Reason: ev.Message}
}

// lastMsg is the last event on subject, nil if none.
func (s *Store) lastMsg(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := s.Events.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last event on %s: %w", subject, err)
	}
	return m, nil
}
