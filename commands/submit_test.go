package commands_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

func ptr[T any](v T) *T { return &v }

func TestSubmitRequestDefaults(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	spec, err := (&commands.SubmitRequest{Type: "demo.echo", Payload: commands.RawJSON(`{ "a" : [1, 2] }`)}).Spec(now)
	if err != nil {
		t.Fatal(err)
	}
	want := domain.Spec{Namespace: "default", Type: "demo.echo", Queue: "default", Payload: []byte(`{"a":[1,2]}`),
		MaxRetries: 3, Backoff: 30 * time.Second, BackoffCap: time.Hour, Jitter: 0.1,
		Timeout: time.Hour, MaxLeaseRequeues: 3}
	a, _ := json.Marshal(spec)
	b, _ := json.Marshal(want)
	if !bytes.Equal(a, b) {
		t.Fatalf("spec\n got %s\nwant %s", a, b)
	}
	ev, err := commands.Submit("J", spec, false, now)
	if err != nil || ev.To != domain.StateQueued || ev.Type != domain.EvSubmitted {
		t.Fatalf("submit: %+v %v", ev, err)
	}
	spec.RunAt = now.Add(time.Minute)
	if ev, _ := commands.Submit("J", spec, false, now); ev.To != domain.StateScheduled {
		t.Fatalf("delayed submit goes to %s", ev.To)
	}
}

func TestSubmitRequestRefusals(t *testing.T) {
	d := func(s string) *commands.Duration {
		v, _ := time.ParseDuration(s)
		return ptr(commands.Duration(v))
	}
	now := time.Now()
	for _, tc := range []struct {
		field string
		req   commands.SubmitRequest
	}{
		{"type", commands.SubmitRequest{}},
		{"type", commands.SubmitRequest{Type: "has space"}},
		{"type", commands.SubmitRequest{Type: "a.b.c/d"}},
		{"type", commands.SubmitRequest{Type: ".leading"}},
		{"type", commands.SubmitRequest{Type: strings.Repeat("x", 129)}},
		{"queue", commands.SubmitRequest{Type: "t", Queue: "a.b"}},
		{"queue", commands.SubmitRequest{Type: "t", Queue: "q*"}},
		{"namespace", commands.SubmitRequest{Type: "t", Namespace: "a:b"}},
		{"namespace", commands.SubmitRequest{Type: "t", Namespace: "@other"}},
		{"payload", commands.SubmitRequest{Type: "t", Payload: commands.RawJSON(`{"a":`)}},
		{"payload", commands.SubmitRequest{Type: "t", Payload: commands.RawJSON(`1 2`)}},
		{"payload", commands.SubmitRequest{Type: "t", Payload: commands.RawJSON(`"` + strings.Repeat("x", commands.MaxPayloadBytes) + `"`)}},
		{"delay", commands.SubmitRequest{Type: "t", Delay: d("-1s")}},
		{"delay", commands.SubmitRequest{Type: "t", Delay: d("1s"), RunAt: ptr(now)}},
		{"max_retries", commands.SubmitRequest{Type: "t", MaxRetries: ptr(-1)}},
		{"max_retries", commands.SubmitRequest{Type: "t", MaxRetries: ptr(1001)}},
		{"backoff", commands.SubmitRequest{Type: "t", Backoff: d("-1s")}},
		{"jitter", commands.SubmitRequest{Type: "t", Jitter: ptr(1.5)}},
		{"timeout", commands.SubmitRequest{Type: "t", Timeout: d("0s")}},
		{"idempotency_key", commands.SubmitRequest{Type: "t", IdempotencyKey: strings.Repeat("k", 257)}},
		{"tags", commands.SubmitRequest{Type: "t", Tags: []string{""}}},
		{"parent", commands.SubmitRequest{Type: "t", Parent: "not-an-id"}},
		{"retry_of", commands.SubmitRequest{Type: "t", RetryOf: "not-an-id"}},
		{"backoff_cap", commands.SubmitRequest{Type: "t", BackoffCap: d("-1ns")}},
		{"jitter", commands.SubmitRequest{Type: "t", Jitter: ptr(-0.1)}},
		{"jitter", commands.SubmitRequest{Type: "t", Jitter: ptr(math.NaN())}},
		{"jitter", commands.SubmitRequest{Type: "t", Jitter: ptr(math.Inf(1))}},
		{"timeout", commands.SubmitRequest{Type: "t", Timeout: d("-1s")}},
		{"max_lease_requeues", commands.SubmitRequest{Type: "t", MaxLeaseRequeues: ptr(-1)}},
		{"max_lease_requeues", commands.SubmitRequest{Type: "t", MaxLeaseRequeues: ptr(1001)}},
		{"queue_timeout", commands.SubmitRequest{Type: "t", QueueTimeout: d("-1s")}},
		{"priority", commands.SubmitRequest{Type: "t", Priority: commands.MaxPriority + 1}},
		{"priority", commands.SubmitRequest{Type: "t", Priority: commands.MinPriority - 1}},
		{"tags", commands.SubmitRequest{Type: "t", Tags: make([]string, 33)}},
		{"tags", commands.SubmitRequest{Type: "t", Tags: []string{"a\tb"}}},
		{"retry_on", commands.SubmitRequest{Type: "t", RetryOn: []string{""}}},
		{"retry_on", commands.SubmitRequest{Type: "t", RetryOn: []string{strings.Repeat("c", 129)}}},
		{"no_retry_on", commands.SubmitRequest{Type: "t", NoRetryOn: []string{"a\nb"}}},
		{"no_retry_on", commands.SubmitRequest{Type: "t", NoRetryOn: make([]string, 33)}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			_, err := tc.req.Spec(now)
			var ie *commands.InputError
			if !errors.As(err, &ie) || !errors.Is(err, commands.ErrInvalidInput) {
				t.Fatalf("got %v, want an InputError", err)
			}
			if ie.Field != tc.field {
				t.Fatalf("field %q, want %q (%v)", ie.Field, tc.field, err)
			}
		})
	}
}

// A value that is given is taken as it is, zero included: never replaced
// by the default.
func TestSubmitRequestTakesExplicitZeros(t *testing.T) {
	zero := ptr(commands.Duration(0))
	spec, err := (&commands.SubmitRequest{Type: "t", MaxRetries: ptr(0), Backoff: zero, BackoffCap: zero,
		Jitter: ptr(0.0), MaxLeaseRequeues: ptr(0), QueueTimeout: zero, Delay: zero,
		Priority: commands.MinPriority}).Spec(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if spec.MaxRetries != 0 || spec.Backoff != 0 || spec.BackoffCap != 0 || spec.Jitter != 0 || spec.MaxLeaseRequeues != 0 ||
		spec.QueueTimeout != 0 || !spec.RunAt.IsZero() || spec.Priority != commands.MinPriority {
		t.Fatalf("explicit zeros not taken: %+v", spec)
	}
	spec, err = (&commands.SubmitRequest{Type: "t", MaxRetries: ptr(1000), MaxLeaseRequeues: ptr(1000), Jitter: ptr(1.0),
		Priority: commands.MaxPriority, Timeout: ptr(commands.Duration(time.Nanosecond))}).Spec(time.Now())
	if err != nil || spec.MaxRetries != 1000 || spec.Jitter != 1 || spec.Timeout != time.Nanosecond {
		t.Fatalf("bounds refused: %+v %v", spec, err)
	}
}

// An InputError names the field, the value as given and the reason.
func TestInputErrorText(t *testing.T) {
	for _, tc := range []struct {
		req  commands.SubmitRequest
		want string
	}{
		{commands.SubmitRequest{Type: "t", MaxRetries: ptr(-1)}, "invalid max_retries -1: must be 0-1000"},
		{commands.SubmitRequest{Type: "t", Queue: "a.b"}, `invalid queue "a.b": want 1-64 of [A-Za-z0-9_-]`},
		{commands.SubmitRequest{Type: "t", Delay: ptr(commands.Duration(-time.Second))}, "invalid delay -1s: must not be negative"},
		{commands.SubmitRequest{Type: "t", Timeout: ptr(commands.Duration(0))}, "invalid timeout 0s: must be more than 0"},
		{commands.SubmitRequest{Type: "t", Jitter: ptr(math.NaN())}, "invalid jitter NaN: must be a fraction from 0 to 1"},
		{commands.SubmitRequest{Type: "t", Priority: 5000}, "invalid priority 5000: must be -1000 to 1000"},
		{commands.SubmitRequest{}, "invalid type: is required"},
	} {
		if _, err := tc.req.Spec(time.Now()); err == nil || err.Error() != tc.want {
			t.Errorf("got %v, want %q", err, tc.want)
		}
	}
}

func TestCheckProgressAndReason(t *testing.T) {
	for _, bad := range []struct {
		cur, total int64
		msg        string
	}{{-1, 0, ""}, {0, -1, ""}, {5, 3, ""}, {1, 2, strings.Repeat("m", commands.MaxProgressMessage+1)}} {
		var ie *commands.InputError
		if err := commands.CheckProgress(bad.cur, bad.total, bad.msg); !errors.As(err, &ie) || ie.Field != "progress" {
			t.Errorf("progress %d/%d (%d bytes): %v", bad.cur, bad.total, len(bad.msg), err)
		}
	}
	for _, ok := range [][2]int64{{0, 0}, {3, 0}, {3, 3}, {0, 5}} {
		if err := commands.CheckProgress(ok[0], ok[1], "m"); err != nil {
			t.Errorf("progress %d/%d: %v", ok[0], ok[1], err)
		}
	}
	if err := commands.CheckReason("reason", strings.Repeat("r", commands.MaxReasonBytes)); err != nil {
		t.Fatal(err)
	}
	var ie *commands.InputError
	if err := commands.CheckReason("reason", strings.Repeat("r", commands.MaxReasonBytes+1)); !errors.As(err, &ie) || ie.Field != "reason" {
		t.Fatalf("long reason: %v", err)
	}
}

// A duration out of range is refused where it is decoded, with an
// InputError (its decoder names the field).
func TestDurationOutOfRange(t *testing.T) {
	for _, body := range []string{`{"type":"t","delay":1e10}`, `{"type":"t","timeout":-1e10}`, `{"type":"t","backoff":"1e300"}`} {
		var r commands.SubmitRequest
		err := json.Unmarshal([]byte(body), &r)
		if !errors.Is(err, commands.ErrInvalidInput) {
			t.Errorf("%s: %v, want an InputError", body, err)
		}
	}
	b, _ := msgpack.Marshal(map[string]any{"type": "t", "queue_timeout": 1e12})
	var r commands.SubmitRequest
	if err := streams.UnmarshalStrict(b, &r); !errors.Is(err, commands.ErrInvalidInput) {
		t.Errorf("msgpack: %v, want an InputError", err)
	}
	if err := json.Unmarshal([]byte(`{"type":"t","delay":1e9}`), &r); err != nil {
		t.Errorf("the bound itself: %v", err)
	}
}

func TestSubmitRequestJSONDurations(t *testing.T) {
	var r commands.SubmitRequest
	err := json.Unmarshal([]byte(`{"type":"t","delay":"1m30s","timeout":2.5,"backoff":0,"payload":{"x":[1]}}`), &r)
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(*r.Delay) != 90*time.Second || time.Duration(*r.Timeout) != 2500*time.Millisecond || *r.Backoff != 0 {
		t.Fatalf("durations %v %v %v", *r.Delay, *r.Timeout, *r.Backoff)
	}
	if string(r.Payload) != `{"x":[1]}` {
		t.Fatalf("payload %s", r.Payload)
	}
	if err := json.Unmarshal([]byte(`{"type":"t","delay":"soon"}`), &r); err == nil {
		t.Fatal("bad duration accepted")
	}
	if err := json.Unmarshal([]byte(`{"type":"t","delay":true}`), &r); err == nil {
		t.Fatal("bool duration accepted")
	}
}

func TestSubmitRequestMsgpackPayload(t *testing.T) {
	b, _ := msgpack.Marshal(map[string]any{"type": "t", "payload": map[string]any{"n": 1, "s": []any{"a"}}, "delay": "2s"})
	var r commands.SubmitRequest
	if err := msgpack.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if string(r.Payload) != `{"n":1,"s":["a"]}` || time.Duration(*r.Delay) != 2*time.Second {
		t.Fatalf("payload %s delay %v", r.Payload, *r.Delay)
	}
	b, _ = msgpack.Marshal(map[string]any{"type": "t", "payload": []byte(`[1,2]`), "timeout": 3})
	r = commands.SubmitRequest{}
	if err := msgpack.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	if string(r.Payload) != `[1,2]` || time.Duration(*r.Timeout) != 3*time.Second {
		t.Fatalf("binary payload %s timeout %v", r.Payload, *r.Timeout)
	}
}

// FuzzSubmitRequestJSON: whatever arrives, decoding and validation return
// an error or a spec, never panic, and an accepted spec is valid.
func FuzzSubmitRequestJSON(f *testing.F) {
	for _, s := range []string{`{"type":"demo.echo","payload":{"a":1}}`, `{"type":"x","delay":"1s","max_retries":2}`,
		`{"type":"x","run_at":"2030-01-01T00:00:00Z","tags":["a"]}`, `{"type":1}`, `[]`, `{"delay":-5}`, `{"jitter":"x"}`,
		`{"type":"x","priority":99999}`, `{"type":"x","delay":1e10}`, `{"type":"x","retry_on":[""]}`, `{"type":"x","jitter":-1}`,
		`{"type":"x","concurrency_key":"cust-1"}`, `{"type":"x","concurrency_key":"a\u0000"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r commands.SubmitRequest
		if json.Unmarshal(data, &r) != nil {
			return
		}
		checkSpec(t, &r)
	})
}

// FuzzSubmitRequestMsgpack is FuzzSubmitRequestJSON for msgpack commands.
func FuzzSubmitRequestMsgpack(f *testing.F) {
	for _, v := range []map[string]any{{"type": "demo.echo", "payload": map[string]any{"a": 1}},
		{"type": "x", "delay": 1.5, "tags": []string{"a"}}, {"type": 3}, {"payload": []byte("{")},
		{"type": "x", "timeout": 1e12}, {"type": "x", "max_retries": uint64(1) << 63}, {"type": "x", "jitter": math.NaN()},
		{"type": "x", "run_at": "2030-01-01T00:00:00Z"}, {"type": "x", "run_at": time.Now()}, {"type": "x", "run_at": "soon"},
		{"type": "x", "payload": nil, "namespace": ""}} {
		b, _ := msgpack.Marshal(v)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r commands.SubmitRequest
		if streams.UnmarshalStrict(data, &r) != nil {
			return
		}
		checkSpec(t, &r)
	})
}

func checkSpec(t *testing.T, r *commands.SubmitRequest) {
	spec, err := r.Spec(time.Now())
	if err != nil {
		if !errors.Is(err, commands.ErrInvalidInput) {
			t.Fatalf("validation error %v is not ErrInvalidInput", err)
		}
		return
	}
	if !domain.ValidType(spec.Type) || !domain.ValidQueue(spec.Queue) || !domain.ValidNamespace(spec.Namespace) ||
		!json.Valid(spec.Payload) || spec.MaxRetries < 0 || spec.MaxRetries > commands.MaxRetriesLimit || spec.Timeout <= 0 ||
		spec.Backoff < 0 || spec.BackoffCap < 0 || spec.QueueTimeout < 0 || spec.MaxLeaseRequeues < 0 ||
		spec.MaxLeaseRequeues > commands.MaxRetriesLimit || !(spec.Jitter >= 0 && spec.Jitter <= 1) ||
		spec.Priority < commands.MinPriority || spec.Priority > commands.MaxPriority || commands.CheckConcurrencyKey(spec.ConcurrencyKey) != nil {
		t.Fatalf("accepted an invalid spec: %+v", spec)
	}
}
