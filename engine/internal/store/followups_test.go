package store

import (
	"strconv"
	"testing"
	"time"
)

// TestFollowUps: an event's follow-ups are taken once, for that event only;
// what came before a reconnection is not noted, and a reconnection or the
// cap forgets the rest (each forgotten one is repeated by the Projector).
func TestFollowUps(t *testing.T) {
	f := &followUps{}
	f.note("a", 5)
	if f.take("a", 4) {
		t.Fatal("an earlier event of the job taken as done")
	}
	if !f.take("a", 5) {
		t.Fatal("the noted event not taken")
	}
	if f.take("a", 5) {
		t.Fatal("taken twice")
	}
	f.note("b", 3)
	if f.take("b", 7) || f.take("b", 3) {
		t.Fatal("a later event taken as done, or the note kept past it")
	}
	f.note("c", 1)
	f.clear()
	if f.take("c", 1) {
		t.Fatal("kept through a clear")
	}
	for i := range maxFollowUps {
		f.note(strconv.Itoa(i), 1)
	}
	f.note("past", 1)
	if f.take("0", 1) || !f.take("past", 1) {
		t.Fatal("the cap did not start over")
	}

	s := &Store{followedUp: &followUps{}}
	s.connected.Store(time.Now().UnixNano())
	s.followedUpSince("before", 1, time.Now().Add(-time.Second))
	s.followedUpSince("after", 1, time.Now().Add(time.Millisecond))
	if s.FollowedUp("before", 1) || !s.FollowedUp("after", 1) {
		t.Fatal("a follow-up published before the connection came back was noted, or one after was not")
	}
}
