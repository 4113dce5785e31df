package runtime

import (
	"context"
	"testing"
	"time"
)

// How many jobs may be claimed ahead: four times the slots expected to
// free during one claim, bounded, and none before anything is measured,
// when no handler ended for long, or lately after a job found no slot in
// time.
func TestAheadAllowed(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name     string
		claim    time.Duration // 0: not measured
		ends     int           // handlers ended in the last second
		ago      time.Duration // ... that long ago
		slowest  time.Duration // the longest of them
		running  time.Duration // the oldest handler running has run this long (0: none)
		unseated time.Duration // a job found no slot in time this long ago (0: never)
		quick    bool          // one server, the default mode: a claim is about a round trip
		want     int
	}{
		{"nothing measured", 0, 0, 0, 0, 0, 0, false, 0},
		{"the default mode: none", 10 * time.Millisecond, 10000, 0, 0, 0, 0, true, 0},
		{"no handler ended", 10 * time.Millisecond, 0, 0, 0, 0, 0, false, 0},
		{"10,000 ends a second: the bound", 10 * time.Millisecond, 10000, 0, 0, 0, 0, false, aheadFactor * 50},
		{"1,000 ends a second", 10 * time.Millisecond, 1000, 0, 0, 0, 0, false, 40},
		{"10 ends a second: none", 10 * time.Millisecond, 10, 0, 0, 0, 0, false, 0},
		{"1,000 ends, but 3 s ago: none", 10 * time.Millisecond, 1000, 3 * time.Second, 0, 0, 0, false, 0},
		{"1,000 ends, one of a handler that ran 600 ms: none", 10 * time.Millisecond, 1000, 0, 600 * time.Millisecond, 0, 0, false, 0},
		{"1,000 ends, the longest 400 ms", 10 * time.Millisecond, 1000, 0, 400 * time.Millisecond, 0, 0, false, 40},
		{"1,000 ends, a handler running for 600 ms: none", 10 * time.Millisecond, 1000, 0, 0, 600 * time.Millisecond, 0, false, 0},
		{"1,000 ends, the oldest handler running for 400 ms", 10 * time.Millisecond, 1000, 0, 0, 400 * time.Millisecond, 0, false, 40},
		{"a job found no slot in time just now", 10 * time.Millisecond, 10000, 0, 0, 0, time.Millisecond, false, 0},
		{"a job found no slot in time long ago", 10 * time.Millisecond, 10000, 0, 0, 0, 2 * minSeatWait, false, aheadFactor * 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Runtime{cfg: Config{Concurrency: 50}, slowClaims: !tc.quick}
			if tc.claim > 0 {
				r.claimTime.add(tc.claim)
			}
			// The ends spread over the second before ago; the window under
			// way began then.
			for i := range tc.ends {
				d := time.Microsecond
				if i == tc.ends/2 {
					d = max(d, tc.slowest)
				}
				r.ends.add(now.Add(-tc.ago-endWindow+time.Duration(i)*endWindow/time.Duration(tc.ends)), d)
			}
			if tc.unseated > 0 {
				r.unseatedUntil.Store(now.Add(-tc.unseated).Add(r.seatWait()).UnixNano())
			}
			var oldest time.Time
			if tc.running > 0 {
				oldest = now.Add(-tc.running)
			}
			if got := r.aheadAllowedAt(now, oldest); got != tc.want {
				t.Fatalf("aheadAllowedAt = %d, want %d", got, tc.want)
			}
		})
	}
}

// The running average weighs the last duration an eighth, and is never 0
// once something was measured.
func TestMeanTime(t *testing.T) {
	var m meanTime
	if m.get() != 0 {
		t.Fatal("not 0 before the first")
	}
	m.add(800)
	m.add(1600)
	if got := m.get(); got != 900 {
		t.Fatalf("mean %d, want 900", got)
	}
	var z meanTime
	z.add(0)
	if z.get() != 1 {
		t.Fatalf("mean of 0 is %d, want 1 (measured)", z.get())
	}
}

// The oldest handler running is the first granted still running: a long
// one stays the oldest while thousands of short ones start and end after
// it, and the list behind it stays within twice Concurrency.
func TestOldestRunning(t *testing.T) {
	r := &Runtime{cfg: Config{Concurrency: 4}}
	s := newSeats(r, 4)
	r.seats = s
	start := func() *place {
		t.Helper()
		p, _ := s.take(false)
		if p == nil {
			t.Fatal("no place free")
		}
		if err := p.seat(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
		return p
	}
	oldest := func() time.Time {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.oldestRunningLocked()
	}
	if !oldest().IsZero() {
		t.Fatal("an oldest handler with none running")
	}
	long := start()
	for range 10000 {
		start().free()
		if got := oldest(); !got.Equal(long.grantAt) {
			t.Fatalf("oldest %v, want the long handler's grant %v", got, long.grantAt)
		}
		s.mu.Lock()
		n := len(s.granted)
		s.mu.Unlock()
		if n > 2*4+1 {
			t.Fatalf("%d places kept as granted behind the long handler", n)
		}
	}
	// Nobody asking for the oldest (a runtime of batches only), the list
	// stays bounded all the same.
	for range 10000 {
		start().free()
		s.mu.Lock()
		n := len(s.granted)
		s.mu.Unlock()
		if n > 2*4+1 {
			t.Fatalf("%d places kept as granted, nobody asking for the oldest", n)
		}
	}
	next := start()
	long.free()
	if got := oldest(); !got.Equal(next.grantAt) {
		t.Fatalf("oldest %v after the long handler ended, want %v", got, next.grantAt)
	}
	next.free()
	if !oldest().IsZero() {
		t.Fatal("an oldest handler with none running")
	}
}
