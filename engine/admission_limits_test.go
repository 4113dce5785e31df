package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// admissionsOf returns the times of the jobs' admissions (job.admitted),
// oldest first, by the key key gives each job.
func (h *harness) admissionsOf(ids []string, key func(id string) string) map[string][]time.Time {
	h.t.Helper()
	out := map[string][]time.Time{}
	for _, id := range ids {
		for _, ev := range h.events(id) {
			if ev.Type == domain.EvAdmitted {
				out[key(id)] = append(out[key(id)], ev.Time)
			}
		}
	}
	for _, ts := range out {
		sort.Slice(ts, func(i, k int) bool { return ts[i].Before(ts[k]) })
	}
	return out
}

// mostInAPeriod is the most of ts (sorted) within any period.
func mostInAPeriod(ts []time.Time, period time.Duration) int {
	most, end := 0, 0
	for i := range ts {
		for end < len(ts) && ts[end].Sub(ts[i]) < period {
			end++
		}
		most = max(most, end-i)
	}
	return most
}

// A queue with max_running_per_key 1: the jobs of one key run one at a
// time, in submit order, whoever they run for; keys run side by side; a
// key's slot is freed however its job ends (success, failure, cancel).
func TestKeyLimitOneAtATimeInSubmitOrder(t *testing.T) {
	h := newHarness(t)
	lim := domain.QueueLimits{MaxRunningPerKey: 1}
	if _, err := h.st.SetQueueLimits(h.ctx, "k", lim); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	started := map[string][]string{} // by key, in start order
	now, most, together := map[string]int{}, 0, 0
	// gone: jobs counted out at their cancel, which frees their key's slot
	// when it is written; the handler learns of it a moment later.
	gone := map[string]bool{}
	block := make(chan struct{})
	h.runtime(engine.RuntimeConfig{Queue: "k", WorkerID: "w", Concurrency: 16, Handlers: map[string]engine.Handler{
		"step": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			k := task.Job.Spec.ConcurrencyKey
			mu.Lock()
			started[k] = append(started[k], task.Job.ID)
			now[k]++
			most = max(most, now[k])
			n := 0
			for _, c := range now {
				n += c
			}
			together = max(together, n)
			mu.Unlock()
			defer func() {
				mu.Lock()
				if !gone[task.Job.ID] {
					now[k]--
				}
				mu.Unlock()
			}()
			var p struct{ Fail, Block bool }
			_ = json.Unmarshal(task.Job.Spec.Payload, &p)
			switch {
			case p.Block:
				select {
				case <-block:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			case p.Fail:
				return nil, &engine.PermanentError{Err: fmt.Errorf("no")}
			default:
				time.Sleep(20 * time.Millisecond)
			}
			return nil, nil
		}}})
	want := map[string][]string{}
	var all []string
	var blocker string
	for i := range 8 {
		for _, k := range []string{"a", "b", "c"} {
			payload := `{}`
			switch {
			case k == "b" && i == 2:
				payload = `{"Fail":true}`
			case k == "c" && i == 1:
				payload = `{"Block":true}`
			}
			zero := 0
			j := h.submit(commands.SubmitRequest{Type: "step", Queue: "k", ConcurrencyKey: k, User: []string{"ann", "bob"}[i%2],
				Payload: commands.RawJSON(payload), MaxRetries: &zero})
			if payload == `{"Block":true}` {
				blocker = j.Job.ID
			}
			want[k] = append(want[k], j.Job.ID)
			all = append(all, j.Job.ID)
		}
	}
	// c's second job blocks: c waits, a and b go on.
	h.waitState(blocker, domain.StateRunning, 20*time.Second)
	for _, id := range append(append([]string{}, want["a"]...), want["b"]...) {
		h.waitState(id, map[bool]domain.State{true: domain.StateFailed, false: domain.StateSucceeded}[id == want["b"][2]], 30*time.Second)
	}
	next := h.get(want["c"][2])
	if next.State != domain.StatePending {
		t.Fatalf("c's third job is %s while its second runs", next.State)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		v := h.st.View(h.ctx, h.get(want["c"][2]))
		if v.Hold == nil || v.Hold.Reason != "key" || v.Hold.Limit != domain.LimitKey || v.Hold.Key != "c" {
			return fmt.Errorf("hold of c's third job: %+v", v.Hold)
		}
		return nil
	})
	// Cancelled while it runs: the key's slot goes to its next job.
	mu.Lock()
	gone[blocker] = true
	now["c"]--
	mu.Unlock()
	if _, err := h.st.Cancel(h.ctx, blocker, "test"); err != nil {
		t.Fatal(err)
	}
	for _, id := range want["c"] {
		if id != blocker {
			h.waitState(id, domain.StateSucceeded, 30*time.Second)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range []string{"a", "b", "c"} {
		if !slices.Equal(started[k], want[k]) {
			t.Errorf("key %s started %v, want submit order %v", k, started[k], want[k])
		}
	}
	if most != 1 || together < 2 {
		t.Errorf("at most %d jobs of one key at once (want 1), %d of all keys (want 2 or more)", most, together)
	}
	h.verify()
}

// A rate limit of the queue: at most 4 starts in any second, and the jobs
// held say when they can start; a rate limit per payload field: each
// customer's starts are counted apart, and one at its limit holds up no
// other.
func TestRateLimitOfQueueAndPerKey(t *testing.T) {
	h := newHarness(t)
	h.runtime(engine.RuntimeConfig{Queue: "r", WorkerID: "w", Concurrency: 16, Handlers: map[string]engine.Handler{
		"call": func(ctx context.Context, task *engine.Task) ([]byte, error) { return nil, nil }}})
	h.runtime(engine.RuntimeConfig{Queue: "rk", WorkerID: "w2", Concurrency: 16, Handlers: map[string]engine.Handler{
		"call": func(ctx context.Context, task *engine.Task) ([]byte, error) { return nil, nil }}})
	lim := domain.QueueLimits{RateLimit: 4, RatePeriod: time.Second}
	if _, err := h.st.SetQueueLimits(h.ctx, "r", lim); err != nil {
		t.Fatal(err)
	}
	perKey := domain.QueueLimits{RateLimit: 2, RatePeriod: 2 * time.Second, RateKey: "payload.customer"}
	if _, err := h.st.SetQueueLimits(h.ctx, "rk", perKey); err != nil {
		t.Fatal(err)
	}
	var ids []string
	begin := time.Now()
	for range 12 {
		ids = append(ids, h.submit(commands.SubmitRequest{Type: "call", Queue: "r"}).Job.ID)
	}
	// The last waits for the third period: held by the rate, until a time.
	last := ids[len(ids)-1]
	testkit.WaitFor(t, 5*time.Second, func() error {
		v := h.st.View(h.ctx, h.get(last))
		if v.State != domain.StatePending || v.Hold == nil || v.Hold.Reason != "rate" || v.Hold.Until == nil ||
			!strings.Contains(v.Hold.Message, "can start at") {
			return fmt.Errorf("%s %s hold %+v", last, v.State, v.Hold)
		}
		return nil
	})
	customers := map[string]string{}
	var keyed []string
	for i := range 4 {
		for _, c := range []string{"acme", "bolt"} {
			id := h.submit(commands.SubmitRequest{Type: "call", Queue: "rk", Payload: commands.RawJSON(fmt.Sprintf(`{"customer":%q,"n":%d}`, c, i))}).Job.ID
			customers[id] = c
			keyed = append(keyed, id)
		}
	}
	for _, id := range append(ids, keyed...) {
		h.waitState(id, domain.StateSucceeded, 30*time.Second)
	}
	if took := time.Since(begin); took < 2*time.Second {
		t.Errorf("12 jobs at 4 a second ran in %s", took)
	}
	got := h.admissionsOf(ids, func(string) string { return "" })[""]
	if n := mostInAPeriod(got, time.Second); n != 4 {
		t.Errorf("at most %d admissions in a second, want exactly the limit 4", n)
	}
	byKey := h.admissionsOf(keyed, func(id string) string { return customers[id] })
	for c, ts := range byKey {
		if n := mostInAPeriod(ts, 2*time.Second); n != 2 || len(ts) != 4 {
			t.Errorf("customer %s: %d admissions, at most %d in 2s; want 4 and 2", c, len(ts), n)
		}
	}
	// Both customers' first two went at once: neither waited for the other.
	if d := byKey["acme"][1].Sub(byKey["bolt"][1]).Abs(); d > time.Second {
		t.Errorf("the customers' second admissions %s apart", d)
	}
	rep := h.verify()
	if rep.RateAdmissions != 20 {
		t.Errorf("replay --verify checked %d admissions of rate limits, want 20", rep.RateAdmissions)
	}
}

// The admissions of the rate period are counted from the log by the next
// admitter: the engine that admitted three jobs of a rate of 3 in 4 s
// stops, another starts, and the jobs submitted after wait until the
// period of the first three is over.
func TestRateWindowRebuiltFromTheLog(t *testing.T) {
	h := newHarness(t)
	h.runtime(engine.RuntimeConfig{Queue: "rw", WorkerID: "w", Concurrency: 8, Handlers: map[string]engine.Handler{
		"call": func(ctx context.Context, task *engine.Task) ([]byte, error) { return nil, nil }}})
	const period = 4 * time.Second
	if _, err := h.st.SetQueueLimits(h.ctx, "rw", domain.QueueLimits{RateLimit: 3, RatePeriod: period}); err != nil {
		t.Fatal(err)
	}
	var first []string
	for range 3 {
		first = append(first, h.submit(commands.SubmitRequest{Type: "call", Queue: "rw"}).Job.ID)
	}
	for _, id := range first {
		h.waitState(id, domain.StateSucceeded, 10*time.Second)
	}
	h.replaceEngine()
	var later []string
	for range 2 {
		later = append(later, h.submit(commands.SubmitRequest{Type: "call", Queue: "rw"}).Job.ID)
	}
	lastFirst := h.admissionsOf(first, func(string) string { return "" })[""][0].Add(period)
	testkit.WaitFor(t, 10*time.Second, func() error {
		v := h.st.View(h.ctx, h.get(later[0]))
		if v.Hold == nil || v.Hold.Reason != "rate" || v.Hold.Until == nil || !v.Hold.Until.Equal(lastFirst.UTC()) {
			return fmt.Errorf("%s %s, hold %+v; want held by the rate until %s", later[0], v.State, v.Hold, lastFirst.UTC())
		}
		return nil
	})
	for _, id := range later {
		h.waitState(id, domain.StateSucceeded, 20*time.Second)
	}
	all := h.admissionsOf(append(first, later...), func(string) string { return "" })[""]
	if n := mostInAPeriod(all, period); n != 3 {
		t.Fatalf("%d admissions within %s: limit 3 (%v)", n, period, all)
	}
	h.verify()
}

// replay --verify finds a period with more admissions than the rate limit
// (written here by hand: no admitter would).
func TestVerifyFindsARateLimitExceeded(t *testing.T) {
	h := newHarness(t)
	rec, err := h.st.SetQueueLimits(h.ctx, "rv", domain.QueueLimits{RateLimit: 2, RatePeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// Admissions a second or more after the limits were set are checked
	// (replay's rateSettle).
	testkit.WaitFor(t, 5*time.Second, func() error {
		if d := time.Since(rec.LimitsAt); d < 1100*time.Millisecond {
			return fmt.Errorf("limits set %s ago", d)
		}
		return nil
	})
	w := streams.Writer{JS: h.st.JS}
	for range 3 {
		spec := domain.Spec{Namespace: "default", Type: "x", Queue: "rv", Payload: []byte("null")}
		id := domain.NewID()
		sub, err := commands.Submit(id, spec, true, time.Now().UTC())
		if err != nil {
			t.Fatal(err)
		}
		seq, err := w.AppendAsync(streams.EventSubject("default", "rv", "x", id), sub, 0).Wait(h.ctx)
		if err != nil {
			t.Fatal(err)
		}
		j := &domain.Job{ID: id, Spec: spec, State: domain.StatePending, Seq: seq}
		adm, err := commands.Admit(j, domain.QueueLimits{}, "test", time.Now().UTC())
		if err != nil {
			t.Fatal(err)
		}
		// The harness's admitter may admit it first (within the limit):
		// admitted either way, once.
		if _, err := w.AppendAsync(streams.JobSubject(j), adm, seq).Wait(h.ctx); err != nil && !streams.IsConflict(err) {
			t.Fatal(err)
		}
	}
	rep, err := projectionsVerify(h)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range rep.Diffs {
		if d.ID == "queue rv" && strings.Contains(d.Reason, "admitted 3 jobs in the 1h0m0s") {
			found = true
		}
	}
	if !found || rep.RateAdmissions != 3 {
		t.Fatalf("verify: %d admissions checked, diffs %+v; want queue rv over its rate limit", rep.RateAdmissions, rep.Diffs)
	}
}
