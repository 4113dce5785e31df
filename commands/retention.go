package commands

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// DefaultRetention is how long a terminal job is kept before it is purged,
// unless its namespace or the engine sets otherwise.
const DefaultRetention = 7 * 24 * time.Hour

// ErrGone: the job existed and was purged by retention. A GoneError also
// matches ErrNotFound, so that code that drops what no longer exists drops
// a purged job too.
var ErrGone = errors.New("gone")

// GoneError is a job that retention purged: when, and why. The log keeps
// its job.purged event after its record is deleted.
type GoneError struct {
	JobID string
	// Namespace is the purged job's ("" if its event's subject did not
	// say): a principal that does not see it is told the job does not
	// exist (Unseen), as for any job of another namespace.
	Namespace string
	At        time.Time
	Reason    string
}

func (e *GoneError) Error() string {
	return fmt.Sprintf("job %s was purged at %s (%s)", e.JobID, e.At.UTC().Format(time.RFC3339), e.Reason)
}

// Is makes errors.Is(err, ErrGone) and errors.Is(err, ErrNotFound) hold.
func (e *GoneError) Is(target error) bool { return target == ErrGone || target == ErrNotFound }

// DefaultPurgeReason is the reason of one job's purge asked for without
// one (POST /jobs/{id}/purge, purge_job).
const DefaultPurgeReason = "purged on request"

// PurgeError is a refused purge: the job is not finished, or a child of it
// is not.
type PurgeError struct {
	JobID  string
	Reason string
}

func (e *PurgeError) Error() string { return fmt.Sprintf("purge job %s: %s", e.JobID, e.Reason) }

// Is makes errors.Is(err, ErrInvalidTransition) hold.
func (e *PurgeError) Is(target error) bool { return target == ErrInvalidTransition }

// Expired reports whether terminal job j finished more than retention
// before now. A job that is not terminal never expires.
func Expired(j *domain.Job, retention time.Duration, now time.Time) bool {
	if !j.State.Terminal() || retention <= 0 {
		return false
	}
	end := j.FinishedAt
	if end.IsZero() {
		end = j.UpdatedAt
	}
	return now.Sub(end) > retention
}

// Purge decides the purge of j (job.purged): its record, files and queue
// leftovers are deleted; its events stay in the log until the log's own
// retention. Only a terminal job is purged, and a parent only once every
// child that still has a record is terminal: children lists the states of
// those records (a purged child has none). The event moves nothing: a
// purged job stays as it ended in the log.
func Purge(j *domain.Job, children []domain.State, reason, actor string, now time.Time) (*domain.Event, error) {
	if err := CheckReason("reason", reason); err != nil {
		return nil, err
	}
	if !j.PurgedAt.IsZero() {
		return nil, &GoneError{JobID: j.ID, At: j.PurgedAt}
	}
	if !j.State.Terminal() {
		return nil, &PurgeError{JobID: j.ID, Reason: fmt.Sprintf("it is %s, not finished", j.State)}
	}
	live := 0
	for _, st := range children {
		if !st.Terminal() {
			live++
		}
	}
	if live > 0 {
		return nil, &PurgeError{JobID: j.ID, Reason: fmt.Sprintf("%d of its children are not finished", live)}
	}
	if err := Check(j.ID, j.State, j.State, domain.EvPurged); err != nil {
		return nil, err
	}
	return &domain.Event{Type: domain.EvPurged, JobID: j.ID, Time: now, Attempt: j.Attempt, Actor: actor,
		Level: domain.LevelInfo, From: j.State, To: j.State, Message: reason}, nil
}
