package commands

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jetflow/jetflow/internal/domain"
)

// Quotas: a queue's limits, decided here; admission (which pending job
// takes a free slot) is Admission, in admission.go.

// MaxLimit bounds a queue limit's value.
const MaxLimit = 1_000_000

// MaxUserBytes bounds a job's user name.
const MaxUserBytes = 128

// CheckLimits checks a queue's limits: each 0 (no limit) to MaxLimit.
func CheckLimits(l domain.QueueLimits) error {
	if l.MaxRunning < 0 || l.MaxRunning > MaxLimit {
		return valueErr("max_running", l.MaxRunning, "must be 0 (no limit) to %d", MaxLimit)
	}
	if l.MaxRunningPerUser < 0 || l.MaxRunningPerUser > MaxLimit {
		return valueErr("max_running_per_user", l.MaxRunningPerUser, "must be 0 (no limit) to %d", MaxLimit)
	}
	return nil
}

// CheckUser checks a job's user: at most MaxUserBytes of valid UTF-8 with
// no control characters. Empty is no one in particular.
func CheckUser(user string) error {
	if len(user) > MaxUserBytes {
		return inputErr("user", "%d bytes: at most %d", len(user), MaxUserBytes)
	}
	if !utf8.ValidString(user) {
		return inputErr("user", "not valid UTF-8")
	}
	for _, r := range user {
		if unicode.IsControl(r) {
			return inputErr("user", "control character %U", r)
		}
	}
	return nil
}

// SetQueueLimits decides a queue.set event that gives queue the limits l,
// or nil if its record (cur; nil: the queue has no record yet) has them
// already.
func SetQueueLimits(cur *domain.QueueRecord, queue string, l domain.QueueLimits, actor string, now time.Time) (*domain.Event, error) {
	if !domain.ValidQueue(queue) {
		return nil, valueErr("queue", queue, "want 1-64 of [A-Za-z0-9_-]")
	}
	if err := CheckLimits(l); err != nil {
		return nil, err
	}
	if cur != nil && cur.Limits == l && (cur.LimitsSeq != 0 || !l.Limited()) {
		// Unchanged; and a queue that never had limits and is given none
		// stays one that admission does not follow.
		return nil, nil
	}
	return &domain.Event{
		Type: domain.EvQueueSet, JobID: queue, Time: now, Actor: actor, Level: domain.LevelInfo,
		Message: fmt.Sprintf("limits of queue %s: max_running %d, max_running_per_user %d", queue, l.MaxRunning, l.MaxRunningPerUser),
		Queue:   &domain.QueueChange{Name: queue, Limits: l},
	}, nil
}

// Admit moves a pending job to its queue: admission found it a slot.
func Admit(j *domain.Job, actor string, now time.Time) (*domain.Event, error) {
	to := domain.StateQueued
	if !j.Spec.RunAt.IsZero() && j.Spec.RunAt.After(now) {
		to = domain.StateScheduled
	}
	ev, err := event(j, domain.EvAdmitted, to, actor, now)
	if err != nil {
		return nil, err
	}
	if to == domain.StateScheduled {
		ev.RunAt = j.Spec.RunAt
	}
	return ev, nil
}

// HoldPending records on a pending job why it waits (job.pending): the
// limit that held it. Nothing is written if its record says so already.
func HoldPending(j *domain.Job, h domain.Hold, actor string, now time.Time) (*domain.Event, error) {
	if j.State != domain.StatePending {
		return nil, &TransitionError{JobID: j.ID, Event: domain.EvPending, From: j.State, To: j.State}
	}
	if j.Hold != nil && j.Hold.Limit == h.Limit && j.Hold.Max == h.Max {
		return nil, nil
	}
	ev, err := event(j, domain.EvPending, "", actor, now)
	if err != nil {
		return nil, err
	}
	hh := h
	if hh.Since.IsZero() {
		hh.Since = now
	}
	ev.Hold = &hh
	ev.Message = HoldMessage(j.Spec.Queue, j.Spec.User, h)
	return ev, nil
}

// HoldMessage says why a job waits, for people.
func HoldMessage(queue, user string, h domain.Hold) string {
	switch h.Limit {
	case domain.LimitDeps:
		return "waits for steps " + strings.Join(h.Steps, ", ")
	case domain.LimitSteps:
		return fmt.Sprintf("its %d steps are being created", h.Max)
	}
	if h.Limit == domain.LimitUser {
		who := "user " + user + " runs"
		if user == "" {
			who = "the jobs with no user run"
		}
		return fmt.Sprintf("%s %d in queue %s: the queue's max_running_per_user", who, h.Max, queue)
	}
	return fmt.Sprintf("queue %s runs %d: its max_running", queue, h.Max)
}
