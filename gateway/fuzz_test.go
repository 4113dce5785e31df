package gateway

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// checkDecodeError fails unless err is nil or a client error: a problem of
// status 400/413 or an invalid-input error. A decoder never panics and
// never answers 500 to bad input.
func checkDecodeError(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var p *Problem
	if errors.As(err, &p) {
		if p.Status != http.StatusBadRequest && p.Status != http.StatusRequestEntityTooLarge &&
			p.Status != http.StatusUnprocessableEntity {
			t.Fatalf("problem status %d: %v", p.Status, err)
		}
		return
	}
	if !errors.Is(err, commands.ErrInvalidInput) {
		t.Fatalf("not a client error: %v", err)
	}
}

func FuzzDecodeSubmit(f *testing.F) {
	for _, s := range []string{`{"type":"a"}`, `{"type":"a","payload":{"x":[1,2]},"delay":"30s","max_retries":2}`,
		`{"type":"a","run_at":"2030-01-01T00:00:00Z","tags":["x"],"timeout":1.5}`, `{"type":1}`, `[]`, `{"type":"a"}x`,
		`{"type":"a","payload":` + "\xff" + `}`, `{"type":"a","jitter":2}`, `{"type":"a","delay":1e300}`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeSubmit(body)
		checkDecodeError(t, err)
		if err == nil {
			if _, err := req.Spec(time.Now()); err != nil {
				t.Fatalf("accepted a request whose spec fails: %v", err)
			}
		}
	})
}

func FuzzDecodePatch(f *testing.F) {
	for _, s := range []string{`{"worker_id":"w","state":"running"}`, `{"worker_id":"w","progress":{"current":1,"total":2,"message":"m"}}`,
		`{"worker_id":"w","state":"succeeded","result":{"a":1}}`, `{"worker_id":"w","state":"failed","error":{"code":"X","message":"m"},"retryable":false}`,
		`{"worker_id":"w","state":"queued","reason":"r"}`, `{"state":"running"}`, `{"worker_id":"w","progress":{"current":-1}}`, `null`, `{}`,
		`{"worker_id":"w","state":"retry_later","delay":"5s","reason":"busy"}`, `{"worker_id":"w","state":"retry_later","delay":-1}`,
		`{"worker_id":"w","event":{"name":"n","level":"warning","message":"m","fields":{"a":1}}}`,
		`{"worker_id":"w","state":"waiting","fanout":{"children":[{"type":"k","payload":1},{"type":"k"}],"failure_policy":"fail_fast"}}`,
		`{"worker_id":"w","state":"waiting","fanout":{"batches":{"type":"b","items":[1,"x"],"max_retries":2,"backoff":"1s","timeout":60},"failure_policy":"tolerate","max_failure_ratio":0.5,"stall_timeout":"1h"}}`,
		`{"worker_id":"w","state":"waiting","fanout":{"children":[{"type":"k","namespace":"x"}]}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decodePatch(body)
		checkDecodeError(t, err)
		if err == nil && (p.WorkerID == "" || (p.State == "" && p.Progress == nil && p.Event == nil)) {
			t.Fatalf("accepted an empty report: %+v", p)
		}
		if err == nil && (p.State == commands.StateRetryLater) != (p.Delay != nil) {
			t.Fatalf("accepted a delay without retry_later, or retry_later without one: %+v", p)
		}
		if err == nil && p.Fanout != nil {
			if _, err := p.Fanout.fanOut(); err != nil {
				t.Fatalf("accepted a fan-out that is refused: %v", err)
			}
		}
	})
}

func FuzzDecodeClaim(f *testing.F) {
	for _, s := range []string{`{"worker_id":"wk-1","wait":10}`, `{"worker_id":"wk-1","wait":"2s"}`, `{"worker_id":"wk-1","wait":-1}`,
		`{"wait":1}`, `{"worker_id":5}`, `{"worker_id":"w","wait":"NaN"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		c, err := decodeClaim(body)
		checkDecodeError(t, err)
		if err == nil && (c.WorkerID == "" || (c.Wait != nil && *c.Wait < 0)) {
			t.Fatalf("accepted %+v", c)
		}
	})
}

func FuzzDecodeRegister(f *testing.F) {
	for _, s := range []string{`{"name":"w","types":["a","b.c"],"queues":["q"],"concurrency":4}`, `{"types":[]}`, `{"types":["a"],"concurrency":-1}`,
		`{"batch_types":["emb.batch"]}`, `{"types":["a"],"namespace":""}`, `{"types":["a"],"namespace":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeRegister(body)
		checkDecodeError(t, err)
		// No queues is every queue; an empty list is refused.
		if err == nil && (len(r.Types)+len(r.BatchTypes) == 0 || (r.Queues != nil && len(r.Queues) == 0) || r.Concurrency < 1 ||
			commands.CheckNamespace(r.Namespace) != nil) {
			t.Fatalf("accepted %+v", r)
		}
	})
}

func FuzzDecodeQueueLimits(f *testing.F) {
	for _, s := range []string{`{"max_running":4}`, `{"max_running_per_user":2}`, `{"max_running":0,"max_running_per_user":0}`, `{}`,
		`{"max_running":-1}`, `{"max_running":1000001}`, `{"max_running":1e30}`, `{"max_running":null}`, `{"paused":true}`, ``,
		`{"max_running_per_key":1}`, `{"rate_limit":10,"rate_period":"1m","rate_key":"payload.customer"}`, `{"rate_limit":0}`,
		`{"rate_period":0.5}`, `{"rate_key":"user"}`, `{"rate_key":"payload."}`, `{"rate_period":"86401s"}`, `{"rate_limit":0,"rate_period":60}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		q, err := decodeQueueLimits(body)
		checkDecodeError(t, err)
		if err != nil {
			return
		}
		// Taken as given: what it sets is in range, what it leaves out is
		// kept; with the queue's limits, only a rate limit's period or key
		// given without the limit (or the limit without a period) is
		// refused, naming one of them.
		cur := domain.QueueLimits{MaxRunning: 7, MaxRunningPerUser: 3, MaxRunningPerKey: 2, RateLimit: 5, RatePeriod: time.Minute}
		got := q.Apply(cur)
		if err := commands.CheckLimits(got); err != nil {
			var in *commands.InputError
			if !errors.As(err, &in) || in.Field != "rate_period" && in.Field != "rate_key" {
				t.Fatalf("accepted %s: %v", body, err)
			}
		}
		if q.MaxRunning == nil && got.MaxRunning != 7 || q.MaxRunningPerUser == nil && got.MaxRunningPerUser != 3 ||
			q.MaxRunningPerKey == nil && got.MaxRunningPerKey != 2 || q.RateLimit == nil && got.RateLimit != 5 {
			t.Fatalf("%s changed a limit it left out: %+v", body, got)
		}
	})
}

func FuzzCursorAndPrefer(f *testing.F) {
	f.Add(Cursor{CreatedAt: time.Unix(1700000000, 5), ID: "01ARZ3NDEKTSV4RRFFQ69G5FAV"}.Encode(), "wait=10")
	f.Add("AQ", "respond-async, wait=5;x")
	f.Fuzz(func(t *testing.T, cursor, prefer string) {
		if c, err := decodeCursor(cursor); err == nil {
			if again, err := decodeCursor(c.Encode()); err != nil || again != c {
				t.Fatalf("cursor %q does not round-trip: %+v %v", cursor, again, err)
			}
		} else {
			checkDecodeError(t, err)
		}
		if d, ok := preferWait(prefer, defaultMaxWait); ok && (d < 0 || d > defaultMaxWait) {
			t.Fatalf("Prefer %q: wait %s", prefer, d)
		}
	})
}

// FuzzVerifyToken: whatever a request presents as its token, Verify
// answers with the one principal of the one token it was given, or
// unauthenticated; nothing else, never a crash.
func FuzzVerifyToken(f *testing.F) {
	srv := testkit.Server(f)
	st := testkit.Store(f, testkit.Conn(f, srv), "fuzz")
	ctx := testkit.Ctx(f)
	rec, tok, err := st.Tokens.Create(ctx, commands.TokenSpec{Name: "n", Namespace: "acme", Role: commands.RoleReader}, "fuzz")
	if err != nil {
		f.Fatal(err)
	}
	if _, err := st.Tokens.Verify(ctx, tok); err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{tok, tok[:len(tok)-1], tok + "=", "", "jft_", "Bearer " + tok, tok[:30] + "_" + tok[31:]} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := st.Tokens.Verify(ctx, s)
		if s == tok {
			if err != nil || p.TokenID != rec.ID {
				t.Fatalf("the token: %+v %v", p, err)
			}
			return
		}
		if err == nil || !errors.Is(err, commands.ErrUnauthenticated) {
			t.Fatalf("%q: %+v %v", s, p, err)
		}
	})
}

// FuzzTokenSpec: the body of POST /tokens is taken as given or refused
// with an input error.
func FuzzTokenSpec(f *testing.F) {
	f.Add("ci", "acme", "producer", "720h")
	f.Add("", "*", "admin", "")
	f.Add("x", "a:b", "root", "-1s")
	f.Fuzz(func(t *testing.T, name, ns, role, ttl string) {
		spec, err := tokenSpecOf(name, ns, role, ttl)
		checkDecodeError(t, err)
		if err == nil && (spec.Name != name || spec.Namespace != ns || string(spec.Role) != role) {
			t.Fatalf("accepted and changed: %+v", spec)
		}
	})
}
