package projections

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// TestStatsFoldGaugesAtRandom: after every event of a random history the
// depth and oldest wait of each series are what a brute-force count of
// the queued jobs says, and a start's latency is its wait.
func TestStatsFoldGaugesAtRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := NewStatsFold()
	type queued struct {
		ns, q string
		since int64
	}
	want := map[string]queued{} // the queued jobs
	t0 := time.Unix(1_800_000_000, 0)
	for step := range 5000 {
		at := t0.Add(time.Duration(step) * time.Millisecond)
		id := fmt.Sprintf("j%d", rng.IntN(200))
		ns, q := fmt.Sprintf("n%d", rng.IntN(2)), fmt.Sprintf("q%d", rng.IntN(3))
		ev := &domain.Event{JobID: id, Time: at}
		w, in := want[id]
		if in {
			ns, q = w.ns, w.q
			ev.Type, ev.From, ev.To = domain.EvStarted, domain.StateQueued, domain.StateRunning
		} else {
			ev.Type, ev.From, ev.To = domain.EvSubmitted, domain.StateNew, domain.StateQueued
		}
		effect, series := f.Fold(ev, ns, q)
		if in {
			delete(want, id)
			if !effect.HasLatency || effect.Latency != float64(at.UnixNano()-w.since)/1e9 || !effect.Started {
				t.Fatalf("step %d: start effect %+v, queued since %d", step, effect, w.since)
			}
		} else {
			want[id] = queued{ns, q, at.UnixNano()}
			if !effect.Submitted || effect.HasLatency {
				t.Fatalf("step %d: submit effect %+v", step, effect)
			}
		}
		for k, d := range statsDims(ns, q) {
			if series[k] == nil || series[k].Dim != d {
				t.Fatalf("step %d: series %d is %+v, want %+v", step, k, series[k], d)
			}
		}
		for _, d := range []StatsDim{{}, {"n0", ""}, {"", "q1"}, {"n1", "q2"}} {
			n, oldest := 0, int64(0)
			for _, w := range want {
				if (d.Namespace == "" || d.Namespace == w.ns) && (d.Queue == "" || d.Queue == w.q) {
					n++
					if oldest == 0 || w.since < oldest {
						oldest = w.since
					}
				}
			}
			if gn, go_ := f.Gauges(d); gn != n || go_ != oldest {
				t.Fatalf("step %d: series %+v: depth %d oldest %d, want %d %d", step, d, gn, go_, n, oldest)
			}
		}
	}
}

// TestStatsFoldBounded: past MaxDims series an event counts in the series
// the fold has only, and everything's always.
func TestStatsFoldBounded(t *testing.T) {
	f := NewStatsFold()
	f.MaxDims = 4
	at := time.Unix(1_800_000_000, 0)
	_, s1 := f.Fold(&domain.Event{JobID: "a", Time: at, Type: domain.EvSubmitted, To: domain.StateQueued}, "n", "q")
	for k := range s1 {
		if s1[k] == nil {
			t.Fatalf("first pair: series %d not kept", k)
		}
	}
	_, s2 := f.Fold(&domain.Event{JobID: "b", Time: at, Type: domain.EvSubmitted, To: domain.StateQueued}, "m", "r")
	if s2[0] != nil || s2[1] != nil || s2[2] != nil || s2[3] == nil {
		t.Fatalf("past the bound: %v", s2)
	}
	if n, _ := f.Gauges(StatsDim{}); n != 2 {
		t.Fatalf("everything's depth %d, want 2", n)
	}
	if f.tracked(StatsDim{"m", "r"}) {
		t.Fatal("a series past the bound is kept")
	}
}

// A job seeded as waiting from a record behind the log (its claim's record
// not written yet when the fold started from a checkpoint past the claim)
// stops counting in the oldest wait at its next move, which does not leave
// queued: a later start of another job is what the gauge then shows.
func TestStatsFoldSeededBehindLeaves(t *testing.T) {
	f := NewStatsFold()
	t0 := time.Unix(1_800_000_000, 0)
	f.SeedWaiting("stale", "n", "q", t0)
	if got := f.oldestOf(StatsDim{"n", "q"}); got != t0.UnixNano() {
		t.Fatalf("oldest %d after the seed, want %d", got, t0.UnixNano())
	}
	// Its claim was before the checkpoint; its outcome comes now.
	f.Fold(&domain.Event{JobID: "stale", Type: domain.EvSucceeded, From: domain.StateRunning, To: domain.StateSucceeded,
		Time: t0.Add(time.Minute)}, "n", "q")
	if got := f.oldestOf(StatsDim{"n", "q"}); got != 0 {
		t.Fatalf("oldest %d after the seeded job ended, want 0", got)
	}
	at := t0.Add(2 * time.Minute)
	f.Fold(&domain.Event{JobID: "fresh", Type: domain.EvSubmitted, From: domain.StateNew, To: domain.StateQueued, Time: at}, "n", "q")
	if got := f.oldestOf(StatsDim{"n", "q"}); got != at.UnixNano() {
		t.Fatalf("oldest %d, want the fresh job's %d", got, at.UnixNano())
	}
}
