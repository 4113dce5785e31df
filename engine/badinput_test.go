package engine_test

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/cmdservice"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// cmdReply is a command's reply, JSON or msgpack.
type cmdReply struct {
	Job   map[string]any           `json:"job"`
	Error *cmdservice.CommandError `json:"error"`
}

// askCommand sends a command over NATS: JSON (with its Content-Type) when
// body is a string, else body encoded as msgpack.
func askCommand(t *testing.T, nc *nats.Conn, verb string, body any) cmdReply {
	t.Helper()
	m := nats.NewMsg(streams.CommandPrefix + "." + verb)
	asJSON := false
	switch b := body.(type) {
	case string:
		m.Data, asJSON = []byte(b), true
		m.Header.Set("Content-Type", "application/json")
	default:
		var err error
		if m.Data, err = streams.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", verb, err)
	}
	data := resp.Data
	if !asJSON { // the same shape as JSON: read it as JSON
		var generic map[string]any
		if err := streams.Unmarshal(data, &generic); err != nil {
			t.Fatalf("%s reply: %v", verb, err)
		}
		if data, err = json.Marshal(generic); err != nil {
			t.Fatal(err)
		}
	}
	var out cmdReply
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s reply %q: %v", verb, data, err)
	}
	return out
}

// Every value out of range in a command is refused, JSON or msgpack, with
// an error naming the field, and writes nothing; a value that does not
// decode names its field too.
func TestCommandBadInputNamesFieldWritesNothing(t *testing.T) {
	h := newHarness(t)
	nc := testkit.Conn(t, h.srv)
	bad, invalid := problems.MalformedRequest, engine.ProblemInvalidInput
	mp := func(kv ...any) map[string]any {
		m := map[string]any{"type": "demo.x"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	before := h.lastSeq()
	for _, tc := range []struct {
		name  string
		verb  string
		body  any // string: JSON; else msgpack
		slug  string
		field string
	}{
		{"max_retries -1", "submit", `{"type":"demo.x","max_retries":-1}`, invalid, "max_retries"},
		{"max_retries 1001", "submit", `{"type":"demo.x","max_retries":1001}`, invalid, "max_retries"},
		{"max_retries wrong type", "submit", `{"type":"demo.x","max_retries":"three"}`, bad, "max_retries"},
		{"max_lease_requeues -1", "submit", `{"type":"demo.x","max_lease_requeues":-1}`, invalid, "max_lease_requeues"},
		{"timeout 0", "submit", `{"type":"demo.x","timeout":0}`, invalid, "timeout"},
		{"timeout -1s", "submit", `{"type":"demo.x","timeout":"-1s"}`, invalid, "timeout"},
		{"backoff -1", "submit", `{"type":"demo.x","backoff":-1}`, invalid, "backoff"},
		{"backoff_cap -1", "submit", `{"type":"demo.x","backoff_cap":-1}`, invalid, "backoff_cap"},
		{"delay -1", "submit", `{"type":"demo.x","delay":-1}`, invalid, "delay"},
		{"delay 1e10 s", "submit", `{"type":"demo.x","delay":1e10}`, invalid, "delay"},
		{"delay not a duration", "submit", `{"type":"demo.x","delay":"soon"}`, bad, "delay"},
		{"queue_timeout -5", "submit", `{"type":"demo.x","queue_timeout":-5}`, invalid, "queue_timeout"},
		{"queue_timeout 1e12 s", "submit", `{"type":"demo.x","queue_timeout":"1e12"}`, invalid, "queue_timeout"},
		{"jitter -0.1", "submit", `{"type":"demo.x","jitter":-0.1}`, invalid, "jitter"},
		{"jitter 1.5", "submit", `{"type":"demo.x","jitter":1.5}`, invalid, "jitter"},
		{"jitter 1e308", "submit", `{"type":"demo.x","jitter":1e308}`, invalid, "jitter"},
		{"priority 1001", "submit", `{"type":"demo.x","priority":1001}`, invalid, "priority"},
		{"priority -1001", "submit", `{"type":"demo.x","priority":-1001}`, invalid, "priority"},
		{"empty tag", "submit", `{"type":"demo.x","tags":[""]}`, invalid, "tags"},
		{"empty retry_on", "submit", `{"type":"demo.x","retry_on":[""]}`, invalid, "retry_on"},
		{"long no_retry_on", "submit", `{"type":"demo.x","no_retry_on":["` + strings.Repeat("c", 129) + `"]}`, invalid, "no_retry_on"},
		{"run_at not a time", "submit", `{"type":"demo.x","run_at":"tomorrow"}`, bad, "run_at"},
		{"msgpack max_retries -1", "submit", mp("max_retries", -1), invalid, "max_retries"},
		{"msgpack max_retries 2^63", "submit", mp("max_retries", uint64(1)<<63), invalid, "max_retries"},
		{"msgpack max_retries wrong type", "submit", mp("max_retries", "three"), bad, "max_retries"},
		{"msgpack timeout 0", "submit", mp("timeout", 0), invalid, "timeout"},
		{"msgpack delay 1e12 s", "submit", mp("delay", 1e12), invalid, "delay"},
		{"msgpack delay NaN", "submit", mp("delay", math.NaN()), invalid, "delay"},
		{"msgpack jitter NaN", "submit", mp("jitter", math.NaN()), invalid, "jitter"},
		{"msgpack jitter +Inf", "submit", mp("jitter", math.Inf(1)), invalid, "jitter"},
		{"msgpack queue_timeout -1", "submit", mp("queue_timeout", -1), invalid, "queue_timeout"},
		{"msgpack priority", "submit", mp("priority", 5000), invalid, "priority"},
		{"msgpack backoff wrong type", "submit", mp("backoff", true), bad, "backoff"},
		{"list limit -1", "list", `{"limit":-1}`, invalid, "limit"},
		{"msgpack list limit -1", "list", map[string]any{"limit": -1}, invalid, "limit"},
		{"list limit wrong type", "list", `{"limit":"ten"}`, bad, "limit"},
		{"cancel reason too long", "cancel", `{"id":"` + domain.NewID() + `","reason":"` + strings.Repeat("r", 1025) + `"}`, invalid, "reason"},
		{"get with a reason", "get", `{"id":"` + domain.NewID() + `","reason":"r"}`, invalid, "reason"},
		{"events with a reason", "events", `{"id":"` + domain.NewID() + `","reason":"r"}`, invalid, "reason"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := askCommand(t, nc, tc.verb, tc.body)
			e := r.Error
			if e == nil {
				t.Fatalf("accepted: %v", r.Job)
			}
			if e.Type != tc.slug || e.Status != 400 || e.Field != tc.field {
				t.Fatalf("error %+v, want type %s status 400 field %s", e, tc.slug, tc.field)
			}
			if !strings.Contains(e.Detail, tc.field) {
				t.Fatalf("detail %q does not name %s", e.Detail, tc.field)
			}
		})
	}
	if after := h.lastSeq(); after != before {
		t.Fatalf("refused commands wrote %d events", after-before)
	}
	// Explicit zeros are taken as given, not replaced by defaults.
	r := askCommand(t, nc, "submit", `{"type":"demo.x","max_retries":0,"backoff":0,"jitter":0,"max_lease_requeues":0}`)
	if r.Error != nil || r.Job["max_retries"] != float64(0) || r.Job["backoff_seconds"] != float64(0) ||
		r.Job["max_lease_requeues"] != float64(0) {
		t.Fatalf("explicit zeros: %+v %v", r.Error, r.Job)
	}
}

// FuzzFieldOf: whatever a command body is, FieldOf does not panic, names
// only a field of the request and only with that field's error, and names
// none of a body that decodes.
func FuzzFieldOf(f *testing.F) {
	for _, s := range []string{`{"type":"a","delay":1e10}`, `{"type":"a","max_retries":"x"}`, `{"run_at":"soon","tags":[1]}`,
		`{"type":"a"}`, `[]`, `{"DELAY":-1e300}`, `{"payload":{"a":[1,{"b":null}]}}`} {
		f.Add([]byte(s), true)
	}
	for _, v := range []map[string]any{{"type": "a", "timeout": 1e12}, {"max_retries": "x"}, {"jitter": math.NaN()}, {"tags": []any{1}}} {
		b, _ := streams.Marshal(v)
		f.Add(b, false)
	}
	fields := map[string]bool{}
	for _, name := range []string{"namespace", "type", "payload", "queue", "delay", "run_at", "max_retries", "backoff",
		"backoff_cap", "jitter", "timeout", "idempotency_key", "tags", "parent", "retry_of", "priority", "retry_on",
		"no_retry_on", "max_lease_requeues", "queue_timeout"} {
		fields[name] = true
	}
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool) {
		var req commands.SubmitRequest
		field, err := engine.FieldOf(body, asJSON, &req)
		if field == "" {
			return
		}
		if !fields[field] || err == nil {
			t.Fatalf("FieldOf named %q (%v)", field, err)
		}
		var whole commands.SubmitRequest
		var derr error
		if asJSON {
			derr = json.Unmarshal(body, &whole)
		} else {
			derr = streams.UnmarshalStrict(body, &whole)
		}
		if derr == nil {
			t.Fatalf("FieldOf named %q of a body that decodes: %v", field, err)
		}
	})
}
