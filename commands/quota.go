package commands

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

// maxUserBytes bounds a job's user name.
const maxUserBytes = 128

// Bounds of a rate limit's period (QueueLimits.RatePeriod).
const (
	minRatePeriod = time.Second
	maxRatePeriod = 24 * time.Hour
)

// maxKeyBytes bounds a concurrency key, and a rate key taken from a
// payload (a longer value is known by its SHA-256).
const maxKeyBytes = 256

// maxRateKeyDepth bounds the path of a payload field naming a rate key.
const maxRateKeyDepth = 8

// CheckLimits checks a queue's limits: each count 0 (no limit) to
// MaxLimit; a rate limit with its period (minRatePeriod to
// maxRatePeriod), and a period or a rate key only with a rate limit.
func CheckLimits(l domain.QueueLimits) error {
	for _, c := range []struct {
		field string
		v     int
	}{{"max_running", l.MaxRunning}, {"max_running_per_user", l.MaxRunningPerUser},
		{"max_running_per_key", l.MaxRunningPerKey}, {"rate_limit", l.RateLimit}, {"max_queued", l.MaxQueued}} {
		if c.v < 0 || c.v > MaxLimit {
			return valueErr(c.field, c.v, "must be 0 (no limit) to %d", MaxLimit)
		}
	}
	switch {
	case l.RateLimit == 0 && l.RatePeriod != 0:
		return valueErr("rate_period", l.RatePeriod, "a period needs a rate_limit (0 removes the rate limit and its period)")
	case l.RateLimit == 0 && l.RateKey != "":
		return valueErr("rate_key", l.RateKey, "a rate key needs a rate_limit")
	case l.RateLimit > 0 && l.RatePeriod == 0:
		return inputErr("rate_period", "a rate_limit needs its period (from %s to %s)", minRatePeriod, maxRatePeriod)
	case l.RateLimit > 0:
		if err := checkRatePeriod(l.RatePeriod); err != nil {
			return err
		}
	}
	return checkRateKey(l.RateKey)
}

// checkRatePeriod checks the period of a rate limit: minRatePeriod to
// maxRatePeriod.
func checkRatePeriod(d time.Duration) error {
	if d < minRatePeriod || d > maxRatePeriod {
		return valueErr("rate_period", d, "must be from %s to %s", minRatePeriod, maxRatePeriod)
	}
	return nil
}

// checkRateKey checks where a queue's rate key comes from: "" (the rate
// limit is the queue's), "user", "concurrency_key", or a payload field
// "payload.<name>[.<name>...]" (at most 8 names of 1-64 of [A-Za-z0-9_-]).
func checkRateKey(k string) error {
	if k == "" || k == domain.RateKeyUser || k == domain.RateKeyConcurrency {
		return nil
	}
	const want = `want "user", "concurrency_key" or "payload.<field>[.<field>...]" (at most 8 fields of 1-64 of [A-Za-z0-9_-])`
	path, ok := strings.CutPrefix(k, domain.RateKeyPayload)
	if !ok || len(k) > maxKeyBytes {
		return valueErr("rate_key", k, want)
	}
	names := strings.Split(path, ".")
	if len(names) > maxRateKeyDepth {
		return valueErr("rate_key", k, want)
	}
	for _, n := range names {
		if n == "" || len(n) > 64 || !domain.IsPlain(n) {
			return valueErr("rate_key", k, want)
		}
	}
	return nil
}

// checkConcurrencyKey checks a job's concurrency key: at most maxKeyBytes
// of valid UTF-8 with no control characters. Empty is none.
func checkConcurrencyKey(k string) error { return checkText("concurrency_key", maxKeyBytes, k) }

// checkText checks a short text a request names (a key, a user): at most
// max bytes of valid UTF-8 with no control characters, refused naming
// field.
func checkText(field string, max int, v string) error {
	if len(v) > max {
		return inputErr(field, "%d bytes: at most %d", len(v), max)
	}
	if !utf8.ValidString(v) {
		return inputErr(field, "not valid UTF-8")
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return inputErr(field, "control character %U", r)
		}
	}
	return nil
}

// rateKey is the rate key a job of spec counts against in a queue with
// limits l (SlotUser-scoped: its namespace, "/", the key; a job with no
// value has the namespace's empty key), or "" when the queue's rate limit
// is not per key.
func rateKey(l domain.QueueLimits, spec *domain.Spec) string {
	if l.RateLimit <= 0 || l.RateKey == "" {
		return ""
	}
	var v string
	switch l.RateKey {
	case domain.RateKeyUser:
		v = spec.User
	case domain.RateKeyConcurrency:
		v = spec.ConcurrencyKey
	default:
		v = payloadField(spec.Payload, strings.Split(strings.TrimPrefix(l.RateKey, domain.RateKeyPayload), "."))
	}
	return SlotUser(spec.Namespace, v)
}

// payloadField is the value of the field at path in a JSON payload, as a
// key: a string as it is, a number or a boolean as its JSON text; "" for
// anything else or nothing there. A value longer than maxKeyBytes is
// known by its SHA-256.
func payloadField(payload []byte, path []string) string {
	raw := json.RawMessage(payload)
	for _, name := range path {
		var obj map[string]json.RawMessage
		if json.Unmarshal(raw, &obj) != nil {
			return ""
		}
		if raw = obj[name]; raw == nil {
			return ""
		}
	}
	raw = bytes.TrimSpace(raw)
	var v string
	switch {
	case len(raw) == 0:
		return ""
	case raw[0] == '"':
		if json.Unmarshal(raw, &v) != nil {
			return ""
		}
	case raw[0] == '{' || raw[0] == '[' || bytes.Equal(raw, []byte("null")):
		return ""
	default:
		v = string(raw)
	}
	if len(v) > maxKeyBytes {
		sum := sha256.Sum256([]byte(v))
		return "sha256:" + hex.EncodeToString(sum[:])
	}
	return v
}

// checkUser checks a job's user: at most maxUserBytes of valid UTF-8 with
// no control characters. Empty is no one in particular.
func checkUser(user string) error { return checkText("user", maxUserBytes, user) }

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
		Message: "limits of queue " + queue + ": " + limitsText(l),
		Queue:   &domain.QueueChange{Name: queue, Limits: l},
	}, nil
}

// limitsText says a queue's limits in words.
func limitsText(l domain.QueueLimits) string {
	s := fmt.Sprintf("max_running %d, max_running_per_user %d", l.MaxRunning, l.MaxRunningPerUser)
	if l.MaxRunningPerKey > 0 {
		s += fmt.Sprintf(", max_running_per_key %d", l.MaxRunningPerKey)
	}
	if l.RateLimit > 0 {
		s += fmt.Sprintf(", rate_limit %d per %s", l.RateLimit, l.RatePeriod)
		if l.RateKey != "" {
			s += " per " + l.RateKey
		}
	}
	if l.Priorities {
		s += ", priorities"
	}
	if w := l.Window(); w > 0 {
		s += fmt.Sprintf(", max_queued %d", w)
	}
	return s
}

// Admit moves a pending job to its queue: admission found it a slot. A
// job of a queue with a rate limit per key is admitted under its rate key
// (rateKey), which the event keeps: a new admitter counts the
// admissions of the last period per key from the log.
func Admit(j *domain.Job, l domain.QueueLimits, actor string, now time.Time) (*domain.Event, error) {
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
	ev.RateKey = rateKey(l, &j.Spec)
	return ev, nil
}

// HoldPending records on a pending job why it waits (job.pending): the
// limit that held it. Nothing is written if its record says so already.
func HoldPending(j *domain.Job, h domain.Hold, actor string, now time.Time) (*domain.Event, error) {
	if j.State != domain.StatePending {
		return nil, &TransitionError{JobID: j.ID, Event: domain.EvPending, From: j.State, To: j.State}
	}
	if j.Hold != nil && j.Hold.Limit == h.Limit && j.Hold.Max == h.Max && j.Hold.Key == h.Key {
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
	case domain.LimitUser:
		who := "user " + user + " runs"
		if user == "" {
			who = "the jobs with no user run"
		}
		return fmt.Sprintf("%s %d in queue %s: the queue's max_running_per_user", who, h.Max, queue)
	case domain.LimitKey:
		return fmt.Sprintf("key %q runs %d in queue %s (its max_running_per_key), or its earlier jobs go first", h.Key, h.Max, queue)
	case domain.LimitRate:
		whose := "queue " + queue
		if h.Key != "" {
			whose = fmt.Sprintf("key %q in queue %s", h.Key, queue)
		}
		msg := fmt.Sprintf("%s started %d in its rate period: the queue's rate_limit", whose, h.Max)
		if !h.Until.IsZero() {
			msg += "; it can start at " + h.Until.UTC().Format(time.RFC3339Nano)
		}
		return msg
	case domain.LimitRunAt:
		return "scheduled: starts at " + h.Until.UTC().Format(time.RFC3339Nano) + " (its run_at, a delay or a retry's backoff), then " +
			"goes to its queue (or waits for a slot in a queue with limits)"
	case domain.LimitQueued:
		return fmt.Sprintf("queue %s has %d admitted jobs waiting for a worker (its max_queued): pending jobs start by priority as workers take them", queue, h.Max)
	}
	return fmt.Sprintf("queue %s runs %d: its max_running", queue, h.Max)
}

// HoldReason is what kind of limit a hold is: "quota" (the running jobs
// of the queue or of a user), "key" (of a concurrency key), "rate" or
// "priority" (the window of a queue with priorities: its turn by priority),
// "dependencies" (a workflow's step, or a workflow whose steps are being
// made) or "schedule" (a scheduled job's run_at).
func HoldReason(h domain.Hold) string {
	switch h.Limit {
	case domain.LimitQueued:
		return "priority"
	case domain.LimitDeps, domain.LimitSteps:
		return "dependencies"
	case domain.LimitRunAt:
		return "schedule"
	case domain.LimitKey:
		return "key"
	case domain.LimitRate:
		return "rate"
	}
	return "quota"
}
