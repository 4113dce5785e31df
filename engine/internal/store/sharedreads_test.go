package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// waitUntil polls cond until it holds; the test fails after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatalf("not after 10 s: %s", what)
		}
	}
}

// nextAskers is how many wait for the next read of id (0: none asked).
func (p *parentReads) nextAskers(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.m[id]; r != nil && r.next != nil {
		return r.next.askers
	}
	return 0
}

// recv is the next value of ch; the test fails after 10 s without one.
func recv[T any](t *testing.T, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("no answer after 10 s")
		panic("unreachable")
	}
}

func (p *parentReads) kept() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}

// TestParentReadsShareTheNextRead: while a read of a parent is under way,
// every child that asks waits for the next one, which begins once that one
// ended, and all of them take its answer: two reads for 64 children, each
// answer from a read begun after its child asked.
func TestParentReadsShareTheNextRead(t *testing.T) {
	var p parentReads
	var version atomic.Int64 // the parent's "log": moves on while reads run
	var reads atomic.Int64
	release := make(chan struct{})
	read := func() (domain.State, bool) {
		n := reads.Add(1)
		v := version.Load() // what this read sees: the log when it began
		if n == 1 {
			<-release
		}
		return domain.State(strconv.FormatInt(v, 10)), true
	}
	const askers = 64
	type answer struct {
		at  int64
		st  domain.State
		ok  bool
		who int
	}
	answers := make(chan answer, askers)
	ask := func(who int) {
		at := version.Add(1) // a transition lands, then this child asks
		st, ok := p.do(context.Background(), "parent", read)
		answers <- answer{at, st, ok, who}
	}
	go ask(0)
	waitUntil(t, "the first read under way", func() bool { return reads.Load() == 1 })
	for i := 1; i < askers; i++ {
		go ask(i)
	}
	waitUntil(t, "63 children waiting for the next read", func() bool { return p.nextAskers("parent") == askers-1 })
	close(release)
	for range askers {
		a := recv(t, answers)
		got, _ := strconv.ParseInt(string(a.st), 10, 64)
		if !a.ok || got < a.at {
			t.Errorf("child %d asked at %d, answered from a read of %q", a.who, a.at, a.st)
		}
	}
	if n := reads.Load(); n != 2 {
		t.Fatalf("%d reads for %d children asking at once, want 2", n, askers)
	}
	if n := p.kept(); n != 0 {
		t.Fatalf("reads of %d parents still kept after all ended", n)
	}
}

// The maker of the next read whose context ends while it waits leaves with
// no answer, and so do those who joined its read (they read another way);
// a read's "no answer" reaches everyone who shared it.
func TestParentReadsNoAnswer(t *testing.T) {
	var p parentReads
	hold := make(chan struct{})
	var reads atomic.Int64
	read := func() (domain.State, bool) {
		if reads.Add(1) == 1 {
			<-hold
		}
		return domain.StateRunning, true
	}
	first := make(chan bool, 1)
	go func() { _, ok := p.do(context.Background(), "x", read); first <- ok }()
	waitUntil(t, "the first read under way", func() bool { return reads.Load() == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan bool, 3)
	go func() { _, ok := p.do(ctx, "x", read); left <- ok }() // the next read's maker
	waitUntil(t, "the next read made", func() bool { return p.nextAskers("x") == 1 })
	for range 2 {
		go func() { _, ok := p.do(context.Background(), "x", read); left <- ok }()
	}
	waitUntil(t, "two children joined the next read", func() bool { return p.nextAskers("x") == 3 })
	cancel()
	for range 3 {
		if recv(t, left) {
			t.Fatal("an answer from a read whose maker left")
		}
	}
	close(hold)
	if !recv(t, first) {
		t.Fatal("the first read gave no answer")
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads, want 1: the next one's maker left before it began", n)
	}

	// A read with no answer: everyone who shared it gets none.
	hold2 := make(chan struct{})
	var reads2 atomic.Int64
	none := func() (domain.State, bool) {
		if reads2.Add(1) == 1 {
			<-hold2
		}
		return "", false
	}
	got := make(chan bool, 4)
	go func() { _, ok := p.do(context.Background(), "y", none); got <- ok }()
	waitUntil(t, "the first read under way", func() bool { return reads2.Load() == 1 })
	for range 3 {
		go func() { _, ok := p.do(context.Background(), "y", none); got <- ok }()
	}
	waitUntil(t, "three waiting for the next read", func() bool { return p.nextAskers("y") == 3 })
	close(hold2)
	for range 4 {
		if recv(t, got) {
			t.Fatal("a read without an answer answered")
		}
	}
	if n := reads2.Load(); n != 2 {
		t.Fatalf("%d reads, want 2", n)
	}
	if n := p.kept(); n != 0 {
		t.Fatalf("reads of %d parents still kept", n)
	}
}

// Many children of a few parents asking at once, some giving up, some reads
// without an answer: every answer comes from a read begun after its ask,
// nobody waits for ever, and nothing is kept once all ended.
func TestParentReadsUnderLoad(t *testing.T) {
	var p parentReads
	var versions [3]atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for range 200 {
				i := rng.IntN(len(versions))
				id := strconv.Itoa(i)
				ctx, cancel := context.WithCancel(context.Background())
				if rng.IntN(10) == 0 {
					cancel() // this child gives up at once
				}
				at := versions[i].Add(1)
				st, ok := p.do(ctx, id, func() (domain.State, bool) {
					v := versions[i].Load()
					runtime.Gosched()
					return domain.State(strconv.FormatInt(v, 10)), rng.IntN(20) != 0
				})
				cancel()
				if got, _ := strconv.ParseInt(string(st), 10, 64); ok && got < at {
					errs <- fmt.Errorf("parent %s: asked at %d, answered from a read of %d", id, at, got)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("children still waiting after 60 s")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := p.kept(); n != 0 {
		t.Fatalf("reads of %d parents still kept", n)
	}
}
