package streams_test

import (
	"bytes"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

func TestTokenRoundTrip(t *testing.T) {
	for in, want := range map[string]string{
		"demo.echo":                "demo~2Eecho",
		"plain_name-1":             "plain_name-1",
		"@global:modifiers:Rotate": "~40global~3Amodifiers~3ARotate",
		"a~b":                      "a~7Eb",
		"café\x00":                 "caf~C3~A9~00",
	} {
		got := streams.Token(in)
		if again := streams.Token(in); got != want || again != want { // the second from the cache
			t.Errorf("Token(%q) = %q then %q, want %q", in, got, again, want)
		}
		back, err := streams.ParseToken(got)
		if err != nil || back != in {
			t.Errorf("ParseToken(%q) = %q, %v", got, back, err)
		}
	}
	for _, bad := range []string{"x~", "x~4", "x~ZZ"} {
		if _, err := streams.ParseToken(bad); err == nil {
			t.Errorf("ParseToken(%q) accepted", bad)
		}
	}
}

func FuzzToken(f *testing.F) {
	for _, s := range []string{"demo.echo", "", "~", "a.b*c>d e", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := streams.Token(s)
		if strings.ContainsAny(tok, ".*> \t\r\n/\\") {
			t.Fatalf("Token(%q) = %q is not a single safe token", s, tok)
		}
		back, err := streams.ParseToken(tok)
		if err != nil || back != s {
			t.Fatalf("round trip of %q: %q, %v", s, back, err)
		}
		_, _ = streams.ParseToken(s) // never panics on arbitrary input
	})
}

func TestIDs(t *testing.T) {
	ids := make([]string, 2000)
	for i := range ids {
		ids[i] = domain.NewID()
		if !domain.ValidID(ids[i]) {
			t.Fatalf("invalid id %q", ids[i])
		}
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids made in order do not sort in order")
	}
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
	k1, k2 := domain.KeyedID("default", "order-1"), domain.KeyedID("default", "order-1")
	if k1 != k2 || !domain.ValidID(k1) || k1[0] != 'Z' {
		t.Fatalf("keyed ids %q %q", k1, k2)
	}
	if domain.KeyedID("other", "order-1") == k1 || domain.KeyedID("default", "order-2") == k1 {
		t.Fatal("keyed ids collide across namespaces or keys")
	}
	for _, bad := range []string{"", "short", strings.Repeat("I", 26), strings.Repeat("a", 26), ids[0] + "0"} {
		if domain.ValidID(bad) {
			t.Errorf("ValidID(%q) = true", bad)
		}
	}
}

func TestNames(t *testing.T) {
	for _, ok := range []string{"demo.echo", "ns:cat:name", "@global:modifiers:Rotate", "a-b_c"} {
		if !domain.ValidType(ok) {
			t.Errorf("ValidType(%q) = false", ok)
		}
	}
	for _, bad := range []string{"", ".a", "a.", "a b", "a*", "a>b", "a/b", strings.Repeat("x", 129)} {
		if domain.ValidType(bad) {
			t.Errorf("ValidType(%q) = true", bad)
		}
	}
	if !domain.ValidNamespace("@global") || domain.ValidNamespace("@x") || domain.ValidNamespace("a:b") {
		t.Error("namespace rules")
	}
	if domain.ValidQueue("a.b") || !domain.ValidQueue("q-1") {
		t.Error("queue rules")
	}
}

func TestEventRoundTrip(t *testing.T) {
	ev := &domain.Event{Type: domain.EvSubmitted, JobID: domain.NewID(), Time: time.Now().UTC(),
		To: domain.StateQueued, Spec: &domain.Spec{Type: "t", Queue: "q", Namespace: "n", Payload: []byte(`{"a":1}`)},
		Fields: map[string]any{"n": int64(3), "s": "x"}}
	b, err := streams.EncodeEvent(ev)
	if err != nil {
		t.Fatal(err)
	}
	got, err := streams.DecodeEvent(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.V != domain.EnvelopeVersion || got.Type != ev.Type || got.JobID != ev.JobID || !got.Time.Equal(ev.Time) ||
		got.To != ev.To || !bytes.Equal(got.Spec.Payload, ev.Spec.Payload) || got.Fields["s"] != "x" {
		t.Fatalf("round trip: %+v", got)
	}
}

func TestDecodeRefusals(t *testing.T) {
	future, _ := msgpack.Marshal(map[string]any{"v": 99, "type": "job.x", "job": "J"})
	noType, _ := msgpack.Marshal(map[string]any{"v": 1, "job": "J"})
	for name, b := range map[string][]byte{"empty": nil, "garbage": []byte("\xc1"), "json": []byte(`{"v":1}`),
		"future version": future, "no type": noType, "huge array": {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if _, err := streams.DecodeEvent(b); !errors.Is(err, streams.ErrBadRecord) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := streams.DecodeWorkItem([]byte{0x80}); !errors.Is(err, streams.ErrBadRecord) {
		t.Errorf("empty work item: %v", err)
	}
}

func TestCheckMsgpack(t *testing.T) {
	good := [][]byte{}
	for _, v := range []any{nil, 1, -1, 1.5, "s", []byte("b"), []any{1, "a", []any{}}, map[string]any{"a": map[string]any{"b": 1}},
		time.Now(), strings.Repeat("x", 70000)} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		good = append(good, b)
	}
	for _, b := range good {
		if err := streams.CheckMsgpack(b); err != nil {
			t.Errorf("%x: %v", b[:min(len(b), 16)], err)
		}
	}
	deep := bytes.Repeat([]byte{0x91}, streams.MaxMsgpackDepth+1)
	deep = append(deep, 0x01)
	for name, b := range map[string][]byte{
		"array32 of 4G": {0xdd, 0xff, 0xff, 0xff, 0xff}, "map32": {0xdf, 0x7f, 0xff, 0xff, 0xff, 0x01, 0x01},
		"str32": {0xdb, 0x00, 0x10, 0x00, 0x00, 'a'}, "bin truncated": {0xc4, 0x05, 1}, "trailing": {0x01, 0x02},
		"too deep": deep, "c1": {0xc1}, "empty": {},
	} {
		if err := streams.CheckMsgpack(b); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// TestDecodeNilTime: a nil where a time is makes msgpack's reflection
// panic (reflect's IsNil of a struct); each decoder says the record is
// malformed instead.
func TestDecodeNilTime(t *testing.T) {
	for name, data := range nilTimes() {
		if _, err := streams.DecodeEvent(data); !errors.Is(err, streams.ErrBadRecord) {
			t.Errorf("%s: DecodeEvent: %v, want ErrBadRecord", name, err)
		}
		if _, err := streams.DecodeJob(data); !errors.Is(err, streams.ErrBadRecord) {
			t.Errorf("%s: DecodeJob: %v, want ErrBadRecord", name, err)
		}
		if _, err := streams.DecodeWorkItem(data); !errors.Is(err, streams.ErrBadRecord) {
			t.Errorf("%s: DecodeWorkItem: %v, want ErrBadRecord", name, err)
		}
	}
}

// nilTimes are records with a nil time, at the top and nested.
func nilTimes() map[string][]byte {
	out := map[string][]byte{}
	for name, v := range map[string]any{
		"event":       map[string]any{"v": 1, "type": "job.started", "job": "J", "time": nil},
		"job":         map[string]any{"id": "J", "created_at": nil},
		"nested hold": map[string]any{"v": 1, "type": "job.pending", "job": "J", "id": "J", "hold": map[string]any{"since": nil}},
		"work item":   map[string]any{"rev": 1, "job": map[string]any{"id": "J", "seq": 1, "updated_at": nil}},
	} {
		b, err := msgpack.Marshal(v)
		if err != nil {
			panic(err)
		}
		out[name] = b
	}
	return out
}

func FuzzDecodeEvent(f *testing.F) {
	b, _ := streams.EncodeEvent(&domain.Event{Type: domain.EvStarted, JobID: "J", Time: time.Now(), Lease: 3})
	f.Add(b)
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	for _, b := range nilTimes() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := streams.DecodeEvent(data)
		if err == nil && (ev.Type == "" || ev.JobID == "") {
			t.Fatalf("accepted an event without type or job: %+v", ev)
		}
	})
}

func FuzzDecodeWorkItem(f *testing.F) {
	b, _ := streams.Marshal(&domain.WorkItem{Rev: 4, Job: domain.Job{ID: "J", Seq: 2, State: domain.StateQueued}})
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := streams.DecodeWorkItem(data)
		if err == nil && (w.Job.ID == "" || w.Job.Seq == 0) {
			t.Fatalf("accepted a work item without job: %+v", w)
		}
		_, _ = streams.DecodeJob(data)
	})
}
