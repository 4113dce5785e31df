package commands

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// Limits of unique jobs (docs/unique.md).
const (
	// maxUniqueKeyBytes bounds a given unique key.
	maxUniqueKeyBytes = 256
	// maxUniqueFields bounds the payload fields a key is derived from.
	maxUniqueFields = 8
	// maxUniqueFieldBytes bounds one field's path.
	maxUniqueFieldBytes = 128
	// maxUniqueDepth bounds the names of one field's path (a.b.c).
	maxUniqueDepth = 8
	// maxUniqueFor is the longest window.
	maxUniqueFor = 366 * 24 * time.Hour
)

// uniqueFieldsPrefix starts a key derived from payload fields.
const uniqueFieldsPrefix = "fields:"

// Unique resolves a submit's unique options into the terms its job holds
// its key by (nil: not unique): a key given (unique_key) or derived from
// the namespace, queue, type and the values of the payload fields named
// (unique_fields; see UniqueKeyOf); the window unique_for (0: as long as
// the scope holds); the scope unique_while (default active). spec is the
// request's spec as resolved so far (namespace, queue, type, payload).
// A refusal names its field.
func (r *SubmitRequest) unique(spec *domain.Spec) (*domain.Unique, error) {
	given := r.UniqueKey != "" || len(r.UniqueFields) > 0
	switch {
	case !given && r.UniqueFor != nil:
		return nil, inputErr("unique_for", "needs unique_key or unique_fields: the key it is unique by")
	case !given && r.UniqueWhile != "":
		return nil, inputErr("unique_while", "needs unique_key or unique_fields: the key it is unique by")
	case !given:
		return nil, nil
	case r.UniqueKey != "" && len(r.UniqueFields) > 0:
		return nil, inputErr("unique_fields", "give unique_key or unique_fields, not both")
	case r.IdempotencyKey != "":
		return nil, inputErr(uniqueField(r), "not with idempotency_key: an idempotency key names one job for good, a unique key the job that holds it now")
	case r.Parent != "":
		return nil, inputErr(uniqueField(r), "not with parent: a child is not unique on its own")
	case r.ID != "" || len(r.Files) > 0 || len(r.Uploads) > 0:
		return nil, inputErr(uniqueField(r), "not for a job whose id is given before its submit (input files, a fan-out's piece, a schedule's tick)")
	}
	u := &domain.Unique{While: domain.UniqueWhileActive}
	switch r.UniqueWhile {
	case "":
	case domain.UniqueWhileActive, domain.UniqueWhileNotSucceeded, domain.UniqueWhileAny:
		u.While = r.UniqueWhile
	default:
		return nil, valueErr("unique_while", r.UniqueWhile, `want "active", "not-succeeded" or "any"`)
	}
	if r.UniqueFor != nil {
		d := time.Duration(*r.UniqueFor)
		if d < 0 || d > maxUniqueFor {
			return nil, valueErr("unique_for", d, "must be from 0 (as long as unique_while holds) to %s (366 days)", maxUniqueFor)
		}
		u.For = d
	}
	if r.UniqueKey != "" {
		if err := checkUniqueKey(r.UniqueKey); err != nil {
			return nil, err
		}
		if strings.HasPrefix(r.UniqueKey, uniqueFieldsPrefix) {
			return nil, valueErr("unique_key", r.UniqueKey, "keys starting %q are derived ones (unique_fields)", uniqueFieldsPrefix)
		}
		u.Key = r.UniqueKey
		return u, nil
	}
	fields, err := checkUniqueFields(r.UniqueFields)
	if err != nil {
		return nil, err
	}
	u.Fields = fields
	u.Key = UniqueKeyOf(spec.Namespace, spec.Queue, spec.Type, fields, spec.Payload)
	return u, nil
}

// Unique reports whether r asks for a unique job (its key given or
// derived): such a submit reads the key's holder first.
func (r *SubmitRequest) Unique() bool { return r.UniqueKey != "" || len(r.UniqueFields) > 0 }

// uniqueField is the field a refusal of r's unique options names.
func uniqueField(r *SubmitRequest) string {
	if r.UniqueKey != "" {
		return "unique_key"
	}
	return "unique_fields"
}

// checkUniqueKey checks a given unique key: 1 to maxUniqueKeyBytes of
// valid UTF-8 without control characters.
func checkUniqueKey(k string) error { return checkText("unique_key", maxUniqueKeyBytes, k) }

// checkUniqueFields checks the payload fields a unique key is derived
// from, and returns them sorted (their order does not change the key):
// 1 to maxUniqueFields paths, each of 1 to maxUniqueDepth names of
// [A-Za-z0-9_-] joined by dots (a.b: field b of object a), at most
// maxUniqueFieldBytes, no path twice. The names need not be in the
// payload: a field that is not there is part of the key as absent.
func checkUniqueFields(fields []string) ([]string, error) {
	if len(fields) > maxUniqueFields {
		return nil, inputErr("unique_fields", "%d fields: at most %d", len(fields), maxUniqueFields)
	}
	const want = "want 1-8 names of 1-64 of [A-Za-z0-9_-] joined by dots"
	out := slices.Clone(fields)
	for _, f := range out {
		if f == "" || len(f) > maxUniqueFieldBytes {
			return nil, valueErr("unique_fields", f, want+", at most %d bytes", maxUniqueFieldBytes)
		}
		names := strings.Split(f, ".")
		if len(names) > maxUniqueDepth {
			return nil, valueErr("unique_fields", f, want)
		}
		for _, n := range names {
			if n == "" || len(n) > 64 || !domain.IsPlain(n) {
				return nil, valueErr("unique_fields", f, want)
			}
		}
	}
	slices.Sort(out)
	for i := 1; i < len(out); i++ {
		if out[i] == out[i-1] {
			return nil, valueErr("unique_fields", out[i], "named twice")
		}
	}
	return out, nil
}

// UniqueKeyOf derives the unique key of a job from its namespace, queue,
// type and the values of the payload fields named (sorted, checked): the
// SHA-256 of them all, the values in canonical JSON (objects' keys
// sorted, numbers in one form, strings as encoding/json writes them; a
// field not in the payload is absent, which is not null). Two payloads
// that are the same JSON value at those fields give the same key however
// they were written.
func UniqueKeyOf(ns, queue, jobType string, fields []string, payload []byte) string {
	h := sha256.New()
	for _, s := range []string{ns, queue, jobType} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	var root any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if dec.Decode(&root) != nil {
		root = nil
	}
	for _, f := range fields {
		h.Write([]byte(f))
		h.Write([]byte{0})
		v, ok := root, true
		for _, name := range strings.Split(f, ".") {
			obj, isObj := v.(map[string]any)
			if !isObj {
				ok = false
				break
			}
			if v, ok = obj[name]; !ok {
				break
			}
		}
		if !ok {
			h.Write([]byte{1}) // absent
		} else {
			h.Write([]byte{2})
			var b bytes.Buffer
			canonical(&b, v)
			h.Write(b.Bytes())
		}
		h.Write([]byte{0})
	}
	return uniqueFieldsPrefix + hex.EncodeToString(h.Sum(nil))
}

// canonical writes v (decoded with UseNumber) as canonical JSON.
func canonical(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			b.Write(kb)
			b.WriteByte(':')
			canonical(b, x[k])
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteByte(',')
			}
			canonical(b, e)
		}
		b.WriteByte(']')
	case json.Number:
		b.WriteString(canonicalNumber(string(x)))
	default:
		vb, _ := json.Marshal(x)
		b.Write(vb)
	}
}

// canonicalNumber writes a JSON number in one form: 1, 1.0 and 1e0 are
// the same number, and so the same key. An integer that fits in 64 bits
// is written exactly; any other number as the shortest decimal that
// reads back as the same float64 (so two integers beyond 64 bits that
// round to the same float64 are the same key).
func canonicalNumber(s string) string {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return strconv.FormatInt(i, 10)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s // out of float64's range: as written
	}
	if f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// UniqueHolds reports whether job j still holds its unique key at now, so
// that a submit of the key gets j: its window has not passed (For 0: no
// end) and its state is in its scope (While). A job without unique terms,
// or with another key, holds nothing.
func UniqueHolds(j *domain.Job, key string, now time.Time) bool {
	u := j.Spec.Unique
	if u == nil || u.Key != key || !j.PurgedAt.IsZero() {
		return false
	}
	if u.For > 0 && !now.Before(j.CreatedAt.Add(u.For)) {
		return false
	}
	switch u.While {
	case domain.UniqueWhileAny:
		return true
	case domain.UniqueWhileNotSucceeded:
		return j.State != domain.StateSucceeded
	}
	return !j.State.Terminal()
}

// UniqueReleasedBy reports whether event ev of unique job j ends its hold
// of its key by its state (not its window): a move out of its scope, or
// its purge.
func UniqueReleasedBy(j *domain.Job, ev *domain.Event) bool {
	if ev.Type == domain.EvPurged {
		return true
	}
	u := j.Spec.Unique
	if u == nil || ev.To == domain.StateNew {
		return false
	}
	switch u.While {
	case domain.UniqueWhileAny:
		return false
	case domain.UniqueWhileNotSucceeded:
		return ev.To == domain.StateSucceeded
	}
	return ev.To.Terminal()
}

// UniqueUntil is when j's window ends (zero: it has none).
func UniqueUntil(j *domain.Job) time.Time {
	if j.Spec.Unique == nil || j.Spec.Unique.For <= 0 {
		return time.Time{}
	}
	return j.CreatedAt.Add(j.Spec.Unique.For)
}

// Duplicate decides the event that tells unique job j was the answer to a
// submit of its key (by actor, at now): job.duplicate, no state change.
func Duplicate(j *domain.Job, actor string, now time.Time) *domain.Event {
	key := ""
	if j.Spec.Unique != nil {
		key = j.Spec.Unique.Key
	}
	return &domain.Event{Type: domain.EvDuplicate, JobID: j.ID, Time: now, Actor: actor, Level: domain.LevelInfo,
		Message: "a submit of its unique key was answered with this job", Fields: map[string]any{"unique_key": key}}
}

// UniqueClaim decides the event of key's subject that makes job id its
// holder.
func UniqueClaim(id, key string, now time.Time) *domain.Event {
	return &domain.Event{Type: domain.EvUniqueClaimed, JobID: id, Time: now, Level: domain.LevelInfo,
		Message: "holds the unique key", Fields: map[string]any{"unique_key": key}}
}
