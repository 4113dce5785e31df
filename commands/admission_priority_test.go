package commands_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// pendPrio makes job id pending with priority p, created at t0+ms.
func pendPrio(a *commands.Admission, id string, p, ms int) {
	a.Observe(commands.Slot{ID: id, User: "ns/", Priority: p, State: domain.StatePending,
		Created: t0.Add(time.Duration(ms) * time.Millisecond)})
}

// admitAndClaim admits what the window lets in, then lets a worker claim the
// oldest queued job; it returns what was admitted.
func admitAndClaim(t *testing.T, a *commands.Admission, queued *[]string) []string {
	t.Helper()
	got := a.Next(t0)
	for _, id := range got {
		a.Settled(id, true)
		a.Observe(commands.Slot{ID: id, State: domain.StateQueued})
	}
	*queued = append(*queued, got...)
	if n := len(*queued); n > 5 {
		t.Fatalf("%d queued: window 5", n)
	}
	if len(*queued) > 0 {
		a.Observe(commands.Slot{ID: (*queued)[0], State: domain.StateClaimed})
		*queued = (*queued)[1:]
	}
	return got
}

func TestAdmissionPrioritiesOrderStartsWithinTheWindow(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{Priorities: true, MaxQueued: 5})
	for i := range 1000 {
		pendPrio(a, fmt.Sprintf("low%04d", i), 0, i)
	}
	var queued, order []string
	first := a.Next(t0)
	if len(first) != 5 {
		t.Fatalf("admitted %v: want the window's 5", first)
	}
	if h, ok := a.Reason("low0100", t0); !ok || h.Limit != domain.LimitQueued || h.Max != 5 {
		t.Fatalf("reason of a waiting job: %+v %v", h, ok)
	}
	for _, id := range first {
		a.Settled(id, true)
		a.Observe(commands.Slot{ID: id, State: domain.StateQueued})
	}
	// A worker claims the first: the window has room for one.
	a.Observe(commands.Slot{ID: first[0], State: domain.StateClaimed})
	queued = first[1:]
	for i := range 20 {
		pendPrio(a, fmt.Sprintf("high%02d", i), 10, 2000+i)
	}
	for len(order) < 30 {
		order = append(order, admitAndClaim(t, a, &queued)...)
	}
	// Admissions go on from the 5th: the 10th, 20th, 30th of the queue go
	// to the oldest pending job (aged), the rest by priority. The 4 jobs
	// queued before the high ones start first (the window).
	nextLow, high := 5, 0
	for i, id := range order {
		aged := (5+i)%commands.AgedEvery == commands.AgedEvery-1
		want := fmt.Sprintf("high%02d", high)
		if aged || high == 20 {
			want = fmt.Sprintf("low%04d", nextLow)
			nextLow++
		} else {
			high++
		}
		if id != want {
			t.Fatalf("admission %d: %s, want %s (order %v)", i, id, want, order)
		}
	}
}

func TestAdmissionPrioritiesStarveNoOne(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{Priorities: true, MaxQueued: 1})
	for i := range 50 {
		pendPrio(a, fmt.Sprintf("low%02d", i), -1000, i)
	}
	var queued []string
	lows := 0
	for i := range 200 {
		// Work of the highest priority keeps coming.
		pendPrio(a, fmt.Sprintf("high%03d", i), 1000, 1000+i)
		for _, id := range admitAndClaim(t, a, &queued) {
			if id[:3] == "low" {
				lows++
			}
		}
	}
	if lows != 200/commands.AgedEvery {
		t.Fatalf("%d low jobs started in 200 admissions: want %d", lows, 200/commands.AgedEvery)
	}
}

func TestCheckLimitsMaxQueued(t *testing.T) {
	for _, n := range []int{-1, commands.MaxLimit + 1} {
		err := commands.CheckLimits(domain.QueueLimits{Priorities: true, MaxQueued: n})
		var ie *commands.InputError
		if !errors.As(err, &ie) || ie.Field != "max_queued" {
			t.Fatalf("max_queued %d: %v", n, err)
		}
	}
	if err := commands.CheckLimits(domain.QueueLimits{Priorities: true}); err != nil {
		t.Fatal(err)
	}
	if w := (domain.QueueLimits{Priorities: true}).Window(); w != domain.DefaultMaxQueued {
		t.Fatalf("window %d", w)
	}
	if !(domain.QueueLimits{Priorities: true}).Limited() {
		t.Fatal("a queue with priorities does not go through admission")
	}
}

// TestAdmissionSetPriority: a pending job given a higher priority is
// admitted before those ahead of it, one given a lower after; a job
// reprioritized while not pending (scheduled for a retry) takes its new
// priority when it is pending again; an unknown job is ignored. With a
// concurrency key the key's list is reordered too.
func TestAdmissionSetPriority(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{Priorities: true, MaxQueued: 1, MaxRunningPerKey: 5})
	for i := range 5 {
		a.Observe(commands.Slot{ID: fmt.Sprintf("j%d", i), User: "ns/", Key: "ns/k", State: domain.StatePending,
			Created: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	a.Observe(commands.Slot{ID: "s", User: "ns/", State: domain.StateScheduled, Created: t0.Add(10 * time.Millisecond)})
	a.SetPriority("j3", 5)
	a.SetPriority("j0", -1)
	a.SetPriority("s", 9)
	a.SetPriority("nope", 9)
	a.SetPriority("j3", 5) // the same: nothing moves
	a.Observe(commands.Slot{ID: "s", State: domain.StatePending, Seq: 7})
	var queued, order []string
	for len(order) < 6 {
		got := admitAndClaim(t, a, &queued)
		if len(got) == 0 {
			t.Fatalf("nothing admitted after %v", order)
		}
		order = append(order, got...)
	}
	if want := "[s j3 j1 j2 j4 j0]"; fmt.Sprint(order) != want {
		t.Fatalf("admitted %v, want %s", order, want)
	}
}
