package commands_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

func uniqueSpec(t *testing.T, r commands.SubmitRequest) *domain.Unique {
	t.Helper()
	spec, err := r.Spec(time.Now())
	if err != nil {
		t.Fatalf("%+v: %v", r, err)
	}
	return spec.Unique
}

// A key derived from payload fields depends on the namespace, queue, type
// and the values of those fields as JSON values, not on how the payload
// was written, the order of the fields named or the other fields.
func TestUniqueKeyDerivationIsCanonical(t *testing.T) {
	base := commands.SubmitRequest{Type: "email.send", Queue: "mail", UniqueFields: []string{"to", "opts.lang"}}
	key := func(payload string, edit func(*commands.SubmitRequest)) string {
		r := base
		r.Payload = commands.RawJSON(payload)
		if edit != nil {
			edit(&r)
		}
		return uniqueSpec(t, r).Key
	}
	k := key(`{"to":"ada@example.com","opts":{"lang":"en","x":1},"body":"hi"}`, nil)
	if !strings.HasPrefix(k, "fields:") || len(k) != len("fields:")+64 {
		t.Fatalf("derived key %q", k)
	}
	for _, same := range []struct {
		payload string
		edit    func(*commands.SubmitRequest)
	}{
		{`{ "body":"other", "opts":{"x":2, "lang":"en"}, "to":"ada@example.com" }`, nil},
		{`{"to":"ada@example.com","opts":{"lang":"en"}}`, func(r *commands.SubmitRequest) { r.UniqueFields = []string{"opts.lang", "to"} }},
		{`{"to":"\u0061da@example.com","opts":{"lang":"en"}}`, nil},
	} {
		if got := key(same.payload, same.edit); got != k {
			t.Fatalf("%s: key %s, want %s", same.payload, got, k)
		}
	}
	for _, other := range []struct {
		payload string
		edit    func(*commands.SubmitRequest)
	}{
		{`{"to":"bob@example.com","opts":{"lang":"en"}}`, nil},
		{`{"to":"ada@example.com","opts":{"lang":"de"}}`, nil},
		{`{"to":"ada@example.com"}`, nil},                      // opts.lang absent
		{`{"to":"ada@example.com","opts":{"lang":null}}`, nil}, // null is not absent
		{`{"to":"ada@example.com","opts":{"lang":"en"}}`, func(r *commands.SubmitRequest) { r.Queue = "other" }},
		{`{"to":"ada@example.com","opts":{"lang":"en"}}`, func(r *commands.SubmitRequest) { r.Type = "email.other" }},
		{`{"to":"ada@example.com","opts":{"lang":"en"}}`, func(r *commands.SubmitRequest) { r.Namespace = "team-a" }},
		{`{"to":"ada@example.com","opts":{"lang":"en"}}`, func(r *commands.SubmitRequest) { r.UniqueFields = []string{"to"} }},
	} {
		if got := key(other.payload, other.edit); got == k {
			t.Fatalf("%s: same key %s", other.payload, got)
		}
	}
	// Numbers are one form: 1, 1.0, 1e0 and 10e-1 are the same value.
	n := commands.SubmitRequest{Type: "t", UniqueFields: []string{"n"}}
	var keys []string
	for _, p := range []string{`{"n":1}`, `{"n":1.0}`, `{"n":1e0}`, `{"n":10e-1}`, `{"n":[1]}`, `{"n":{"b":[1,{"d":2,"c":1}],"a":"x"}}`, `{"n":{"a":"x","b":[1.0,{"c":1,"d":2e0}]}}`} {
		r := n
		r.Payload = commands.RawJSON(p)
		keys = append(keys, uniqueSpec(t, r).Key)
	}
	if keys[0] != keys[1] || keys[0] != keys[2] || keys[0] != keys[3] || keys[0] == keys[4] || keys[5] != keys[6] || keys[4] == keys[5] {
		t.Fatalf("number and object forms: %v", keys)
	}
	// Stable across builds: the derivation is part of the log's contract.
	r := commands.SubmitRequest{Type: "t", Payload: commands.RawJSON(`{"a":1}`), UniqueFields: []string{"a"}}
	if got, want := uniqueSpec(t, r).Key, commands.UniqueKeyOf("default", "default", "t", []string{"a"}, []byte(`{"a":1}`)); got != want {
		t.Fatalf("key %s, UniqueKeyOf %s", got, want)
	}
	if got := uniqueSpec(t, r).Key; got != "fields:"+stableKeyOfA1 {
		t.Fatalf("the derived key of {\"a\":1} changed: %s", got)
	}
}

// stableKeyOfA1 is the derived key of type t's payload {"a":1} with
// unique_fields ["a"] in the default namespace and queue.
const stableKeyOfA1 = "f99cda1850124f4838e828c87c07882a58a8620a8a184c0477acb8fab33282b0"

// A unique key given is taken as it is, with the defaults: unique while
// active, no window; the options resolve into the spec.
func TestUniqueOptionsResolve(t *testing.T) {
	d := commands.Duration(time.Hour)
	u := uniqueSpec(t, commands.SubmitRequest{Type: "t", UniqueKey: "report:2026-11"})
	if u == nil || u.Key != "report:2026-11" || u.While != domain.UniqueWhileActive || u.For != 0 || u.Fields != nil {
		t.Fatalf("%+v", u)
	}
	u = uniqueSpec(t, commands.SubmitRequest{Type: "t", UniqueFields: []string{"b", "a"}, UniqueFor: &d, UniqueWhile: "any"})
	if u.For != time.Hour || u.While != domain.UniqueWhileAny || strings.Join(u.Fields, ",") != "a,b" {
		t.Fatalf("%+v", u)
	}
	if u := uniqueSpec(t, commands.SubmitRequest{Type: "t"}); u != nil {
		t.Fatalf("not unique: %+v", u)
	}
	max := commands.Duration(commands.MaxUniqueFor)
	if u := uniqueSpec(t, commands.SubmitRequest{Type: "t", UniqueKey: strings.Repeat("k", 256), UniqueFor: &max, UniqueWhile: "not-succeeded",
		UniqueFields: nil}); u.For != 366*24*time.Hour || u.While != domain.UniqueWhileNotSucceeded {
		t.Fatalf("%+v", u)
	}
}

// Every bad unique option is refused naming its field.
func TestUniqueRefusals(t *testing.T) {
	d := func(x time.Duration) *commands.Duration { v := commands.Duration(x); return &v }
	nine := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"}
	for _, tc := range []struct {
		field string
		req   commands.SubmitRequest
	}{
		{"unique_fields", commands.SubmitRequest{UniqueKey: "k", UniqueFields: []string{"a"}}},
		{"unique_for", commands.SubmitRequest{UniqueFor: d(time.Hour)}},
		{"unique_while", commands.SubmitRequest{UniqueWhile: "any"}},
		{"unique_while", commands.SubmitRequest{UniqueKey: "k", UniqueWhile: "done"}},
		{"unique_for", commands.SubmitRequest{UniqueKey: "k", UniqueFor: d(-time.Second)}},
		{"unique_for", commands.SubmitRequest{UniqueKey: "k", UniqueFor: d(commands.MaxUniqueFor + time.Second)}},
		{"unique_key", commands.SubmitRequest{UniqueKey: strings.Repeat("k", 257)}},
		{"unique_key", commands.SubmitRequest{UniqueKey: "a\x00b"}},
		{"unique_key", commands.SubmitRequest{UniqueKey: "\xff"}},
		{"unique_key", commands.SubmitRequest{UniqueKey: "fields:abc"}},
		{"unique_key", commands.SubmitRequest{UniqueKey: "k", IdempotencyKey: "i"}},
		{"unique_fields", commands.SubmitRequest{UniqueFields: []string{"a"}, IdempotencyKey: "i"}},
		{"unique_key", commands.SubmitRequest{UniqueKey: "k", Parent: "01ARZ3NDEKTSV4RRFFQ69G5FAV"}},
		{"unique_fields", commands.SubmitRequest{UniqueFields: nine}},
		{"unique_fields", commands.SubmitRequest{UniqueFields: []string{""}}},
		{"unique_fields", commands.SubmitRequest{UniqueFields: []string{"a..b"}}},
		{"unique_fields", commands.SubmitRequest{UniqueFields: []string{"a b"}}},
		{"unique_fields", commands.SubmitRequest{UniqueFields: []string{strings.Repeat("a", 65)}}},
		{"unique_fields", commands.SubmitRequest{UniqueFields: []string{"a.b.c.d.e.f.g.h.i"}}},
		{"unique_fields", commands.SubmitRequest{UniqueFields: []string{"a", "b", "a"}}},
		{"unique_fields", commands.SubmitRequest{UniqueFields: []string{"a"}, Files: []domain.FileRef{{Name: "x", Digest: "sha256:x"}}}},
	} {
		tc.req.Type = "t"
		_, err := tc.req.Spec(time.Now())
		var in *commands.InputError
		if !errors.As(err, &in) || in.Field != tc.field || !errors.Is(err, commands.ErrInvalidInput) {
			t.Errorf("%+v: %v, want an input error of %s", tc.req, err, tc.field)
		}
	}
	// A schedule's job and a workflow's step are not unique on their own.
	if _, err := commands.ScheduleJob(&commands.SubmitRequest{Type: "t", UniqueKey: "k"}, "default", time.Now()); !isField(err, "job.unique_key") {
		t.Errorf("schedule job: %v", err)
	}
}

func isField(err error, field string) bool {
	var in *commands.InputError
	return errors.As(err, &in) && in.Field == field
}

// A job holds its key while its window lasts and its state is in its
// scope; not after it was purged, nor a key of another.
func TestUniqueHolds(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	job := func(while string, window time.Duration, state domain.State) *domain.Job {
		return &domain.Job{ID: "J", State: state, CreatedAt: t0,
			Spec: domain.Spec{Unique: &domain.Unique{Key: "k", While: while, For: window}}}
	}
	scopes := map[string]map[domain.State]bool{
		domain.UniqueWhileActive:       {domain.StatePending: true, domain.StateQueued: true, domain.StateRunning: true, domain.StateWaiting: true, domain.StateScheduled: true, domain.StateSucceeded: false, domain.StateFailed: false, domain.StateCancelled: false},
		domain.UniqueWhileNotSucceeded: {domain.StateQueued: true, domain.StateRunning: true, domain.StateSucceeded: false, domain.StateFailed: true, domain.StateCancelled: true},
		domain.UniqueWhileAny:          {domain.StateQueued: true, domain.StateSucceeded: true, domain.StateFailed: true, domain.StateCancelled: true},
	}
	for while, states := range scopes {
		for state, want := range states {
			if got := commands.UniqueHolds(job(while, 0, state), "k", t0.Add(1000*time.Hour)); got != want {
				t.Errorf("%s, %s, no window: holds %v", while, state, got)
			}
			w := job(while, time.Minute, state)
			if got := commands.UniqueHolds(w, "k", t0.Add(time.Minute-time.Nanosecond)); got != want {
				t.Errorf("%s, %s, in its window: holds %v", while, state, got)
			}
			if commands.UniqueHolds(w, "k", t0.Add(time.Minute)) {
				t.Errorf("%s, %s: holds at the end of its window", while, state)
			}
		}
	}
	j := job(domain.UniqueWhileAny, 0, domain.StateSucceeded)
	if commands.UniqueHolds(j, "other", t0) {
		t.Error("holds another key")
	}
	j.PurgedAt = t0
	if commands.UniqueHolds(j, "k", t0) {
		t.Error("a purged job holds its key")
	}
	if commands.UniqueHolds(&domain.Job{State: domain.StateQueued}, "k", t0) {
		t.Error("a job that is not unique holds a key")
	}
	ev := commands.Duplicate(job("any", 0, domain.StateQueued), "token:x", t0)
	if ev.Type != domain.EvDuplicate || ev.To != "" || ev.JobID != "J" || ev.Fields["unique_key"] != "k" {
		t.Fatalf("%+v", ev)
	}
}

// Deriving a key from any payload never fails and is deterministic; the
// fields are checked before.
func FuzzUniqueKey(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":{"b":[1,2,{"c":null}]}}`, `[]`, `null`, `"x"`, `{"a":1e400}`, `{"a":-0}`, `{"a":123456789012345678901234567890}`, `{`} {
		f.Add([]byte(s), "a", "a.b")
	}
	f.Fuzz(func(t *testing.T, payload []byte, f1, f2 string) {
		fields, err := commands.CheckUniqueFields([]string{f1, f2})
		if err != nil {
			if !errors.Is(err, commands.ErrInvalidInput) {
				t.Fatal(err)
			}
			return
		}
		k := commands.UniqueKeyOf("ns", "q", "t", fields, payload)
		if k != commands.UniqueKeyOf("ns", "q", "t", fields, payload) || len(k) != 71 {
			t.Fatalf("key %q", k)
		}
		var v any
		if json.Unmarshal(payload, &v) == nil {
			// The same value written again (Go's encoding) is the same key.
			again, _ := json.Marshal(v)
			if json.Valid(payload) && !hasBigNumbers(payload) && commands.UniqueKeyOf("ns", "q", "t", fields, again) != k {
				t.Fatalf("%s and %s: different keys", payload, again)
			}
		}
	})
}

// hasBigNumbers reports whether payload has a number that float64 does
// not hold exactly as an integer (json.Unmarshal into any rounds it).
func hasBigNumbers(payload []byte) bool {
	dec := json.NewDecoder(strings.NewReader(string(payload)))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		if n, ok := tok.(json.Number); ok {
			if _, err := n.Int64(); err != nil {
				return true
			}
		}
	}
}

// The events that end a hold by state: a move out of the scope, a purge.
func TestUniqueReleasedBy(t *testing.T) {
	job := func(while string) *domain.Job {
		return &domain.Job{Spec: domain.Spec{Unique: &domain.Unique{Key: "k", While: while}}}
	}
	ev := func(typ string, to domain.State) *domain.Event { return &domain.Event{Type: typ, To: to} }
	for _, c := range []struct {
		while string
		ev    *domain.Event
		want  bool
	}{
		{"active", ev(domain.EvSucceeded, domain.StateSucceeded), true},
		{"active", ev(domain.EvCancelled, domain.StateCancelled), true},
		{"active", ev(domain.EvStarted, domain.StateRunning), false},
		{"active", ev(domain.EvDuplicate, ""), false},
		{"not-succeeded", ev(domain.EvFailed, domain.StateFailed), false},
		{"not-succeeded", ev(domain.EvSucceeded, domain.StateSucceeded), true},
		{"any", ev(domain.EvSucceeded, domain.StateSucceeded), false},
		{"any", ev(domain.EvPurged, ""), true},
		{"active", ev(domain.EvPurged, ""), true},
	} {
		if got := commands.UniqueReleasedBy(job(c.while), c.ev); got != c.want {
			t.Errorf("%s, %s -> %q: %v", c.while, c.ev.Type, c.ev.To, got)
		}
	}
}
