package commands_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// pendKeyed makes job id pending for user with concurrency key key,
// created at t0+ms.
func pendKeyed(a *commands.Admission, id, user, key string, ms int) {
	a.Observe(commands.Slot{ID: id, User: user, Key: key, RateKey: key, State: domain.StatePending,
		Created: t0.Add(time.Duration(ms) * time.Millisecond)})
}

// admitted marks admitted jobs as the log would once their admission is
// written at at: queued, counted in their rate window.
func admitted(a *commands.Admission, ids []string, rateKey func(string) string, at time.Time) {
	for _, id := range ids {
		a.Settled(id, true)
		a.Observe(commands.Slot{ID: id, State: domain.StateQueued})
		a.CountAdmission(rateKey(id), at, at)
	}
}

func TestAdmissionOneAtATimePerKeyInSubmitOrder(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{MaxRunning: 10, MaxRunningPerKey: 1})
	// Key k's jobs come from two users, in this submit order; x is another
	// key, and the jobs with no key are not limited per key.
	pendKeyed(a, "k1", "ann", "ns/k", 1)
	pendKeyed(a, "k2", "bob", "ns/k", 2)
	pendKeyed(a, "k3", "ann", "ns/k", 3)
	pendKeyed(a, "x1", "bob", "ns/x", 4)
	pendKeyed(a, "x2", "bob", "ns/x", 5)
	pendKeyed(a, "n1", "ann", "", 6)
	pendKeyed(a, "n2", "ann", "", 7)
	got := a.Next(t0)
	slices.Sort(got)
	if want := []string{"k1", "n1", "n2", "x1"}; !slices.Equal(got, want) {
		t.Fatalf("admitted %v, want %v: one of each key, every job with none", got, want)
	}
	c := a.Counts()
	if c.Keys["ns/k"] != (commands.Count{Holding: 1, Pending: 2}) || c.Keys["ns/x"] != (commands.Count{Holding: 1, Pending: 1}) {
		t.Fatalf("counts by key %v", c.Keys)
	}
	if h, ok := a.Reason("k2", t0); !ok || h.Limit != domain.LimitKey || h.Max != 1 || h.Key != "k" {
		t.Fatalf("reason of k2: %+v %v", h, ok)
	}
	run(a, got)
	// k's running job ends: its next one, in submit order, whoever runs it.
	for _, c := range []struct{ ended, next string }{{"k1", "k2"}, {"k2", "k3"}} {
		if n := a.Next(t0); len(n) != 0 {
			t.Fatalf("admitted %v before %s ended", n, c.ended)
		}
		a.Observe(commands.Slot{ID: c.ended, State: domain.StateSucceeded})
		n := a.Next(t0)
		if !slices.Equal(n, []string{c.next}) {
			t.Fatalf("after %s ended: admitted %v, want %s", c.ended, n, c.next)
		}
		run(a, n)
	}
	// A slot freed by a cancel of the running job, whatever state it is in.
	a.Observe(commands.Slot{ID: "x1", State: domain.StateCancelled})
	if n := a.Next(t0); !slices.Equal(n, []string{"x2"}) {
		t.Fatalf("after x1 was cancelled: admitted %v", n)
	}
}

func TestAdmissionKeyLimitDoesNotBlockOtherKeys(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{MaxRunningPerKey: 2})
	for i := range 100 {
		pendKeyed(a, fmt.Sprintf("a%03d", i), "", "ns/a", i)
	}
	pendKeyed(a, "b", "", "ns/b", 1000)
	got := a.Next(t0)
	slices.Sort(got)
	if want := []string{"a000", "a001", "b"}; !slices.Equal(got, want) {
		t.Fatalf("admitted %v, want %v", got, want)
	}
}

func TestAdmissionRateLimitOfTheQueue(t *testing.T) {
	lim := domain.QueueLimits{RateLimit: 3, RatePeriod: time.Second}
	a := commands.NewAdmission("q", lim)
	for i := range 10 {
		pendKeyed(a, fmt.Sprintf("j%d", i), "", "", i)
	}
	none := func(string) string { return "" }
	got := a.Next(t0)
	if len(got) != 3 {
		t.Fatalf("admitted %v, want 3 (the rate limit)", got)
	}
	// Being written, they count: nothing more now.
	if n := a.Next(t0.Add(10 * time.Millisecond)); len(n) != 0 {
		t.Fatalf("admitted %v with the period full", n)
	}
	at := t0.Add(20 * time.Millisecond)
	admitted(a, got, none, at)
	h, ok := a.Reason("j3", t0.Add(500*time.Millisecond))
	if !ok || h.Limit != domain.LimitRate || h.Max != 3 || !h.Until.Equal(at.Add(time.Second)) {
		t.Fatalf("reason of j3: %+v %v; want rate_limit 3 until %s", h, ok, at.Add(time.Second))
	}
	if n := a.Next(at.Add(time.Second - time.Millisecond)); len(n) != 0 {
		t.Fatalf("admitted %v within the period", n)
	}
	if n := a.Next(at.Add(time.Second)); len(n) != 3 {
		t.Fatalf("admitted %v a period later, want 3", n)
	}
	if n := a.Admitted("", at.Add(time.Second)); n != 3 {
		t.Fatalf("%d admissions in the period, want the 3 being written", n)
	}
}

func TestAdmissionRateLimitPerKey(t *testing.T) {
	lim := domain.QueueLimits{RateLimit: 2, RatePeriod: time.Minute, RateKey: domain.RateKeyConcurrency}
	a := commands.NewAdmission("q", lim)
	key := map[string]string{}
	for i := range 6 {
		id := fmt.Sprintf("a%d", i)
		key[id] = "ns/a"
		pendKeyed(a, id, "", "ns/a", i)
	}
	got := a.Next(t0)
	admitted(a, got, func(id string) string { return key[id] }, t0)
	if len(got) != 2 {
		t.Fatalf("admitted %v, want 2 of key a", got)
	}
	// Key a is at its rate; key b, submitted later, is not held behind it.
	pendKeyed(a, "b0", "", "ns/b", 100)
	if n := a.Next(t0.Add(time.Second)); !slices.Equal(n, []string{"b0"}) {
		t.Fatalf("admitted %v, want b0", n)
	}
	h, ok := a.Reason("a2", t0.Add(time.Second))
	if !ok || h.Limit != domain.LimitRate || h.Key != "a" || !h.Until.Equal(t0.Add(time.Minute)) {
		t.Fatalf("reason of a2: %+v %v", h, ok)
	}
	// A write that failed gives its place in the period back.
	a.Settled("b0", false)
	if n := a.Next(t0.Add(2 * time.Second)); !slices.Equal(n, []string{"b0"}) {
		t.Fatalf("after a failed write: admitted %v, want b0 again", n)
	}
}

// A queue with every limit, driven at random (admissions written or not,
// jobs ending, time passing): no state it passes through holds more than
// its limits, and no period has more admissions than its rate limit.
func TestAdmissionNeverOverItsLimitsAtRandom(t *testing.T) {
	lim := domain.QueueLimits{MaxRunning: 8, MaxRunningPerUser: 5, MaxRunningPerKey: 2, RateLimit: 6,
		RatePeriod: time.Second, RateKey: domain.RateKeyConcurrency}
	rng := rand.New(rand.NewPCG(1, 2))
	a := commands.NewAdmission("q", lim)
	type job struct{ user, key string }
	jobs := map[string]job{}
	holding := map[string]bool{}
	var admittedAt = map[string][]time.Time{} // by key
	now := t0
	for i := range 300 {
		id := fmt.Sprintf("j%03d", i)
		j := job{fmt.Sprintf("ns/u%d", rng.IntN(3)), fmt.Sprintf("ns/k%d", rng.IntN(4))}
		jobs[id] = j
		a.Observe(commands.Slot{ID: id, User: j.user, Key: j.key, RateKey: j.key, State: domain.StatePending, Created: now.Add(time.Duration(i))})
	}
	for step := 0; step < 5000 && len(jobs) > 0; step++ {
		now = now.Add(time.Duration(rng.IntN(50)) * time.Millisecond)
		for _, id := range a.Next(now) {
			if rng.IntN(10) == 0 {
				a.Settled(id, false) // the write failed
				continue
			}
			a.Settled(id, true)
			a.Observe(commands.Slot{ID: id, State: domain.StateQueued})
			a.CountAdmission(jobs[id].key, now, now)
			admittedAt[jobs[id].key] = append(admittedAt[jobs[id].key], now)
			holding[id] = true
		}
		total, byUser, byKey := 0, map[string]int{}, map[string]int{}
		for id := range holding {
			total++
			byUser[jobs[id].user]++
			byKey[jobs[id].key]++
		}
		if total > lim.MaxRunning {
			t.Fatalf("step %d: %d hold a slot", step, total)
		}
		for u, n := range byUser {
			if n > lim.MaxRunningPerUser {
				t.Fatalf("step %d: user %s holds %d", step, u, n)
			}
		}
		for k, n := range byKey {
			if n > lim.MaxRunningPerKey {
				t.Fatalf("step %d: key %s holds %d", step, k, n)
			}
		}
		for id := range holding {
			if rng.IntN(4) == 0 {
				delete(holding, id)
				delete(jobs, id)
				a.Observe(commands.Slot{ID: id, State: domain.StateSucceeded})
			}
		}
	}
	if len(jobs) > 0 {
		t.Fatalf("%d jobs never ran", len(jobs))
	}
	for k, ts := range admittedAt {
		for i := range ts {
			n := 0
			for _, u := range ts[i:] {
				if u.Sub(ts[i]) < lim.RatePeriod {
					n++
				}
			}
			if n > lim.RateLimit {
				t.Fatalf("key %s: %d admissions within a period from %s", k, n, ts[i].Sub(t0))
			}
		}
	}
}

func TestCheckLimitsNamesTheField(t *testing.T) {
	for _, c := range []struct {
		l     domain.QueueLimits
		field string
	}{
		{domain.QueueLimits{MaxRunningPerKey: -1}, "max_running_per_key"},
		{domain.QueueLimits{RateLimit: -1}, "rate_limit"},
		{domain.QueueLimits{RateLimit: 5}, "rate_period"},
		{domain.QueueLimits{RateLimit: 5, RatePeriod: time.Millisecond}, "rate_period"},
		{domain.QueueLimits{RateLimit: 5, RatePeriod: 48 * time.Hour}, "rate_period"},
		{domain.QueueLimits{RatePeriod: time.Second}, "rate_period"},
		{domain.QueueLimits{RateKey: "user"}, "rate_key"},
		{domain.QueueLimits{RateLimit: 1, RatePeriod: time.Second, RateKey: "customer"}, "rate_key"},
		{domain.QueueLimits{RateLimit: 1, RatePeriod: time.Second, RateKey: "payload."}, "rate_key"},
		{domain.QueueLimits{RateLimit: 1, RatePeriod: time.Second, RateKey: "payload.a..b"}, "rate_key"},
		{domain.QueueLimits{RateLimit: 1, RatePeriod: time.Second, RateKey: "payload.a b"}, "rate_key"},
		{domain.QueueLimits{RateLimit: 1, RatePeriod: time.Second, RateKey: "payload.a.b.c.d.e.f.g.h.i"}, "rate_key"},
	} {
		err := commands.CheckLimits(c.l)
		var ie *commands.InputError
		if !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("CheckLimits(%+v) = %v, want an input error on %s", c.l, err, c.field)
		}
	}
	for _, l := range []domain.QueueLimits{
		{MaxRunningPerKey: 1},
		{RateLimit: 10, RatePeriod: time.Second},
		{RateLimit: 10, RatePeriod: 24 * time.Hour, RateKey: "user"},
		{RateLimit: 10, RatePeriod: time.Minute, RateKey: "concurrency_key"},
		{RateLimit: 10, RatePeriod: time.Minute, RateKey: "payload.customer.id"},
	} {
		if err := commands.CheckLimits(l); err != nil {
			t.Errorf("CheckLimits(%+v) = %v", l, err)
		}
	}
	if err := commands.CheckConcurrencyKey("a\x00"); err == nil {
		t.Error("a concurrency key with a control character is accepted")
	}
}

func TestRateKeyOf(t *testing.T) {
	spec := &domain.Spec{Namespace: "acme", User: "ada", ConcurrencyKey: "c1",
		Payload: []byte(`{"customer":{"id":42,"name":"x"},"region":"eu","flag":true,"list":[1],"none":null}`)}
	for _, c := range []struct{ key, want string }{
		{"", ""},
		{"user", "acme/ada"},
		{"concurrency_key", "acme/c1"},
		{"payload.region", "acme/eu"},
		{"payload.customer.id", "acme/42"},
		{"payload.flag", "acme/true"},
		{"payload.list", "acme/"},
		{"payload.none", "acme/"},
		{"payload.missing", "acme/"},
		{"payload.region.deeper", "acme/"},
	} {
		l := domain.QueueLimits{RateLimit: 1, RatePeriod: time.Second, RateKey: c.key}
		if got := commands.RateKeyOf(l, spec); got != c.want {
			t.Errorf("rate key %q: %q, want %q", c.key, got, c.want)
		}
	}
}

// TestAdmissionLeavesNoSlotIdleAtRandom: lanes held by their user's or
// key's limit are parked, not scanned; driven at random (jobs arriving,
// admissions written or not, jobs ending, priorities changed), once Next
// admits nothing more, an admission rebuilt from the same jobs' states
// (which has parked nothing) admits nothing either: parking never leaves
// a slot free that a job could take.
func TestAdmissionLeavesNoSlotIdleAtRandom(t *testing.T) {
	for seed := range uint64(20) {
		lim := domain.QueueLimits{MaxRunning: 30, MaxRunningPerUser: 6, MaxRunningPerKey: 4, Priorities: seed%2 == 0, MaxQueued: 1000}
		rng := rand.New(rand.NewPCG(seed, 7))
		a := commands.NewAdmission("q", lim)
		type job struct {
			user, key string
			priority  int
			state     domain.State
			created   time.Time
		}
		jobs := map[string]*job{}
		n := 0
		add := func() {
			id := fmt.Sprintf("j%04d", n)
			j := &job{fmt.Sprintf("ns/u%d", rng.IntN(4)), fmt.Sprintf("ns/k%d", rng.IntN(3)), rng.IntN(3), domain.StatePending, t0.Add(time.Duration(n))}
			n++
			jobs[id] = j
			a.Observe(commands.Slot{ID: id, User: j.user, Key: j.key, Priority: j.priority, State: j.state, Created: j.created})
		}
		for range 40 {
			add()
		}
		for step := range 400 {
			// Admit until a pass admits nothing (a pass leaves to the next
			// what its own admissions let through: a key's next job).
			idle := false
			for range 10 {
				out := a.Next(t0)
				if len(out) == 0 {
					idle = true
					break
				}
				for _, id := range out {
					if rng.IntN(8) == 0 {
						a.Settled(id, false)
						continue
					}
					a.Settled(id, true)
					jobs[id].state = domain.StateQueued
					a.Observe(commands.Slot{ID: id, State: domain.StateQueued})
				}
			}
			if idle {
				ref := commands.NewAdmission("q", lim)
				ids := make([]string, 0, len(jobs))
				for id := range jobs {
					ids = append(ids, id)
				}
				slices.Sort(ids)
				for _, id := range ids {
					j := jobs[id]
					ref.Observe(commands.Slot{ID: id, User: j.user, Key: j.key, Priority: j.priority, State: j.state, Created: j.created})
				}
				if want := ref.Next(t0); len(want) > 0 {
					t.Fatalf("seed %d step %d: a rebuilt admission admits %v, the live one nothing", seed, step, want)
				}
			}
			// Jobs end, arrive, change priority.
			for id, j := range jobs {
				switch r := rng.IntN(10); {
				case j.state == domain.StateQueued && r < 3:
					delete(jobs, id)
					a.Observe(commands.Slot{ID: id, State: domain.StateSucceeded})
				case j.state == domain.StatePending && r == 9:
					j.priority = rng.IntN(3)
					a.SetPriority(id, j.priority)
				case j.state == domain.StatePending && r == 8 && rng.IntN(4) == 0:
					delete(jobs, id) // cancelled while pending
					a.Observe(commands.Slot{ID: id, State: domain.StateCancelled})
				}
			}
			for range rng.IntN(4) {
				add()
			}
		}
	}
}

// A lane parked behind another lane's job of its key (one at a time in
// submit order) is looked at again once that job is admitted: the key's
// second slot is taken at the next pass, not when a slot frees.
func TestAdmissionKeyOrderUnparksOnAdmission(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{MaxRunningPerKey: 2})
	pendKeyed(a, "a1", "ns/u0", "ns/k", 1)
	pendKeyed(a, "b1", "ns/u1", "ns/k", 2)
	if got := a.Next(t0); fmt.Sprint(got) != "[a1]" {
		t.Fatalf("first pass admitted %v", got)
	}
	if got := a.Next(t0); fmt.Sprint(got) != "[b1]" {
		t.Fatalf("second pass admitted %v: want b1, its key has a slot", got)
	}
}

// A raised limit frees slots without a job ending: the lanes it held are
// looked at again (a queue's limits changed in place, SetLimits).
func TestAdmissionRaisedLimitUnparks(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{MaxRunningPerKey: 1, MaxRunningPerUser: 1})
	pendKeyed(a, "a1", "ns/u0", "ns/k", 1)
	pendKeyed(a, "a2", "ns/u0", "ns/k", 2)
	pendKeyed(a, "b1", "ns/u1", "ns/j", 3)
	pendKeyed(a, "b2", "ns/u1", "ns/j", 4)
	if got := a.Next(t0); len(got) != 2 {
		t.Fatalf("first pass admitted %v", got)
	}
	if got := a.Next(t0); len(got) != 0 {
		t.Fatalf("at the limits, admitted %v", got)
	}
	a.SetLimits(domain.QueueLimits{MaxRunningPerKey: 2, MaxRunningPerUser: 1})
	if got := a.Next(t0); len(got) != 0 {
		t.Fatalf("still held by the users' limit, admitted %v", got)
	}
	a.SetLimits(domain.QueueLimits{MaxRunningPerKey: 2, MaxRunningPerUser: 2})
	if got := a.Next(t0); fmt.Sprint(got) != "[a2 b2]" && fmt.Sprint(got) != "[b2 a2]" {
		t.Fatalf("limits raised: admitted %v, want a2 and b2", got)
	}
}

// A key's first job leaving pending other than by admission (cancelled)
// lets the next one lead, in a lane parked behind it, though nothing of
// the key runs to free a slot.
func TestAdmissionKeyHeadCancelledUnparks(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{MaxRunningPerKey: 1, MaxRunningPerUser: 1})
	pendKeyed(a, "x1", "ns/u0", "ns/other", 0)
	pendKeyed(a, "a1", "ns/u0", "ns/k", 1)
	pendKeyed(a, "b1", "ns/u1", "ns/k", 2)
	// x1 takes u0's slot; a1 (held by its user) leads key k, so b1 waits.
	if got := a.Next(t0); fmt.Sprint(got) != "[x1]" {
		t.Fatalf("first pass admitted %v", got)
	}
	if got := a.Next(t0); len(got) != 0 {
		t.Fatalf("admitted %v", got)
	}
	a.Observe(commands.Slot{ID: "a1", State: domain.StateCancelled})
	if got := a.Next(t0); fmt.Sprint(got) != "[b1]" {
		t.Fatalf("after the key's first job was cancelled, admitted %v: want b1", got)
	}
}
