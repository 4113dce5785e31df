package engine_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// askAny sends a command (JSON, or msgpack when body is not a string) and
// returns its reply read as JSON.
func askAny(t *testing.T, nc *nats.Conn, verb string, body any) map[string]any {
	t.Helper()
	m := nats.NewMsg(streams.CommandPrefix + "." + verb)
	asJSON := false
	if s, ok := body.(string); ok {
		m.Data, asJSON = []byte(s), true
		m.Header.Set("Content-Type", "application/json")
	} else {
		m.Data, _ = streams.Marshal(body)
	}
	resp, err := nc.RequestMsg(m, 70*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", verb, err)
	}
	out := map[string]any{}
	if asJSON {
		err = json.Unmarshal(resp.Data, &out)
	} else {
		err = streams.Unmarshal(resp.Data, &out)
	}
	if err != nil {
		t.Fatalf("%s reply: %v", verb, err)
	}
	return out
}

// num reads a number of a reply decoded from JSON or msgpack.
func num(v any) uint64 {
	switch x := v.(type) {
	case float64:
		return uint64(x)
	case int64:
		return uint64(x)
	case uint64:
		return x
	case int8, int16, int32, uint8, uint16, uint32:
		var n uint64
		fmt.Sscan(fmt.Sprint(x), &n)
		return n
	}
	return 0
}

func errType(r map[string]any) string {
	e, _ := r["error"].(map[string]any)
	s, _ := e["type"].(string)
	return s
}

// wait answers as soon as the job is terminal (pushed by the record's
// watch), or with the job as it is and timed_out when its timeout passed;
// history pages through a job's events; list pages with a cursor.
func TestCommandWaitHistoryList(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	nc := testkit.Conn(t, h.srv)
	id := h.submit(commands.SubmitRequest{Type: "cmd.wait"}).Job.ID

	t0 := time.Now()
	r := askAny(t, nc, "wait", `{"id":"`+id+`","timeout":"300ms"}`)
	if j, _ := r["job"].(map[string]any); j["state"] != "queued" || r["timed_out"] != true || time.Since(t0) < 300*time.Millisecond {
		t.Fatalf("wait that timed out: %v after %s", r, time.Since(t0))
	}
	got := make(chan map[string]any, 1)
	go func() { got <- askAny(t, nc, "wait", map[string]any{"id": id, "timeout": 30}) }() // msgpack
	time.Sleep(200 * time.Millisecond)                                                    // let it wait (either order is correct)
	t0 = time.Now()
	if _, err := h.st.Cancel(h.ctx, id, "done"); err != nil {
		t.Fatal(err)
	}
	select {
	case r = <-got:
		if j, _ := r["job"].(map[string]any); j["state"] != "cancelled" || r["timed_out"] != false || time.Since(t0) > time.Second {
			t.Fatalf("wait: %v after %s", r, time.Since(t0))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not answer")
	}
	if r = askAny(t, nc, "wait", `{"id":"`+id+`"}`); r["timed_out"] != false { // terminal: at once
		t.Fatalf("wait on a terminal job: %v", r)
	}

	r = askAny(t, nc, "history", `{"id":"`+id+`","limit":1}`)
	evs, _ := r["events"].([]any)
	if len(evs) != 1 || r["more"] != true || evs[0].(map[string]any)["type"] != "job.submitted" {
		t.Fatalf("history page 1: %v", r)
	}
	next := num(r["next"])
	r = askAny(t, nc, "history", map[string]any{"id": id, "after": next, "limit": 10})
	evs, _ = r["events"].([]any)
	if len(evs) != 1 || r["more"] != false || evs[0].(map[string]any)["type"] != "job.cancelled" ||
		num(r["next"]) != num(evs[0].(map[string]any)["seq"]) {
		t.Fatalf("history page 2: %v", r)
	}
	last := num(r["next"])
	r = askAny(t, nc, "history", map[string]any{"id": id, "after": last})
	if evs, _ := r["events"].([]any); len(evs) != 0 || r["more"] != false || num(r["next"]) != last || last <= next {
		t.Fatalf("history past the end: %v", r)
	}

	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, h.submit(commands.SubmitRequest{Type: "cmd.list", Queue: "lq"}).Job.ID)
	}
	var listed []string
	cursor := ""
	for pages := 0; ; pages++ {
		body := map[string]any{"queue": "lq", "limit": 2}
		if cursor != "" {
			body["cursor"] = cursor
		}
		r = askAny(t, nc, "list", body)
		for _, j := range r["jobs"].([]any) {
			listed = append(listed, j.(map[string]any)["id"].(string))
		}
		c, _ := r["next_cursor"].(string)
		if c == "" {
			if pages != 2 {
				t.Fatalf("%d pages", pages+1)
			}
			break
		}
		cursor = c
	}
	if fmt.Sprint(listed) != fmt.Sprint([]string{ids[4], ids[3], ids[2], ids[1], ids[0]}) {
		t.Fatalf("listed %v, want newest first %v", listed, ids)
	}
	if r = askAny(t, nc, "list", `{"queue":"lq"}`); len(r["jobs"].([]any)) != 5 || r["next_cursor"] != nil {
		t.Fatalf("list without a limit: %v", r)
	}

	before := h.lastSeq()
	for _, tc := range []struct {
		verb string
		body any
		slug string
	}{
		{"wait", `{"id":"nope"}`, engine.ProblemNotFound},
		{"wait", `{"id":"` + domain.NewID() + `"}`, engine.ProblemNotFound},
		{"wait", `{"id":"` + id + `","timeout":-1}`, engine.ProblemInvalidInput},
		{"wait", `{"id":"` + id + `","timeout":"soon"}`, engine.ProblemMalformedRequest},
		{"history", `{"id":"nope"}`, engine.ProblemNotFound},
		{"history", `{"id":"` + id + `","limit":0}`, engine.ProblemInvalidInput},
		{"history", `{"id":"` + id + `","limit":10001}`, engine.ProblemInvalidInput},
		{"history", `{"id":"` + id + `","after":-1}`, engine.ProblemMalformedRequest},
		{"list", `{"cursor":"nope"}`, engine.ProblemBadCursor},
		{"list", map[string]any{"cursor": 5}, engine.ProblemMalformedRequest},
	} {
		if got := errType(askAny(t, nc, tc.verb, tc.body)); got != tc.slug {
			t.Errorf("%s %v: %q, want %q", tc.verb, tc.body, got, tc.slug)
		}
	}
	if h.lastSeq() != before {
		t.Fatal("refused commands wrote events")
	}
}

// The wire as documented: run_at as an RFC 3339 string over msgpack too;
// a null payload is no payload, and a later field's error names that
// field.
func TestCommandWireAsDocumented(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	nc := testkit.Conn(t, h.srv)
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	r := askAny(t, nc, "submit", map[string]any{"type": "wire.x", "run_at": at.Format(time.RFC3339), "payload": nil})
	j, _ := r["job"].(map[string]any)
	if j == nil || j["state"] != "scheduled" || j["run_at"] != at.Format(time.RFC3339) || j["payload"] != nil {
		t.Fatalf("submit with run_at as a string: %v", r)
	}
	r = askAny(t, nc, "submit", map[string]any{"type": "wire.x", "payload": nil, "max_retries": "three"})
	if e, _ := r["error"].(map[string]any); e["type"] != engine.ProblemMalformedRequest || e["field"] != "max_retries" {
		t.Fatalf("error after a null payload: %v", r)
	}
	r = askAny(t, nc, "submit", map[string]any{"type": "wire.x", "run_at": "tomorrow"})
	if e, _ := r["error"].(map[string]any); e["type"] != engine.ProblemMalformedRequest || e["field"] != "run_at" {
		t.Fatalf("run_at not a time: %v", r)
	}
}

// A wait that times out on a job an in-process worker runs, in the first
// moments of its claim, while the claim's record is not written yet
// (store.DeferRecord): the reply says running, as get does, not the
// queued record the wait's watch saw first.
func TestCommandWaitDeferredClaimRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	nc := testkit.Conn(t, h.srv)
	started := h.heldWorker("cmd.held")
	id := h.submit(commands.SubmitRequest{Type: "cmd.held"}).Job.ID
	if got := <-started; got != id {
		t.Fatalf("started %s, want %s", got, id)
	}
	r := askAny(t, nc, "wait", `{"id":"`+id+`","timeout":"20ms"}`)
	if j, _ := r["job"].(map[string]any); j["state"] != "running" || j["worker"] != "w1" || r["timed_out"] != true {
		t.Fatalf("wait on a running job: %v", r)
	}
}
