package runtime

import (
	"testing"
	"time"
)

// How many jobs may be claimed ahead: the slots expected to free during
// one claim, bounded, and none before anything is measured or after a job
// found no slot in time.
func TestAheadAllowed(t *testing.T) {
	for _, tc := range []struct {
		name           string
		claim, handler time.Duration // 0: not measured
		unseated       bool
		want           int
	}{
		{"nothing measured", 0, 0, false, 0},
		{"no handler ended yet", 10 * time.Millisecond, 0, false, 0},
		{"handlers far faster than a claim: the bound", 10 * time.Millisecond, time.Microsecond, false, aheadFactor * 50},
		{"handlers 10x a claim", 10 * time.Millisecond, 100 * time.Millisecond, false, 5},
		{"handlers 1000x a claim: none", 10 * time.Millisecond, 10 * time.Second, false, 0},
		{"a job found no slot in time", 10 * time.Millisecond, time.Microsecond, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Runtime{slots: make(chan struct{}, 50), ahead: make(chan struct{}, aheadFactor*50)}
			if tc.claim > 0 {
				r.claimTime.add(tc.claim)
			}
			if tc.handler > 0 {
				r.handlerTime.add(tc.handler)
			}
			r.unseated.Store(tc.unseated)
			if got := r.aheadAllowed(); got != tc.want {
				t.Fatalf("aheadAllowed = %d, want %d", got, tc.want)
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
