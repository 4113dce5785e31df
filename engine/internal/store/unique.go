package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// submitUnique submits a unique job (req.Unique()): the job that holds its
// key if one does, else a new one.
//
// A key's holder is the job its subject's last unique.claimed names
// (streams.UniqueSubject). If that job still holds the key
// (commands.UniqueHolds: in its window and its scope, not purged), the
// submit gets it, and job.duplicate is appended to its subject. Otherwise
// the new job's id is derived from the key and the sequence of that last
// claim (domain.UniqueID): every submit that finds the key free at the
// same claim derives the same id, and the job's first event must be new
// on every subject, so exactly one of them creates it and the others get
// it. Its creator then claims the key for it, expecting the claim it was
// derived from to be the subject's last: a creator that died before its
// claim is made good by the next submit of the key, which derives the
// same id, finds the job and claims the key for it (or, if it no longer
// holds, claims and looks again).
func (s *Store) submitUnique(ctx context.Context, req *commands.SubmitRequest, actor string, now time.Time) Submitted {
	spec, err := req.Spec(now)
	if err != nil {
		return Submitted{Err: err}
	}
	ns, key := spec.Namespace, spec.Unique.Key
	subject := streams.UniqueSubject(ns, key)
	for try := 0; try < maxDecisions; try++ {
		var after uint64
		var prev []byte // the last claim's hash: the next claim chains to it
		m, err := s.lastMsg(ctx, subject)
		if err != nil {
			return Submitted{Err: err}
		}
		if m != nil {
			after, prev = m.Sequence, streams.StoredHash(m.Header)
			claim, err := streams.DecodeEvent(m.Data)
			if err != nil {
				return Submitted{Err: fmt.Errorf("unique key claim %d: %w", m.Sequence, err)}
			}
			holder, held, err := s.uniqueHolder(ctx, claim.JobID, key, now)
			if err != nil {
				return Submitted{Err: err}
			}
			if held {
				return s.duplicate(ctx, holder, actor, now)
			}
		}
		r := *req
		r.ID = domain.UniqueID(ns, key, after)
		r.UniqueKey, r.UniqueFields = "", nil // the key is resolved: r.ID is derived from it
		r.UniqueFor, r.UniqueWhile = nil, ""
		w, err := s.submission(ctx, &r, actor, now)
		if err != nil {
			return Submitted{Err: err}
		}
		w.Ev.Spec.Unique = spec.Unique
		spans := traceSubmits(ctx, []*Write[domain.Job]{w})
		s.jobs.Write(ctx, "submit", w)
		var out Submitted
		switch {
		case w.Lost:
			// The id derived at this claim names a job already: its
			// creator won, or died before its claim.
			holder, held, err := s.uniqueHolder(ctx, w.Ev.JobID, key, now)
			if err != nil {
				out.Err = err
				break
			}
			if err := s.claimUnique(ctx, subject, w.Ev.JobID, key, after, prev, now); err != nil {
				out.Err = err
				break
			}
			if !held {
				endSubmits(spans, []Submitted{out})
				continue // it no longer holds: look again at the claim just made
			}
			out = s.duplicate(ctx, holder, actor, now)
		case !w.Appended():
			out.Err = w.Err
		default:
			if w.Err == nil {
				out = Submitted{Snapshot: snapshot(w.Next), Created: true}
			} else {
				out.Err = w.Err // in the log, not projected: the job stands
			}
			if err := s.claimUnique(ctx, subject, w.Ev.JobID, key, after, prev, now); err != nil && out.Err == nil {
				out.Err = err
			}
		}
		endSubmits(spans, []Submitted{out})
		return out
	}
	return Submitted{Err: fmt.Errorf("submit of unique key %q: its holder changed %d times while it looked: %w", key, maxDecisions, commands.ErrConflict)}
}

// maxUniqueSubmits bounds the unique submits of one batch in flight at
// once.
const maxUniqueSubmits = 32

// submitUniques starts the unique submits among reqs (SubmitRequest.Unique),
// at most maxUniqueSubmits at once, each writing its outcome to out; the
// function it returns waits for them. Submits of one key in a batch race
// as any others do: one creates the job, the others get it. A batch
// without unique submits starts nothing.
func (s *Store) submitUniques(ctx context.Context, reqs []*commands.SubmitRequest, out []Submitted, actor string, now time.Time) func() {
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxUniqueSubmits)
	for i, req := range reqs {
		if !req.Unique() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = s.submitUnique(ctx, req, actor, now)
		}()
	}
	return wg.Wait
}

// uniqueHolder reads job id and reports whether it holds key at now. A
// job that is gone (purged) or not there holds nothing.
func (s *Store) uniqueHolder(ctx context.Context, id, key string, now time.Time) (Snapshot, bool, error) {
	cur, err := s.Current(ctx, id)
	switch {
	case errors.Is(err, commands.ErrGone), errors.Is(err, commands.ErrNotFound):
		return Snapshot{}, false, nil
	case err != nil:
		return Snapshot{}, false, err
	}
	return cur, commands.UniqueHolds(cur.Job, key, now), nil
}

// claimUnique appends the claim of key for job id to its subject, on the
// condition that its last event is still the one at after (0: none),
// chained to it (prev, its hash). A
// lost race is no failure: every claim at after names the same job (the
// one derived from it), and a later one came after it.
func (s *Store) claimUnique(ctx context.Context, subject, id, key string, after uint64, prev []byte, now time.Time) error {
	ev := commands.UniqueClaim(id, key, now)
	ev.Prev = prev
	_, err := s.w.AppendAsync(subject, ev, after).Wait(ctx)
	if err != nil && !streams.IsConflict(err) {
		return fmt.Errorf("claim unique key %q for job %s: %w", key, id, err)
	}
	crash("unique:claimed")
	return nil
}

// duplicate answers a submit of a unique key with holder, the job that
// holds it: job.duplicate is appended to its subject. The append expects
// nothing (any number of duplicates may come at once) and changes no
// state; the record takes it at its next change, or from the Projector.
// Writers that decided on the record before it lose their race and decide
// again, as after any event.
func (s *Store) duplicate(ctx context.Context, holder Snapshot, actor string, now time.Time) Submitted {
	ev := commands.Duplicate(holder.Job, actor, now)
	s.stamp(ctx, ev)
	// Out of the job's chain, as a piece event is (docs/audit.md): its
	// prev names the event it follows as the record knows it, and the
	// record's last hash stays that event's, so the chain's next event
	// links past it.
	ev.Prev = holder.Job.LastHash
	m, err := streams.EventMsg(streams.JobSubject(holder.Job), ev)
	if err == nil {
		_, err = s.w.Publish(ctx, m)
	}
	if err != nil {
		// The submit's answer stands: the job holds the key.
		s.Log.Warn("job.duplicate not written", "job", holder.Job.ID, "err", err)
	}
	return Submitted{Snapshot: holder}
}
