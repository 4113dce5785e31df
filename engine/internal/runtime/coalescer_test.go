package runtime

import (
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

type flushed struct {
	mu  sync.Mutex
	got []int64
	ch  chan int64
}

func (f *flushed) flush(_, _ string, p domain.Progress) {
	f.mu.Lock()
	f.got = append(f.got, p.Current)
	f.mu.Unlock()
	f.ch <- p.Current
}

func newFlushed() *flushed { return &flushed{ch: make(chan int64, 16)} }

func wait(t *testing.T, f *flushed, want int64) {
	t.Helper()
	select {
	case got := <-f.ch:
		if got != want {
			t.Fatalf("flushed %d, want %d", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("nothing flushed, want %d", want)
	}
}

func none(t *testing.T, f *flushed, d time.Duration) {
	t.Helper()
	select {
	case got := <-f.ch:
		t.Fatalf("flushed %d, want nothing", got)
	case <-time.After(d):
	}
}

// TestCoalescerHold is the gateway's use: the first report of an interval
// is the caller's to write, the next ones are held and the last of them
// written when the interval ends; a state report takes what is pending.
func TestCoalescerHold(t *testing.T) {
	f := newFlushed()
	c := NewCoalescer(200*time.Millisecond, f.flush)
	if c.Hold("j", "w", domain.Progress{Current: 1}) {
		t.Fatal("the first report was held")
	}
	for i := int64(2); i <= 5; i++ {
		if !c.Hold("j", "w", domain.Progress{Current: i}) {
			t.Fatalf("report %d within the interval was not held", i)
		}
	}
	wait(t, f, 5) // the last one, once
	if !c.Hold("j", "w", domain.Progress{Current: 6}) {
		t.Fatal("report right after a flush was not held")
	}
	if p := c.Take("j", "other", false); p != nil {
		t.Fatalf("another worker took %+v", p)
	}
	if p := c.Take("j", "w", false); p == nil || p.Current != 6 {
		t.Fatalf("took %+v, want 6", p)
	}
	none(t, f, 300*time.Millisecond) // taken: not flushed
	c.PutBack("j", "w", &domain.Progress{Current: 7})
	wait(t, f, 7)
	none(t, f, 300*time.Millisecond)
	if c.Hold("j", "w", domain.Progress{Current: 8}) {
		t.Fatal("report an interval after the last write was held")
	}
	if p := c.Take("j", "w", true); p != nil {
		t.Fatalf("took %+v after the flush", p)
	}
}

// TestCoalescerDefer is the runtime's use: a handler's report never
// writes itself; the first goes at once, the last of an interval at its
// end, and Pause keeps the value for the outcome.
func TestCoalescerDefer(t *testing.T) {
	f := newFlushed()
	c := NewCoalescer(200*time.Millisecond, f.flush)
	c.Defer("j", "w", domain.Progress{Current: 1})
	wait(t, f, 1)
	c.Defer("j", "w", domain.Progress{Current: 2})
	c.Defer("j", "w", domain.Progress{Current: 3})
	wait(t, f, 3)
	c.Defer("j", "w", domain.Progress{Current: 4})
	c.Pause("j")
	none(t, f, 300*time.Millisecond)
	if p := c.Take("j", "w", true); p == nil || p.Current != 4 {
		t.Fatalf("took %+v, want 4", p)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.got) != 2 {
		t.Fatalf("flushed %v, want [1 3]", f.got)
	}
}
