package commands

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/internal/domain"
)

// Defaults applied at submit time and written into the job's spec.
const (
	DefaultMaxRetries       = 3
	DefaultBackoff          = 30 * time.Second
	defaultBackoffCap       = time.Hour
	defaultJitter           = 0.1
	DefaultTimeout          = time.Hour
	defaultMaxLeaseRequeues = 3
	// maxPayloadBytes bounds a job's JSON payload.
	maxPayloadBytes = 1 << 20
	// MaxResultBytes bounds a job's JSON result (CompactResult).
	MaxResultBytes = 16 << 20
	// MaxInlineResult is the largest result kept in the job's event and
	// record; a larger one is an object of the files bucket that the event
	// names (domain.Job.ResultRef), so records stay small.
	MaxInlineResult = 256 << 10
	// MaxRetriesLimit bounds max_retries and max_lease_requeues.
	MaxRetriesLimit = 1000
	// minPriority and maxPriority bound a job's priority.
	minPriority = -1000
	maxPriority = 1000
	// MaxReasonBytes bounds the reason of a cancel or a requeue.
	MaxReasonBytes = 1024
	// maxProgressMessage bounds the message of a progress report.
	maxProgressMessage = 4096
	// maxDurationSeconds bounds a duration given as a number of seconds
	// (about 31 years).
	maxDurationSeconds = 1e9
	maxTags            = 32
	maxTagLen          = 128
	maxKeyLen          = 256
)

// Duration is a time.Duration that reads either a Go duration string ("1m30s")
// or a number of seconds (90, 0.5) from JSON and msgpack, and writes seconds.
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return d.parse(s)
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("duration: want a number of seconds or a string like \"30s\"")
	}
	return d.seconds(f)
}

// MarshalJSON writes seconds.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(strconv.FormatFloat(time.Duration(d).Seconds(), 'f', -1, 64)), nil
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (d *Duration) DecodeMsgpack(dec *msgpack.Decoder) error {
	v, err := dec.DecodeInterface()
	if err != nil {
		return err
	}
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		return d.parse(x)
	case float64:
		return d.seconds(x)
	case float32:
		return d.seconds(float64(x))
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64:
		f, _ := strconv.ParseFloat(fmt.Sprint(x), 64)
		return d.seconds(f)
	}
	return fmt.Errorf("duration: want a number of seconds or a string, got %T", v)
}

// EncodeMsgpack implements msgpack.CustomEncoder.
func (d Duration) EncodeMsgpack(enc *msgpack.Encoder) error {
	return enc.EncodeFloat64(time.Duration(d).Seconds())
}

func (d *Duration) parse(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		if f, err2 := strconv.ParseFloat(s, 64); err2 == nil {
			return d.seconds(f)
		}
		return fmt.Errorf("duration %q: %v", s, err)
	}
	*d = Duration(v)
	return nil
}

// seconds sets d from a number of seconds. One out of range is refused with
// an *InputError whose Field is empty: the decoder of the request that holds
// the duration names it (engine.FieldOf).
func (d *Duration) seconds(f float64) error {
	if math.IsNaN(f) || f > maxDurationSeconds || f < -maxDurationSeconds {
		return &InputError{Value: fmt.Sprintf("%g seconds", f),
			Reason: fmt.Sprintf("out of range: want at most %g seconds either way", float64(maxDurationSeconds))}
	}
	*d = Duration(f * float64(time.Second))
	return nil
}

// RawJSON is a JSON value carried as its text. In JSON it is the value
// itself; in msgpack it is either the value as msgpack (a map, an array, a
// number...) or a string/binary holding JSON text.
type RawJSON []byte

// MarshalJSON returns the JSON text (null when empty).
func (r RawJSON) MarshalJSON() ([]byte, error) {
	if len(r) == 0 {
		return []byte("null"), nil
	}
	return r, nil
}

// UnmarshalJSON keeps the JSON text.
func (r *RawJSON) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (r *RawJSON) DecodeMsgpack(dec *msgpack.Decoder) error {
	v, err := dec.DecodeInterface()
	if err != nil {
		return err
	}
	switch x := v.(type) {
	case []byte:
		*r = RawJSON(x)
		return nil
	}
	b, err := json.Marshal(jsonable(v))
	if err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	*r = b
	return nil
}

// EncodeMsgpack implements msgpack.CustomEncoder: the JSON text as binary.
func (r RawJSON) EncodeMsgpack(enc *msgpack.Encoder) error { return enc.EncodeBytes(r) }

// jsonable turns msgpack's generic values (maps with any keys) into values
// encoding/json accepts.
func jsonable(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonable(e)
		}
		return x
	case map[any]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[fmt.Sprint(k)] = jsonable(e)
		}
		return m
	case []any:
		for i, e := range x {
			x[i] = jsonable(e)
		}
		return x
	}
	return v
}

// SubmitRequest is a request to create a job, as it arrives from the SDK, the
// CLI, the HTTP API or a jetflow.cmd.submit message. Pointer fields tell
// "not given" (default) from zero.
type SubmitRequest struct {
	Namespace        string     `json:"namespace,omitempty" msgpack:"namespace,omitempty"`
	Type             string     `json:"type" msgpack:"type"`
	Payload          RawJSON    `json:"payload,omitempty" msgpack:"payload,omitempty"`
	Queue            string     `json:"queue,omitempty" msgpack:"queue,omitempty"`
	Delay            *Duration  `json:"delay,omitempty" msgpack:"delay,omitempty"`
	RunAt            *time.Time `json:"run_at,omitempty" msgpack:"run_at,omitempty"`
	MaxRetries       *int       `json:"max_retries,omitempty" msgpack:"max_retries,omitempty"`
	Backoff          *Duration  `json:"backoff,omitempty" msgpack:"backoff,omitempty"`
	BackoffCap       *Duration  `json:"backoff_cap,omitempty" msgpack:"backoff_cap,omitempty"`
	Jitter           *float64   `json:"jitter,omitempty" msgpack:"jitter,omitempty"`
	Timeout          *Duration  `json:"timeout,omitempty" msgpack:"timeout,omitempty"`
	IdempotencyKey   string     `json:"idempotency_key,omitempty" msgpack:"idempotency_key,omitempty"`
	Tags             []string   `json:"tags,omitempty" msgpack:"tags,omitempty"`
	Parent           string     `json:"parent,omitempty" msgpack:"parent,omitempty"`
	RetryOf          string     `json:"retry_of,omitempty" msgpack:"retry_of,omitempty"`
	Priority         int        `json:"priority,omitempty" msgpack:"priority,omitempty"`
	RetryOn          []string   `json:"retry_on,omitempty" msgpack:"retry_on,omitempty"`
	NoRetryOn        []string   `json:"no_retry_on,omitempty" msgpack:"no_retry_on,omitempty"`
	MaxLeaseRequeues *int       `json:"max_lease_requeues,omitempty" msgpack:"max_lease_requeues,omitempty"`
	QueueTimeout     *Duration  `json:"queue_timeout,omitempty" msgpack:"queue_timeout,omitempty"`
	// User is who the job runs for (quotas: QueueLimits.MaxRunningPerUser).
	// With access control, a token's name unless an admin names another.
	User string `json:"user,omitempty" msgpack:"user,omitempty"`
	// ConcurrencyKey groups jobs whose slots count together in a queue
	// with max_running_per_key (1: one at a time per key, in submit order).
	ConcurrencyKey string `json:"concurrency_key,omitempty" msgpack:"concurrency_key,omitempty"`
	// UniqueKey, or UniqueFields (payload fields its key is derived
	// from), make the job the only one of its key for UniqueFor (0: no
	// end) while its state is in UniqueWhile (active, not-succeeded,
	// any): a submit of the key meanwhile gets it (docs/unique.md).
	UniqueKey    string    `json:"unique_key,omitempty" msgpack:"unique_key,omitempty"`
	UniqueFields []string  `json:"unique_fields,omitempty" msgpack:"unique_fields,omitempty"`
	UniqueFor    *Duration `json:"unique_for,omitempty" msgpack:"unique_for,omitempty"`
	UniqueWhile  string    `json:"unique_while,omitempty" msgpack:"unique_while,omitempty"`

	// ID and Piece are set by the engine for the children of a fan-out:
	// their ids are derived from the parent's (engine.ChildID).
	ID    string `json:"-" msgpack:"-"`
	Piece int    `json:"-" msgpack:"-"`
	// FailedPieces is set by Retry with failed pieces only: the new run
	// of RetryOf's fan-out makes only the pieces that did not succeed.
	FailedPieces bool `json:"-" msgpack:"-"`

	// Files are the input files stored under ID before the submit (by the
	// gateway or a Go client from Uploads), recorded in the job's spec.
	Files []domain.FileRef `json:"-" msgpack:"-"`
	// Uploads are input files a Go client stores before it submits.
	Uploads []FileUpload `json:"-" msgpack:"-"`
}

// Validate checks a request as Spec does, without resolving it.
func (r *SubmitRequest) Validate() error {
	_, err := r.Spec(time.Now())
	return err
}

// Spec validates a request and resolves it into the spec a job is created
// with: every default filled in, the payload compacted JSON. A value out of
// range is refused with an *InputError naming its field, never replaced by
// a default: a field that is not given (nil) takes the default, one that is
// given is taken as it is or refused.
func (r *SubmitRequest) Spec(now time.Time) (domain.Spec, error) {
	s := domain.Spec{
		Namespace: r.Namespace, Type: r.Type, Queue: r.Queue, Key: r.IdempotencyKey,
		Parent: r.Parent, RetryOf: r.RetryOf, FailedPieces: r.FailedPieces && r.RetryOf != "", Priority: r.Priority,
		MaxRetries: DefaultMaxRetries, Backoff: DefaultBackoff, BackoffCap: defaultBackoffCap,
		Jitter: defaultJitter, Timeout: DefaultTimeout, MaxLeaseRequeues: defaultMaxLeaseRequeues,
	}
	if s.Namespace == "" {
		s.Namespace = domain.DefaultNS
	}
	if s.Queue == "" {
		s.Queue = domain.DefaultQueue
	}
	if err := CheckNamespace(s.Namespace); err != nil {
		return s, err
	}
	if !domain.ValidType(s.Type) {
		if s.Type == "" {
			return s, inputErr("type", "is required")
		}
		return s, valueErr("type", s.Type, "want 1-128 of [A-Za-z0-9_-.:@]")
	}
	if !domain.ValidQueue(s.Queue) {
		return s, valueErr("queue", s.Queue, "want 1-64 of [A-Za-z0-9_-]")
	}
	payload, err := CompactJSON(r.Payload)
	if err != nil {
		return s, err
	}
	s.Payload = payload
	if r.Delay != nil && r.RunAt != nil {
		return s, inputErr("delay", "give delay or run_at, not both")
	}
	if r.Delay != nil {
		if *r.Delay < 0 {
			return s, valueErr("delay", time.Duration(*r.Delay), "must not be negative")
		}
		if *r.Delay > 0 {
			s.RunAt = now.Add(time.Duration(*r.Delay)).UTC()
		}
	}
	if r.RunAt != nil && r.RunAt.After(now) {
		s.RunAt = r.RunAt.UTC()
	}
	if r.MaxRetries != nil {
		if *r.MaxRetries < 0 || *r.MaxRetries > MaxRetriesLimit {
			return s, valueErr("max_retries", *r.MaxRetries, "must be 0-%d", MaxRetriesLimit)
		}
		s.MaxRetries = *r.MaxRetries
	}
	if r.Backoff != nil {
		if *r.Backoff < 0 {
			return s, valueErr("backoff", time.Duration(*r.Backoff), "must not be negative")
		}
		s.Backoff = time.Duration(*r.Backoff)
	}
	if r.BackoffCap != nil {
		if *r.BackoffCap < 0 {
			return s, valueErr("backoff_cap", time.Duration(*r.BackoffCap), "must not be negative")
		}
		s.BackoffCap = time.Duration(*r.BackoffCap)
	}
	if r.Jitter != nil {
		if *r.Jitter < 0 || *r.Jitter > 1 || math.IsNaN(*r.Jitter) {
			return s, valueErr("jitter", *r.Jitter, "must be a fraction from 0 to 1")
		}
		s.Jitter = *r.Jitter
	}
	if r.Timeout != nil {
		if *r.Timeout <= 0 {
			return s, valueErr("timeout", time.Duration(*r.Timeout), "must be more than 0")
		}
		s.Timeout = time.Duration(*r.Timeout)
	}
	if r.MaxLeaseRequeues != nil {
		if *r.MaxLeaseRequeues < 0 || *r.MaxLeaseRequeues > MaxRetriesLimit {
			return s, valueErr("max_lease_requeues", *r.MaxLeaseRequeues, "must be 0-%d", MaxRetriesLimit)
		}
		s.MaxLeaseRequeues = *r.MaxLeaseRequeues
	}
	if r.QueueTimeout != nil {
		// 0 is no queue timeout, the default; it is taken as given.
		if *r.QueueTimeout < 0 {
			return s, valueErr("queue_timeout", time.Duration(*r.QueueTimeout), "must not be negative")
		}
		s.QueueTimeout = time.Duration(*r.QueueTimeout)
	}
	if r.Priority < minPriority || r.Priority > maxPriority {
		return s, valueErr("priority", r.Priority, "must be %d to %d", minPriority, maxPriority)
	}
	s.Piece = r.Piece
	if err := checkUser(r.User); err != nil {
		return s, err
	}
	s.User = r.User
	if err := checkConcurrencyKey(r.ConcurrencyKey); err != nil {
		return s, err
	}
	s.ConcurrencyKey = r.ConcurrencyKey
	if len(s.Key) > maxKeyLen {
		return s, inputErr("idempotency_key", "longer than %d bytes", maxKeyLen)
	}
	if err := checkLabels("tags", r.Tags); err != nil {
		return s, err
	}
	s.Tags = append([]string(nil), r.Tags...)
	for _, id := range []struct{ field, v string }{{"parent", r.Parent}, {"retry_of", r.RetryOf}} {
		if id.v != "" && !domain.ValidID(id.v) {
			return s, valueErr(id.field, id.v, "is not a job id")
		}
	}
	if err := checkLabels("retry_on", r.RetryOn); err != nil {
		return s, err
	}
	if err := checkLabels("no_retry_on", r.NoRetryOn); err != nil {
		return s, err
	}
	s.RetryOn = append([]string(nil), r.RetryOn...)
	s.NoRetryOn = append([]string(nil), r.NoRetryOn...)
	if len(r.Files) > 0 {
		if err := checkFiles(r.Files); err != nil {
			return s, err
		}
		s.Files = append([]domain.FileRef(nil), r.Files...)
	}
	if s.Unique, err = r.unique(&s); err != nil {
		return s, err
	}
	return s, nil
}

// checkLabels checks a list of tags or error codes: at most maxTags, each
// 1-maxTagLen bytes without control characters.
func checkLabels(field string, labels []string) error {
	if len(labels) > maxTags {
		return inputErr(field, "%d of them: at most %d", len(labels), maxTags)
	}
	for _, l := range labels {
		if l == "" || len(l) > maxTagLen || strings.ContainsFunc(l, unicode.IsControl) {
			return valueErr(field, l, "want 1-%d bytes without control characters", maxTagLen)
		}
	}
	return nil
}

// CheckProgress checks a progress report: current and total not negative,
// current not past a known total (total 0: unknown), the message at most
// maxProgressMessage bytes.
func CheckProgress(current, total int64, message string) error {
	switch {
	case current < 0 || total < 0:
		return inputErr("progress", "current and total must not be negative")
	case total > 0 && current > total:
		return inputErr("progress", "current %d is past the total %d", current, total)
	case len(message) > maxProgressMessage:
		return inputErr("progress", "message of %d bytes: at most %d", len(message), maxProgressMessage)
	}
	return nil
}

// CheckReason checks the reason of a cancel or of a job given back to its
// queue: at most MaxReasonBytes.
func CheckReason(field, reason string) error {
	if len(reason) > MaxReasonBytes {
		return inputErr(field, "%d bytes: at most %d", len(reason), MaxReasonBytes)
	}
	return nil
}

// CompactJSON checks that b is one JSON value within maxPayloadBytes and
// returns it compacted; empty input is JSON null.
func CompactJSON(b []byte) ([]byte, error) {
	return compactJSON("payload", b, maxPayloadBytes)
}

// CompactResult is CompactJSON for a handler's result: at most
// MaxResultBytes, refused as field "result".
func CompactResult(b []byte) ([]byte, error) {
	return compactJSON("result", b, MaxResultBytes)
}

func compactJSON(field string, b []byte, limit int) ([]byte, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return []byte("null"), nil
	}
	if len(b) > limit {
		return nil, inputErr(field, "%d bytes, more than the limit of %d", len(b), limit)
	}
	if !json.Valid(b) {
		var v any
		err := json.Unmarshal(b, &v)
		return nil, inputErr(field, "not valid JSON: %v", err)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, inputErr(field, "not valid JSON: %v", err)
	}
	return buf.Bytes(), nil
}

// Submit decides the first event of a new job with the given id. A job of
// a queue with limits (limited) that is due waits in pending for admission.
func Submit(id string, spec domain.Spec, limited bool, now time.Time) (*domain.Event, error) {
	to := domain.StateQueued
	switch {
	case !spec.RunAt.IsZero() && spec.RunAt.After(now):
		to = domain.StateScheduled
	case limited:
		to = domain.StatePending
	}
	if err := Check(id, domain.StateNew, to, domain.EvSubmitted); err != nil {
		return nil, err
	}
	sp := spec
	return &domain.Event{
		Type: domain.EvSubmitted, JobID: id, Time: now, From: domain.StateNew, To: to,
		Level: domain.LevelInfo, Spec: &sp, RunAt: spec.RunAt,
	}, nil
}
