package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestQueueKeyAndRateLimitsPut: PUT /queues/{queue} sets
// max_running_per_key and a rate limit (its period as a duration, shown in
// seconds), keeps what is left out, removes the period and key with the
// rate limit; every refusal names its field and changes nothing.
func TestQueueKeyAndRateLimitsPut(t *testing.T) {
	e := newEnv(t)
	var q QueueInfo
	e.do("PUT", "/api/v1/queues/rl", `{"rate_limit": 10, "rate_period": "1m", "max_running_per_key": 1}`).want(t, http.StatusOK).json(t, &q)
	if q.RateLimit != 10 || time.Duration(q.RatePeriod) != time.Minute || q.RateKey != "" || q.MaxRunningPerKey != 1 {
		t.Fatalf("after the rate limit: %+v", q)
	}
	e.do("PUT", "/api/v1/queues/rl", `{"rate_key": "payload.customer.id", "rate_period": 30}`).want(t, http.StatusOK).json(t, &q)
	want := domain.QueueLimits{MaxRunningPerKey: 1, RateLimit: 10, RatePeriod: 30 * time.Second, RateKey: "payload.customer.id"}
	if got := e.limitsOf("rl"); got != want {
		t.Fatalf("record's limits %+v, want %+v", got, want)
	}
	got := queueOf(t, e.do("GET", "/api/v1/queues", nil), "rl")
	if string(got["rate_period"]) != "30" || string(got["rate_key"]) != `"payload.customer.id"` || string(got["max_running_per_key"]) != "1" {
		t.Fatalf("GET /queues shows %s", e.do("GET", "/api/v1/queues", nil).body)
	}
	for _, c := range []struct {
		path, body  string
		status      int
		slug, field string
	}{
		{"/api/v1/queues/rl", `{"max_running_per_key": -1}`, 400, "invalid-input", "max_running_per_key"},
		{"/api/v1/queues/rl", `{"rate_limit": -1}`, 400, "invalid-input", "rate_limit"},
		{"/api/v1/queues/rl", `{"rate_limit": 1000001}`, 400, "invalid-input", "rate_limit"},
		{"/api/v1/queues/rl", `{"rate_period": "500ms"}`, 400, "invalid-input", "rate_period"},
		{"/api/v1/queues/rl", `{"rate_period": "48h"}`, 400, "invalid-input", "rate_period"},
		{"/api/v1/queues/rl", `{"rate_period": -5}`, 400, "invalid-input", "rate_period"},
		{"/api/v1/queues/rl", `{"rate_period": "soon"}`, 400, "malformed-request", "rate_period"},
		{"/api/v1/queues/rl", `{"rate_key": "customer"}`, 400, "invalid-input", "rate_key"},
		{"/api/v1/queues/rl", `{"rate_key": "payload.a b"}`, 400, "invalid-input", "rate_key"},
		{"/api/v1/queues/rl", `{"rate_key": 5}`, 400, "malformed-request", "rate_key"},
		{"/api/v1/queues/rl", `{"rate_period": 0}`, 400, "invalid-input", "rate_period"},
		{"/api/v1/queues/rl", `{"rate_limit": 0, "rate_key": "user"}`, 400, "invalid-input", "rate_key"},
		// A queue without a rate limit: a limit needs its period, a period
		// or a key their limit; the queue is not even created.
		{"/api/v1/queues/fresh", `{"rate_limit": 5}`, 400, "invalid-input", "rate_period"},
		{"/api/v1/queues/fresh", `{"rate_period": "1m"}`, 400, "invalid-input", "rate_period"},
		{"/api/v1/queues/fresh", `{"rate_key": "user"}`, 400, "invalid-input", "rate_key"},
	} {
		before := e.eventCount()
		p := e.do("PUT", c.path, c.body).problem(t, c.status, c.slug)
		if p.Field != c.field {
			t.Errorf("PUT %s %s: field %q, want %q (%s)", c.path, c.body, p.Field, c.field, p.Detail)
		}
		if after := e.eventCount(); after != before {
			t.Errorf("PUT %s %s: refused, but the log grew by %d", c.path, c.body, after-before)
		}
		if got := e.limitsOf("rl"); got != want {
			t.Errorf("PUT %s %s: refused, but the limits are %+v", c.path, c.body, got)
		}
	}
	if _, err := e.store.Queue(e.ctx, "fresh"); err == nil {
		t.Error("a refused PUT created queue fresh")
	}
	// 0 removes the rate limit, and its period and key with it.
	e.do("PUT", "/api/v1/queues/rl", `{"rate_limit": 0}`).want(t, http.StatusOK)
	if got := e.limitsOf("rl"); got != (domain.QueueLimits{MaxRunningPerKey: 1}) {
		t.Fatalf("after rate_limit 0: %+v", got)
	}
}

// TestPendingJobViewOfKeyAndRate: a job waiting for its key's slot, and
// one waiting for the rate limit, say so over HTTP (reason, key, until)
// and on the dashboard.
func TestPendingJobViewOfKeyAndRate(t *testing.T) {
	e := newEnv(t)
	e.do("PUT", "/api/v1/queues/kq", `{"max_running_per_key": 1}`).want(t, http.StatusOK)
	first := e.submit(map[string]any{"type": "t.block", "queue": "kq", "concurrency_key": "cust-1"})
	if first.ConcurrencyKey != "cust-1" {
		t.Fatalf("concurrency_key %q", first.ConcurrencyKey)
	}
	e.waitState(first.ID, domain.StateQueued) // admitted; no worker takes it: it holds the key's slot
	second := e.submit(map[string]any{"type": "t.block", "queue": "kq", "concurrency_key": "cust-1"}).ID
	other := e.submit(map[string]any{"type": "t.block", "queue": "kq", "concurrency_key": "cust-2"}).ID
	e.waitState(other, domain.StateQueued)
	testkit.WaitFor(t, 20*time.Second, func() error {
		v := e.get(second)
		if v.State != domain.StatePending || v.Hold == nil || v.Hold.Reason != "key" || v.Hold.Limit != "max_running_per_key" ||
			v.Hold.Key != "cust-1" || v.Hold.Max != 1 || !strings.Contains(v.Hold.Message, `key "cust-1"`) {
			return fmt.Errorf("job %s: %s, hold %+v", second, v.State, v.Hold)
		}
		return nil
	})

	e.do("PUT", "/api/v1/queues/rq", `{"rate_limit": 1, "rate_period": "1h"}`).want(t, http.StatusOK)
	a := e.submit(map[string]any{"type": "t.block", "queue": "rq"})
	e.waitState(a.ID, domain.StateQueued)
	b := e.submit(map[string]any{"type": "t.block", "queue": "rq"}).ID
	testkit.WaitFor(t, 20*time.Second, func() error {
		v := e.get(b)
		admitted := e.get(a.ID).QueuedAt
		if v.State != domain.StatePending || v.Hold == nil || v.Hold.Reason != "rate" || v.Hold.Limit != "rate_limit" ||
			v.Hold.Until == nil || admitted == nil || !v.Hold.Until.Equal(admitted.Add(time.Hour)) {
			return fmt.Errorf("job %s: %s, hold %+v; want rate until an hour after %v", b, v.State, v.Hold, admitted)
		}
		return nil
	})

	// The dashboard: the queues page shows the limits, a job's page why
	// it waits.
	page := string(e.do("GET", "/queues", nil).want(t, 200).body)
	for _, s := range []string{`class="num maxkey">1<`, `class="num rate">1 / 1h0m0s<`} {
		if !strings.Contains(page, s) {
			t.Errorf("queues page lacks %s", s)
		}
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		jp := string(e.do("GET", "/jobs/"+second, nil).want(t, 200).body)
		for _, s := range []string{`id="f-ckey"`, "cust-1", `id="f-hold-reason">key<`} {
			if !strings.Contains(jp, s) {
				return fmt.Errorf("the page of a job held by its key lacks %s", s)
			}
		}
		jp = string(e.do("GET", "/jobs/"+b, nil).want(t, 200).body)
		for _, s := range []string{`id="f-hold-reason">rate<`, "can start at"} {
			if !strings.Contains(jp, s) {
				return fmt.Errorf("the page of a job held by the rate lacks %s", s)
			}
		}
		return nil
	})
}

func TestQueuePrioritiesPut(t *testing.T) {
	e := newEnv(t)
	e.do("PUT", "/api/v1/queues/pr", `{"priorities": true}`).want(t, http.StatusOK)
	if got := e.limitsOf("pr"); got != (domain.QueueLimits{Priorities: true}) {
		t.Fatalf("record's limits %+v", got)
	}
	got := queueOf(t, e.do("GET", "/api/v1/queues", nil), "pr")
	if string(got["priorities"]) != "true" || string(got["max_queued"]) != "100" {
		t.Fatalf("GET /queues shows %s", e.do("GET", "/api/v1/queues", nil).body)
	}
	e.do("PUT", "/api/v1/queues/pr", `{"max_queued": 7}`).want(t, http.StatusOK)
	want := domain.QueueLimits{Priorities: true, MaxQueued: 7}
	for _, c := range []struct {
		body        string
		slug, field string
	}{
		{`{"max_queued": -1}`, "invalid-input", "max_queued"},
		{`{"max_queued": 1000001}`, "invalid-input", "max_queued"},
		{`{"priorities": "yes"}`, "malformed-request", "priorities"},
		{`{"max_queued": 1.5}`, "malformed-request", "max_queued"},
	} {
		before := e.eventCount()
		p := e.do("PUT", "/api/v1/queues/pr", c.body).problem(t, 400, c.slug)
		if p.Field != c.field {
			t.Errorf("PUT %s: field %q, want %q (%s)", c.body, p.Field, c.field, p.Detail)
		}
		if after := e.eventCount(); after != before {
			t.Errorf("PUT %s: refused, but the log grew by %d", c.body, after-before)
		}
		if got := e.limitsOf("pr"); got != want {
			t.Errorf("PUT %s: refused, but the limits are %+v", c.body, got)
		}
	}
}
