package commands

import (
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// MaxFanout bounds the pieces of one fan-out.
const MaxFanout = 1_000_000

// CheckPlan validates a fan-out plan and fills in its default policy.
func CheckPlan(p *domain.FanoutPlan) error {
	switch p.Kind {
	case domain.FanoutChildren:
	case domain.FanoutBatches:
		if !domain.ValidType(p.BatchType) {
			return inputErr("batch_type", "%q is not a job type", p.BatchType)
		}
		if !domain.ValidQueue(p.BatchQueue) {
			return inputErr("batch_queue", "%q is not a queue name", p.BatchQueue)
		}
	default:
		return inputErr("fanout", "kind %q: want children or batches", p.Kind)
	}
	if p.Total < 1 || p.Total > MaxFanout {
		return inputErr("fanout", "%d pieces: want 1 to %d", p.Total, MaxFanout)
	}
	switch p.Policy {
	case "":
		p.Policy = domain.PolicyAll
	case domain.PolicyAll, domain.PolicyFailFast:
	case domain.PolicyTolerate:
		if p.MaxFailureRatio < 0 || p.MaxFailureRatio > 1 || math.IsNaN(p.MaxFailureRatio) {
			return inputErr("max_failure_ratio", "%v: want 0 to 1", p.MaxFailureRatio)
		}
	default:
		return inputErr("policy", "%q: want all, fail_fast or tolerate", p.Policy)
	}
	return nil
}

// Wait records that a running coordinator deferred its outcome to the
// pieces of plan (running -> waiting).
func Wait(j *domain.Job, plan domain.FanoutPlan, actor string, now time.Time) (*domain.Event, error) {
	if err := CheckPlan(&plan); err != nil {
		return nil, err
	}
	ev, err := event(j, domain.EvWaiting, domain.StateWaiting, actor, now)
	if err != nil {
		return nil, err
	}
	ev.Plan = &plan
	ev.Message = fmt.Sprintf("waiting for %d %s", plan.Total, plan.Kind)
	return ev, nil
}

// FanIn records a waiting parent's counts so far. It does not move it.
// Counts never go backwards: counts up to a piece event the record's counts
// already include are refused with ErrStale.
func FanIn(j *domain.Job, c domain.FanoutCounts, actor string, now time.Time) (*domain.Event, error) {
	if err := Check(j.ID, j.State, j.State, domain.EvFanIn); err != nil {
		return nil, err
	}
	if j.Fanout != nil && c.UpTo <= j.Fanout.Counts.UpTo {
		return nil, fmt.Errorf("job %s counts up to piece event %d, not %d: %w", j.ID, j.Fanout.Counts.UpTo, c.UpTo, ErrStale)
	}
	return &domain.Event{Type: domain.EvFanIn, JobID: j.ID, Time: now, Attempt: j.Attempt, Actor: actor,
		Level: domain.LevelInfo, Counts: &c}, nil
}

// Verdict says whether a fan-out is decided by its counts, and how: a
// fail-fast plan fails at its first unsuccessful piece, a tolerant one once
// more than its ratio of pieces did not succeed, and every plan once all
// pieces finished (failing, for "all", if any did not succeed).
func Verdict(p *domain.FanoutPlan, c domain.FanoutCounts) (done, failed bool) {
	bad := c.Failed + c.Cancelled
	switch p.Policy {
	case domain.PolicyFailFast:
		if bad > 0 {
			return true, true
		}
	case domain.PolicyTolerate:
		if float64(bad) > p.MaxFailureRatio*float64(p.Total) {
			return true, true
		}
		if c.Finished() >= p.Total {
			return true, false
		}
		return false, false
	}
	if c.Finished() >= p.Total {
		return true, bad > 0
	}
	return false, false
}

// Summary is a fan-out parent's result: its counts and the most common
// failure messages.
type Summary struct {
	Total     int                 `json:"total"`
	Succeeded int                 `json:"succeeded"`
	Failed    int                 `json:"failed"`
	Cancelled int                 `json:"cancelled"`
	Errors    []domain.ErrorCount `json:"errors,omitempty"`
}

// FinishFanout decides a waiting parent's outcome from its counts, once
// Verdict says it is decided: job.succeeded with the summary as result, or
// job.failed with the summary and the most common failure as error.
func FinishFanout(j *domain.Job, c domain.FanoutCounts, actor string, now time.Time) (*domain.Event, error) {
	if j.State != domain.StateWaiting {
		// Not waiting yet (its pieces finished before it recorded its
		// plan), or ended already.
		return nil, &TransitionError{JobID: j.ID, Event: domain.EvSucceeded, From: j.State, To: domain.StateSucceeded}
	}
	if j.Fanout == nil {
		return nil, fmt.Errorf("job %s has no fan-out: %w", j.ID, ErrInvalidTransition)
	}
	p := &j.Fanout.Plan
	done, failed := Verdict(p, c)
	if !done {
		return nil, fmt.Errorf("job %s: %d of %d pieces finished: %w", j.ID, c.Finished(), p.Total, ErrInvalidTransition)
	}
	sum, _ := json.Marshal(Summary{Total: p.Total, Succeeded: c.Succeeded, Failed: c.Failed, Cancelled: c.Cancelled, Errors: c.Errors})
	if !failed {
		ev, err := Succeed(j, sum, actor, now)
		if err == nil {
			ev.Counts = &c
		}
		return ev, err
	}
	ev, err := event(j, domain.EvFailed, domain.StateFailed, actor, now)
	if err != nil {
		return nil, err
	}
	msg := fmt.Sprintf("%d of %d %s failed, %d cancelled (policy %s)", c.Failed, p.Total, p.Kind, c.Cancelled, p.Policy)
	if len(c.Errors) > 0 {
		msg += "; most common: " + c.Errors[0].Message
	}
	ev.Level = domain.LevelError
	ev.Error = &domain.JobError{Code: "FANOUT_FAILED", Message: msg}
	ev.Message = msg
	ev.Result = sum
	ev.Counts = &c
	return ev, nil
}

// stall fails a waiting parent none of whose pieces finished for d.
func stall(j *domain.Job, d time.Duration, actor string, now time.Time) (*domain.Event, error) {
	ev, err := event(j, domain.EvStalled, domain.StateFailed, actor, now)
	if err != nil {
		return nil, err
	}
	ev.Level = domain.LevelError
	ev.Error = &domain.JobError{Code: "STALLED", Message: fmt.Sprintf("no piece finished for %s", d)}
	ev.Message = ev.Error.Message
	return ev, nil
}
