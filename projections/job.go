package projections

import (
	"fmt"

	"github.com/jetflow/jetflow/internal/domain"
)

// Fold folds one event into a job's state. Events at or below the job's Seq
// have been folded already and are ignored, so a stale or replayed event
// never moves a job backwards. j may be nil for the first event.
func Fold(j *domain.Job, ev *domain.Event) (*domain.Job, error) {
	if j != nil && ev.Seq != 0 && ev.Seq <= j.Seq {
		return j, nil
	}
	if j == nil {
		if ev.Type != domain.EvSubmitted || ev.Spec == nil {
			return nil, fmt.Errorf("job %s: first event is %s, not %s", ev.JobID, ev.Type, domain.EvSubmitted)
		}
	} else if ev.JobID != j.ID {
		return nil, fmt.Errorf("event for job %s folded into job %s", ev.JobID, j.ID)
	}
	n := &domain.Job{ID: ev.JobID} // a new job is folded into itself
	if j != nil {
		*n = *j // fold into a copy: the caller's record stays as it was
	}
	t := ev.Time.UTC()
	if ev.To != domain.StateNew {
		n.State = ev.To
		n.Hold = nil // why it waited is over once it moves
	}
	switch ev.Type {
	case domain.EvSubmitted:
		if j != nil && j.Seq != 0 {
			return nil, fmt.Errorf("job %s: %s after the job was created", ev.JobID, ev.Type)
		}
		n.Spec = *ev.Spec
		n.CreatedAt = t
		n.RunAt = ev.RunAt
		if ev.To == domain.StateQueued {
			n.QueuedAt = t
		}
		if ev.Hold != nil { // a step waiting for its dependencies, a workflow for its steps
			h := *ev.Hold
			n.Hold = &h
		}
		if ev.Plan != nil { // a workflow: its steps are its pieces
			n.Fanout = &domain.Fanout{Plan: *ev.Plan}
		}
	case domain.EvDue, domain.EvAdmitted:
		if ev.To == domain.StateQueued {
			n.QueuedAt = t
		}
		if ev.To == domain.StateScheduled {
			n.RunAt = ev.RunAt
		}
	case domain.EvPending:
		if ev.Hold != nil {
			h := *ev.Hold
			n.Hold = &h
		}
	case domain.EvClaimed:
		n.Worker, n.LeaseItem, n.LeaseAck = ev.Actor, ev.Lease, ev.LeaseAck
		n.ClaimedAt = t
		attemptTrace(n, ev.Trace)
	case domain.EvStarted:
		n.Attempt = ev.Attempt
		n.StartedAt = t
		n.Worker, n.LeaseItem, n.LeaseAck = ev.Actor, ev.Lease, ev.LeaseAck
		n.Progress = nil
		attemptTrace(n, ev.Trace)
	case domain.EvSucceeded:
		n.Result, n.ResultRef = ev.Result, ev.ResultRef
		n.Error = nil
		n.FinishedAt = t
		n.LeaseItem, n.LeaseAck = 0, ""
	case domain.EvFailed, domain.EvLeaseExpired:
		n.Error = ev.Error
		if ev.Result != nil { // a fan-out parent's summary
			n.Result = ev.Result
		}
		n.FinishedAt = t
		n.LeaseItem, n.LeaseAck = 0, ""
	case domain.EvCancelled:
		n.Error = &domain.JobError{Code: "CANCELLED", Message: cancelMessage(ev.Message)}
		if ev.Error != nil { // a step skipped (domain.CodeSkipped)
			e := *ev.Error
			n.Error = &e
		}
		n.FinishedAt = t
		n.LeaseItem, n.LeaseAck = 0, ""
	case domain.EvRetryScheduled, domain.EvRetryLater, domain.EvRequeued, domain.EvLeaseExpiredRequeue:
		switch ev.Type {
		case domain.EvRetryScheduled:
			n.Retries++
			n.Error = ev.Error
		case domain.EvLeaseExpiredRequeue:
			n.LeaseRequeues++
		}
		n.LeaseItem, n.LeaseAck = 0, ""
		n.Worker = ""
		if ev.To == domain.StateScheduled {
			n.RunAt = ev.RunAt
		} else {
			n.QueuedAt = t
		}
	case domain.EvWaiting:
		n.LeaseItem, n.LeaseAck = 0, ""
		if ev.Plan != nil {
			n.Fanout = &domain.Fanout{Plan: *ev.Plan}
		}
	case domain.EvFanIn:
		if ev.Counts != nil && n.Fanout != nil {
			f := *n.Fanout
			f.Counts = *ev.Counts
			n.Fanout = &f
		}
	case domain.EvStalled:
		n.Error = ev.Error
		n.FinishedAt = t
	case domain.EvProgress:
		if ev.Progress != nil {
			p := *ev.Progress
			n.Progress = &p
		}
	case domain.EvPurged:
		n.PurgedAt = t
	case domain.EvDuplicate:
		n.Duplicates++
	case domain.EvReprioritized:
		if ev.Priority != nil {
			n.Spec.Priority = *ev.Priority
		}
	case domain.EvCustom:
	default:
		// An event type this build does not know: its state change (if any)
		// is taken, the rest is left to newer code.
	}
	if ev.Counts != nil && n.Fanout != nil && ev.Type != domain.EvFanIn {
		f := *n.Fanout
		f.Counts = *ev.Counts
		n.Fanout = &f
	}
	n.Seq = ev.Seq
	if ev.Type != domain.EvDuplicate { // out of the chain (appended without a decision): links nothing
		n.LastHash = ev.Hash
	}
	n.Events++
	if t.After(n.UpdatedAt) {
		n.UpdatedAt = t
	}
	return n, nil
}

// attemptTrace records the span of the attempt a claim names; the one
// before it stays, for the link of a retry's span to it. An HTTP worker's
// job.started names the span its job.claimed named: nothing changes.
func attemptTrace(n *domain.Job, trace string) {
	if trace != n.AttemptTrace {
		n.PrevAttemptTrace, n.AttemptTrace = n.AttemptTrace, trace
	}
}

func cancelMessage(reason string) string {
	if reason == "" {
		return "cancelled"
	}
	return "cancelled: " + reason
}
