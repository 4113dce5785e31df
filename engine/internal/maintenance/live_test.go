package maintenance

import (
	"slices"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

func TestLiveJobs(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	l := newLiveJobs(3)
	look := func(want ...string) {
		t.Helper()
		got := l.toLook(now, 10)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("to look at: %v, want %v", got, want)
		}
	}
	job := func(id string, s domain.State, seq uint64) *domain.Job {
		return &domain.Job{ID: id, State: s, Seq: seq}
	}

	l.moved("a", domain.StateQueued, 5)
	look("a") // its deadline is not known yet
	l.learn(job("a", domain.StateQueued, 5), time.Time{}, false)
	look() // no deadline in its state
	l.moved("a", "", 6)
	look("a") // an event that is not a move may change it
	l.learn(job("a", domain.StateQueued, 5), time.Time{}, false)
	look("a") // a read behind the last event seen says nothing
	l.learn(job("a", domain.StateRunning, 6), now.Add(time.Minute), true)
	look()
	now = now.Add(2 * time.Minute)
	look("a") // past its deadline
	l.moved("a", domain.StateSucceeded, 7)
	look()
	if n := l.len(); n != 0 {
		t.Fatalf("an ended job is still held: %d", n)
	}

	// An event read again (the feed resumed from its checkpoint) is
	// overtaken by the ones after it, read again too.
	l.moved("a", domain.StateRunning, 6)
	l.moved("a", domain.StateSucceeded, 7)
	look()

	// A read of the whole bucket adds live jobs, drops ended ones, and
	// leaves a job whose record is behind its last event to be looked at.
	l.learn(job("b", domain.StateQueued, 3), time.Time{}, false)
	l.moved("c", domain.StateQueued, 9)
	l.learn(job("c", domain.StateSucceeded, 8), time.Time{}, false)
	look("c")
	l.learn(job("b", domain.StateCancelled, 4), time.Time{}, false)
	look("c")
	if n := l.len(); n != 1 {
		t.Fatalf("held %d, want 1 (c)", n)
	}

	// The feed is fresh only when it read to the log's end lately.
	if l.fresh(now, time.Minute) {
		t.Fatal("fresh before the feed caught up")
	}
	l.caughtUp(now)
	if !l.fresh(now.Add(time.Minute), time.Minute) || l.fresh(now.Add(time.Minute+1), time.Minute) {
		t.Fatal("freshness")
	}

	// Overflow: the list is dropped and not kept (not fresh) until a read
	// of the whole bucket found few enough.
	for _, id := range []string{"d", "e", "f"} {
		l.moved(id, domain.StateQueued, 20)
	}
	if n := l.len(); n != 0 || l.fresh(now, time.Hour) {
		t.Fatalf("after an overflow: held %d, fresh %v", n, l.fresh(now, time.Hour))
	}
	l.moved("g", domain.StateQueued, 21)
	l.learn(job("h", domain.StateQueued, 21), time.Time{}, false)
	if n := l.len(); n != 0 {
		t.Fatalf("overflowed list keeps %d", n)
	}
	l.readAll(2) // the last full read found 2 of room 3: more than half
	if l.fresh(now, time.Hour) {
		t.Fatal("kept again with 2 live jobs of room 3")
	}
	l.readAll(1)
	l.moved("g", domain.StateQueued, 22)
	if n := l.len(); n != 1 || !l.fresh(now, time.Hour) {
		t.Fatalf("after a read that found 1: held %d, fresh %v", n, l.fresh(now, time.Hour))
	}

	// A read of the whole bucket drops what it did not see, once read,
	// with no event since it began (purged); it keeps jobs never read (their
	// record may not be written yet) and jobs with later events.
	l = newLiveJobs(10)
	l.caughtUp(now)
	l.learn(job("gone", domain.StateQueued, 30), time.Time{}, false)
	l.learn(job("seen", domain.StateQueued, 31), time.Time{}, false)
	l.moved("unread", domain.StateQueued, 32)
	l.learn(job("later", domain.StateQueued, 33), time.Time{}, false)
	seed := l.readAll(0)
	seed(job("seen", domain.StateQueued, 31), time.Time{}, false)
	l.moved("later", domain.StateRunning, 41)
	l.sweep(40)
	got := l.toLook(now, 10)
	slices.Sort(got)
	if n := l.len(); n != 3 || !slices.Equal(got, []string{"later", "unread"}) {
		t.Fatalf("after a sweep: held %d, to look at %v", n, got)
	}

	// A new term starts empty and not fresh.
	l.clear()
	if n := l.len(); n != 0 || l.fresh(now, time.Hour) {
		t.Fatalf("after clear: held %d, fresh %v", n, l.fresh(now, time.Hour))
	}
}
