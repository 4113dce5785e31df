package store

import (
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jetflow/jetflow/internal/domain"
)

// TestParentReadsAnswerFromAReadBegunAfterTheAsk: whoever asks gets the
// answer of a read that began after it asked, never of one under way
// (ParentEnded must see every transition of the parent before the
// child's claim), and those who ask at once share reads.
func TestParentReadsAnswerFromAReadBegunAfterTheAsk(t *testing.T) {
	var p parentReads
	var version atomic.Int64 // the parent's "log": moves on while reads run
	var reads atomic.Int64
	release := make(chan struct{}) // holds the first read until every asker asked
	read := func() (domain.State, bool) {
		n := reads.Add(1)
		v := version.Load() // what this read sees: the log when it began
		if n == 1 {
			<-release
		}
		return domain.State(strconv.FormatInt(v, 10)), true
	}
	const askers = 64
	var asked, wg sync.WaitGroup
	asked.Add(askers)
	errs := make(chan string, askers)
	for range askers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := version.Add(1) // a transition lands, then this child asks
			asked.Done()
			st, ok := p.do(context.Background(), "parent", read)
			got, _ := strconv.ParseInt(string(st), 10, 64)
			if !ok || got < at {
				errs <- "asked at " + strconv.FormatInt(at, 10) + ", answered from a read of " + string(st)
			}
		}()
	}
	asked.Wait()
	close(release)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	// The first read was held until all had asked: everyone else shares
	// the read after it, or a later one.
	if n := reads.Load(); n < 2 || n > askers/2 {
		t.Fatalf("%d reads for %d askers", n, askers)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.m) != 0 {
		t.Fatalf("reads of %d parents still kept after all ended", len(p.m))
	}
}

// A read's answer of "no answer" reaches everyone who shared it, and an
// asker whose context ends while waiting leaves with none, letting those
// who joined its read ask another way.
func TestParentReadsNoAnswer(t *testing.T) {
	var p parentReads
	hold := make(chan struct{})
	started := make(chan struct{})
	go func() {
		p.do(context.Background(), "x", func() (domain.State, bool) { close(started); <-hold; return domain.StateRunning, true })
	}()
	<-started
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan bool)
	go func() {
		_, ok := p.do(ctx, "x", func() (domain.State, bool) { return domain.StateRunning, true })
		left <- ok
	}()
	// The second asker waits behind the read under way; its context ends.
	for {
		p.mu.Lock()
		waiting := p.m["x"] != nil && p.m["x"].next != nil
		p.mu.Unlock()
		if waiting {
			break
		}
		runtime.Gosched()
	}
	cancel()
	if <-left {
		t.Fatal("an asker whose context ended got an answer")
	}
	close(hold)
	if _, ok := p.do(context.Background(), "x", func() (domain.State, bool) { return "", false }); ok {
		t.Fatal("a read without an answer answered")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.m) != 0 {
		t.Fatalf("reads of %d parents still kept", len(p.m))
	}
}
