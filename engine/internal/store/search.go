package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Limits of a search.
const (
	MaxPayloadConditions = 4   // payload.<path>=<value> conditions at once
	MaxPayloadPath       = 8   // fields in a condition's path
	MaxSearchText        = 256 // bytes of any search value
)

// Search selects jobs by what is in their records beyond their place: an
// id's beginning, a tag, the last error's code or words of its code and
// message, fields of the payload, and when it finished. Empty fields match
// everything. It is part of Filter (the HTTP API's GET /jobs, the command
// protocol's list, the SDK's List).
type Search struct {
	ID        string `json:"id,omitempty" msgpack:"id,omitempty"`                 // the id begins with it
	Tag       string `json:"tag,omitempty" msgpack:"tag,omitempty"`               // one of the job's tags
	ErrorCode string `json:"error_code,omitempty" msgpack:"error_code,omitempty"` // the last error's code
	// Error is text of the last error: its code or message contains it,
	// whatever the case.
	Error string `json:"error,omitempty" msgpack:"error,omitempty"`
	// Payload are conditions on the payload, "path=value": a field (a path
	// of names and array indexes, "customer.id", "items.0.sku") equal to
	// value (a string, a number, true, false or null).
	Payload []string `json:"payload,omitempty" msgpack:"payload,omitempty"`
	// FinishedAfter and FinishedBefore: the job ended in this span.
	FinishedAfter  time.Time `json:"finished_after,omitzero" msgpack:"finished_after,omitempty"`
	FinishedBefore time.Time `json:"finished_before,omitzero" msgpack:"finished_before,omitempty"`
}

// payloadCond is a parsed payload condition.
type payloadCond struct {
	path  []string
	value string
}

func parsePayloadCond(s string) (payloadCond, error) {
	path, value, ok := strings.Cut(s, "=")
	path = strings.TrimPrefix(path, "payload.")
	if !ok || path == "" {
		return payloadCond{}, fmt.Errorf("%q: want path=value (customer=42, customer.id=42)", s)
	}
	parts := strings.Split(path, ".")
	if len(parts) > MaxPayloadPath || slices.Contains(parts, "") {
		return payloadCond{}, fmt.Errorf("%q: a path of 1-%d field names", s, MaxPayloadPath)
	}
	return payloadCond{path: parts, value: value}, nil
}

// Validate checks a search's fields.
func (s *Search) Validate() error {
	for _, f := range []struct{ name, v string }{{"id", s.ID}, {"tag", s.Tag}, {"error_code", s.ErrorCode}, {"error", s.Error}} {
		if len(f.v) > MaxSearchText {
			return &commands.InputError{Field: f.name, Reason: fmt.Sprintf("at most %d bytes", MaxSearchText)}
		}
	}
	if len(s.Payload) > MaxPayloadConditions {
		return &commands.InputError{Field: "payload", Reason: fmt.Sprintf("at most %d conditions", MaxPayloadConditions)}
	}
	for _, c := range s.Payload {
		if len(c) > MaxSearchText {
			return &commands.InputError{Field: "payload", Reason: fmt.Sprintf("a condition of at most %d bytes", MaxSearchText)}
		}
		if _, err := parsePayloadCond(c); err != nil {
			return &commands.InputError{Field: "payload", Reason: err.Error()}
		}
	}
	if !s.FinishedAfter.IsZero() && !s.FinishedBefore.IsZero() && !s.FinishedAfter.Before(s.FinishedBefore) {
		return &commands.InputError{Field: "finished_before", Reason: "must be after finished_after"}
	}
	return nil
}

// Empty reports whether the search selects every job.
func (s *Search) Empty() bool {
	return s.ID == "" && s.Tag == "" && s.ErrorCode == "" && s.Error == "" && len(s.Payload) == 0 &&
		s.FinishedAfter.IsZero() && s.FinishedBefore.IsZero()
}

// NeedsRecord reports whether the search looks at what only a job's full
// record has (its payload): an index of summaries cannot decide it.
func (s *Search) NeedsRecord() bool { return len(s.Payload) > 0 }

// Match reports whether j passes the search.
func (s *Search) Match(j *domain.Job) bool {
	if s.Empty() {
		return true
	}
	var code, msg string
	if j.Error != nil {
		code, msg = j.Error.Code, j.Error.Message
	}
	return s.MatchSummary(j.ID, j.Spec.Tags, code, msg, j.FinishedAt) && s.matchPayload(j.Spec.Payload)
}

// MatchSummary is Match on what a summary of the job keeps (all but the
// payload).
func (s *Search) MatchSummary(id string, tags []string, code, msg string, finished time.Time) bool {
	switch {
	case s.ID != "" && !strings.HasPrefix(id, s.ID):
		return false
	case s.Tag != "" && !slices.Contains(tags, s.Tag):
		return false
	case s.ErrorCode != "" && code != s.ErrorCode:
		return false
	case s.Error != "" && !ContainsFold(code+" "+msg, s.Error):
		return false
	case !s.FinishedAfter.IsZero() && (finished.IsZero() || finished.Before(s.FinishedAfter)):
		return false
	case !s.FinishedBefore.IsZero() && (finished.IsZero() || !finished.Before(s.FinishedBefore)):
		return false
	}
	return true
}

// ContainsFold reports whether sub is in s, whatever the case.
func ContainsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), strings.ToLower(sub))
}

func (s *Search) matchPayload(payload []byte) bool {
	if len(s.Payload) == 0 {
		return true
	}
	var doc any
	d := json.NewDecoder(bytes.NewReader(payload))
	d.UseNumber()
	if len(payload) == 0 || d.Decode(&doc) != nil {
		return false
	}
	for _, raw := range s.Payload {
		c, err := parsePayloadCond(raw)
		if err != nil || !c.match(doc) {
			return false
		}
	}
	return true
}

func (c payloadCond) match(doc any) bool {
	v := doc
	for _, p := range c.path {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[p]; !ok {
				return false
			}
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return false
			}
			v = x[i]
		default:
			return false
		}
	}
	switch x := v.(type) {
	case string:
		return x == c.value
	case json.Number:
		if x.String() == c.value {
			return true
		}
		a, err1 := x.Float64()
		b, err2 := strconv.ParseFloat(c.value, 64)
		return err1 == nil && err2 == nil && a == b
	case bool:
		return strconv.FormatBool(x) == c.value
	case nil:
		return c.value == "null"
	}
	return false
}
