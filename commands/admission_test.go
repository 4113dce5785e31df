package commands_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

var t0 = time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)

func pend(a *commands.Admission, user string, n int, from int) []string {
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%04d", user, from+i)
		a.Observe(commands.Slot{ID: id, User: user, State: domain.StatePending, Created: t0.Add(time.Duration(from+i) * time.Millisecond)})
		ids = append(ids, id)
	}
	return ids
}

// run marks admitted jobs as the log would once their admission is
// written, then started.
func run(a *commands.Admission, ids []string) {
	for _, id := range ids {
		a.Settled(id, true)
		a.Observe(commands.Slot{ID: id, State: domain.StateQueued})
		a.Observe(commands.Slot{ID: id, State: domain.StateRunning})
	}
}

func TestAdmissionIsFairAcrossUsers(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{MaxRunning: 4})
	pend(a, "big", 1000, 0)
	small := pend(a, "small", 3, 1000)
	got := a.Next(time.Now())
	if len(got) != 4 || got[0] != "big-0000" || got[1] != "small-1000" || got[2] != "big-0001" || got[3] != "small-1001" {
		t.Fatalf("first admissions %v: want big and small in turn, oldest first", got)
	}
	run(a, got)
	if n := a.Next(time.Now()); len(n) != 0 {
		t.Fatalf("admitted %v with every slot held", n)
	}
	// One slot frees at a time: small's last job comes within two slots.
	a.Observe(commands.Slot{ID: got[0], State: domain.StateSucceeded})
	n1 := a.Next(time.Now())
	run(a, n1)
	a.Observe(commands.Slot{ID: got[1], State: domain.StateFailed})
	n2 := a.Next(time.Now())
	if len(n1) != 1 || len(n2) != 1 || (n1[0] != small[2] && n2[0] != small[2]) {
		t.Fatalf("after two slots freed: %v then %v; want small's last job among them", n1, n2)
	}
	c := a.Counts()
	if c.Holding != 4 || c.Users["small"].Pending != 0 || c.Users["big"].Pending != 997 {
		t.Fatalf("counts %+v", c)
	}
}

func TestAdmissionPerUserLimit(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{MaxRunning: 4, MaxRunningPerUser: 2})
	for _, u := range []string{"a", "b", "c"} {
		pend(a, u, 30, 0)
	}
	got := a.Next(time.Now())
	if len(got) != 4 {
		t.Fatalf("admitted %v: want 4 (the queue limit)", got)
	}
	per := map[byte]int{}
	for _, id := range got {
		per[id[0]]++
	}
	for u, n := range per {
		if n > 2 {
			t.Fatalf("user %c admitted %d at once: limit 2 (%v)", u, n, got)
		}
	}
	run(a, got)
	if early := a.Holds(time.Now(), -1); len(early) != 0 {
		t.Fatalf("%d holds written before holdAfter", len(early))
	}
	holds := a.Holds(time.Now().Add(commands.HoldAfter), -1)
	if len(holds) != 86 {
		t.Fatalf("%d holds, want 86 (90 pending, 4 admitted)", len(holds))
	}
	// A user at their own limit (2) is told so; the others, that the
	// queue is full.
	for _, h := range holds {
		want := domain.Hold{Limit: domain.LimitQueue, Max: 4}
		if per[h.ID[0]] == 2 {
			want = domain.Hold{Limit: domain.LimitUser, Max: 2}
		}
		if h.Hold.Limit != want.Limit || h.Hold.Max != want.Max {
			t.Fatalf("hold of %s %+v: want %+v (its user holds %d)", h.ID, h.Hold, want, per[h.ID[0]])
		}
	}
	if again := a.Holds(time.Now().Add(commands.HoldAfter), -1); len(again) != 0 {
		t.Fatalf("holds written twice: %v", again)
	}
	// Raising the queue limit admits at once, still two per user.
	a.Limits.MaxRunning = 100
	more := a.Next(time.Now())
	if len(more) != 2 {
		t.Fatalf("admitted %v after raising the limit: want the 2 that the per-user limit leaves", more)
	}
	// Lowering it admits nothing and touches nothing running.
	run(a, more)
	a.Limits.MaxRunning = 1
	if n := a.Next(time.Now()); len(n) != 0 || a.Counts().Holding != 6 {
		t.Fatalf("after lowering: admitted %v, holding %d", n, a.Counts().Holding)
	}
	// Lowered under what runs, with users under their own limit: still none.
	a.Limits.MaxRunningPerUser = 0
	if n := a.Next(time.Now()); len(n) != 0 {
		t.Fatalf("limit 1 with 6 holding admitted %v", n)
	}
}

func TestAdmissionSlotsAndStates(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{MaxRunning: 1})
	ids := pend(a, "u", 3, 0)
	first := a.Next(time.Now())
	if len(first) != 1 || first[0] != ids[0] {
		t.Fatalf("admitted %v", first)
	}
	// The admission lost its race (a cancel came first): the slot is given back.
	a.Observe(commands.Slot{ID: ids[0], State: domain.StateCancelled})
	a.Settled(ids[0], false)
	if c := a.Counts(); c.Holding != 0 || c.Pending != 2 {
		t.Fatalf("after a refused admission: %+v", c)
	}
	// A failed write of a job still pending puts it back in its place.
	second := a.Next(time.Now())
	a.Settled(second[0], false)
	if p, ok := a.Position(ids[1]); !ok || p != 0 {
		t.Fatalf("position of the job whose admission failed: %d %v, want 0", p, ok)
	}
	if p, _ := a.Position(ids[2]); p != 1 {
		t.Fatalf("position of the last: %d, want 1", p)
	}
	// A retry after backoff (scheduled) and a waiting parent hold none.
	got := a.Next(time.Now())
	run(a, got)
	a.Observe(commands.Slot{ID: got[0], State: domain.StateScheduled})
	if a.Counts().Holding != 0 {
		t.Fatal("a job waiting for its retry holds a slot")
	}
	next := a.Next(time.Now())
	run(a, next)
	a.Observe(commands.Slot{ID: next[0], State: domain.StateWaiting})
	if a.Counts().Holding != 0 {
		t.Fatal("a waiting parent holds a slot")
	}
	// The retry comes due: pending again, and admitted.
	a.Observe(commands.Slot{ID: got[0], State: domain.StatePending})
	if n := a.Next(time.Now()); len(n) != 1 || n[0] != got[0] {
		t.Fatalf("the due retry: %v", n)
	}
	// Requeued (lease lost, worker shut down): it keeps its slot.
	a.Observe(commands.Slot{ID: got[0], State: domain.StateQueued})
	a.Observe(commands.Slot{ID: got[0], State: domain.StateRunning})
	a.Observe(commands.Slot{ID: got[0], State: domain.StateQueued})
	if c := a.Counts(); c.Holding != 1 {
		t.Fatalf("requeued job: holding %d, want 1", c.Holding)
	}
}

func TestAdmissionPositionRoundRobin(t *testing.T) {
	a := commands.NewAdmission("q", domain.QueueLimits{MaxRunning: 1})
	x := pend(a, "x", 5, 0)
	y := pend(a, "y", 2, 10)
	// Turns: x0 y0 x1 y1 x2 x3 x4.
	want := map[string]int{x[0]: 0, y[0]: 1, x[1]: 2, y[1]: 3, x[2]: 4, x[3]: 5, x[4]: 6}
	for id, w := range want {
		if p, ok := a.Position(id); !ok || p != w {
			t.Errorf("position of %s = %d, want %d", id, p, w)
		}
	}
	var order []string
	for range 7 {
		n := a.Next(time.Now())
		if len(n) != 1 {
			t.Fatalf("admitted %v", n)
		}
		order = append(order, n[0])
		run(a, n)
		a.Observe(commands.Slot{ID: n[0], State: domain.StateSucceeded})
	}
	for i, id := range order {
		if want[id] != i {
			t.Fatalf("admission order %v does not follow the positions", order)
		}
	}
}

func TestCheckLimitsAndUser(t *testing.T) {
	for _, l := range []domain.QueueLimits{{MaxRunning: -1}, {MaxRunningPerUser: -1}, {MaxRunning: commands.MaxLimit + 1}} {
		if err := commands.CheckLimits(l); err == nil {
			t.Errorf("CheckLimits(%+v) = nil", l)
		}
	}
	for _, u := range []string{"a\x00b", string(make([]byte, 200)), "\xff"} {
		if err := commands.CheckUser(u); err == nil {
			t.Errorf("CheckUser(%q) = nil", u)
		}
	}
	if err := commands.CheckUser("alice@example.com"); err != nil {
		t.Fatal(err)
	}
}
