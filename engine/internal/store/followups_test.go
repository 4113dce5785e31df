package store

import (
	"strconv"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// TestFollowUps: what a writer saw done of an event is taken once, for that
// event only; what came before a reconnection is not noted, and a
// reconnection or the cap forgets the rest (each forgotten one is verified
// by the Projector). A job is settled (nothing for the Projector to do)
// only when its record was written at the event and everything the job
// then implies was published and acknowledged.
func TestFollowUps(t *testing.T) {
	f := &followUps{}
	f.note("a", 5, false)
	if f.take("a", 4) != NotSeen {
		t.Fatal("an earlier event of the job taken as done")
	}
	if f.take("a", 5) != FollowedUp {
		t.Fatal("the noted event not taken")
	}
	if f.take("a", 5) != NotSeen {
		t.Fatal("taken twice")
	}
	f.note("b", 3, true)
	if f.take("b", 7) != NotSeen || f.take("b", 3) != NotSeen {
		t.Fatal("a later event taken as done, or the note kept past it")
	}
	f.note("c", 1, false)
	f.clear()
	f.note("d", 9, true)
	if f.take("c", 1) != NotSeen || f.take("d", 9) != Settled {
		t.Fatal("kept through a clear")
	}
	for i := range maxFollowUps {
		f.note(strconv.Itoa(i), 1, false)
	}
	f.note("past", 1, false)
	if f.take("0", 1) != NotSeen || f.take("past", 1) != FollowedUp {
		t.Fatal("the cap did not start over")
	}

	s := &Store{followedUp: &followUps{}}
	s.connected.Store(time.Now().UnixNano())
	later, earlier := time.Now().Add(time.Millisecond), time.Now().Add(-time.Second)
	job := func(id string, st domain.State, seq uint64, parent string) Version[domain.Job] {
		j := &domain.Job{ID: id, State: st, Seq: seq}
		j.Spec.Parent = parent
		return Version[domain.Job]{Rec: j, Last: seq}
	}
	ev := func(typ string, to domain.State, seq uint64) *domain.Event {
		return &domain.Event{Type: typ, To: to, Seq: seq}
	}
	for _, c := range []struct {
		what      string
		next      Version[domain.Job]
		ev        *domain.Event
		published int
		projected bool
		since     time.Time
		want      FollowUp
	}{
		{"a submit dispatched and projected", job("q1", domain.StateQueued, 1, ""), ev(domain.EvSubmitted, domain.StateQueued, 1), 1, true, later, Settled},
		{"a submit dispatched, its record reconciled", job("q2", domain.StateQueued, 1, ""), ev(domain.EvSubmitted, domain.StateQueued, 1), 1, false, later, FollowedUp},
		{"a submit dispatched before the connection came back", job("q3", domain.StateQueued, 1, ""), ev(domain.EvSubmitted, domain.StateQueued, 1), 1, true, earlier, NotSeen},
		{"a queued job reprioritized: no dispatch published", job("q4", domain.StateQueued, 2, ""), ev(domain.EvReprioritized, "", 2), 0, true, later, NotSeen},
		{"a plain job that succeeded", job("s1", domain.StateSucceeded, 3, ""), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 0, true, later, Settled},
		{"a child that succeeded, its piece event published", job("c1", domain.StateSucceeded, 3, "p"), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 1, true, later, Settled},
		{"a child that succeeded, no piece event", job("c2", domain.StateSucceeded, 3, "p"), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 0, true, later, NotSeen},
		{"a plain job that succeeded, its record not written", job("s2", domain.StateSucceeded, 3, ""), ev(domain.EvSucceeded, domain.StateSucceeded, 3), 0, false, later, NotSeen},
	} {
		s.afterDone(c.next, c.ev, c.published, c.projected, c.since)
		if got := s.Seen(c.next.Rec.ID, c.ev.Seq); got != c.want {
			t.Errorf("%s: %v, want %v", c.what, got, c.want)
		}
	}
}
