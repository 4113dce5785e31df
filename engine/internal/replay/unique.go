package replay

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// uniqueJob is a unique job as verifyUnique sees it: its record, the
// sequence of its job.submitted, and of the event that ended its hold by
// its state (0: none yet).
type uniqueJob struct {
	job              *domain.Job
	created, release uint64
}

// verifyUnique checks from the log that no two jobs of one unique key held
// it at once: every unique job (Spec.Unique) was created after the job of
// its key created before it had let the key go, by its state (the event
// that moved it out of its scope, or its purge, is before the new job's
// job.submitted in the log) or by its window (the new job's submit time
// is at or after the end of the earlier one's window: the time the submit
// judged it by). It reads the events of every unique job; it returns a
// difference per job created while another held its key, and how many
// unique jobs it checked.
func verifyUnique(ctx context.Context, js jetstream.JetStream, log map[string]*domain.Job) ([]projections.Diff, int, error) {
	keys := map[string][]*uniqueJob{}
	n := 0
	for _, j := range log {
		u := j.Spec.Unique
		if u == nil {
			continue
		}
		uj := &uniqueJob{job: j}
		_, err := streams.ReadSubject(ctx, js.Conn(), streams.EventsStream, streams.JobSubject(j), 1, func(seq uint64, data []byte) error {
			ev, err := streams.DecodeEvent(data)
			if err != nil {
				return fmt.Errorf("event %d: %w", seq, err)
			}
			switch {
			case ev.Type == domain.EvSubmitted:
				uj.created = seq
			case uj.release == 0 && commands.UniqueReleasedBy(j, ev):
				uj.release = seq
			}
			return nil
		})
		if err != nil {
			return nil, 0, fmt.Errorf("unique job %s: %w", j.ID, err)
		}
		if uj.created == 0 {
			continue // its first event aged out of the log
		}
		key := j.Spec.Namespace + "\x00" + u.Key
		keys[key] = append(keys[key], uj)
		n++
	}
	var diffs []projections.Diff
	for _, jobs := range keys {
		sort.Slice(jobs, func(a, b int) bool { return jobs[a].created < jobs[b].created })
		for i := 1; i < len(jobs); i++ {
			prev, next := jobs[i-1], jobs[i]
			byState := prev.release != 0 && prev.release < next.created
			end := commands.UniqueUntil(prev.job)
			byWindow := !end.IsZero() && !next.job.CreatedAt.Before(end)
			if !byState && !byWindow {
				diffs = append(diffs, projections.Diff{ID: next.job.ID, Reason: fmt.Sprintf(
					"unique job created at event %d (%s) while job %s held its key %q (created at event %d, released %s)",
					next.created, next.job.CreatedAt.UTC().Format(time.RFC3339Nano), prev.job.ID, prev.job.Spec.Unique.Key,
					prev.created, releasedAt(prev))})
			}
		}
	}
	return diffs, n, nil
}

func releasedAt(j *uniqueJob) string {
	if j.release == 0 {
		return "never"
	}
	return fmt.Sprintf("at event %d", j.release)
}
