package commands_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/streams"
)

func ptr[T any](v T) *T { return &v }

func TestSubmitRequestDefaults(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	spec, err := (&commands.SubmitRequest{Type: "demo.echo", Payload: commands.RawJSON(`{ "a" : [1, 2] }`)}).Spec(now)
	if err != nil {
		t.Fatal(err)
	}
	want := streams.Spec{Namespace: "default", Type: "demo.echo", Queue: "default", Payload: []byte(`{"a":[1,2]}`),
		MaxRetries: 3, Backoff: 30 * time.Second, BackoffCap: time.Hour, Jitter: 0.1,
		Timeout: time.Hour, MaxLeaseRequeues: 3}
	a, _ := json.Marshal(spec)
	b, _ := json.Marshal(want)
	if !bytes.Equal(a, b) {
		t.Fatalf("spec\n got %s\nwant %s", a, b)
	}
	ev, err := commands.Submit("J", spec, now)
	if err != nil || ev.To != streams.StateQueued || ev.Type != streams.EvSubmitted {
		t.Fatalf("submit: %+v %v", ev, err)
	}
	spec.RunAt = now.Add(time.Minute)
	if ev, _ := commands.Submit("J", spec, now); ev.To != streams.StateScheduled {
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
		`{"type":"x","run_at":"2030-01-01T00:00:00Z","tags":["a"]}`, `{"type":1}`, `[]`, `{"delay":-5}`, `{"jitter":"x"}`} {
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
		{"type": "x", "delay": 1.5, "tags": []string{"a"}}, {"type": 3}, {"payload": []byte("{")}} {
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
	if !streams.ValidType(spec.Type) || !streams.ValidQueue(spec.Queue) || !streams.ValidNamespace(spec.Namespace) ||
		!json.Valid(spec.Payload) || spec.MaxRetries < 0 || spec.Timeout <= 0 || spec.Backoff < 0 {
		t.Fatalf("accepted an invalid spec: %+v", spec)
	}
}
