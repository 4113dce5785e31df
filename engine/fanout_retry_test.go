package engine_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// pieceRuns counts the runs of each piece number.
type pieceRuns struct {
	mu   sync.Mutex
	runs map[int]int
}

func (p *pieceRuns) add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runs == nil {
		p.runs = map[int]int{}
	}
	p.runs[n]++
}

func (p *pieceRuns) snapshot() map[int]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[int]int, len(p.runs))
	for k, v := range p.runs {
		out[k] = v
	}
	return out
}

// carriedFrom reads a parent's piece events and returns, by piece number,
// the run each carried piece.succeeded names.
func (h *harness) carriedFrom(parent string) map[int]string {
	h.t.Helper()
	out := map[int]string{}
	_, err := streams.ReadSubject(h.ctx, h.st.NC, streams.EventsStream, streams.PieceSubject(parent), 1, func(_ uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return err
		}
		if from, ok := ev.Fields["carried_from"].(string); ok && ev.Type == domain.PcSucceeded {
			out[ev.Piece] = from
		}
		return nil
	})
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

// A fan-out of batches retried with failed pieces only runs the batches
// that failed, once each; the rest are carried over, and a retry of that
// retry carries from the whole chain.
func TestRetryFailedBatchesOnly(t *testing.T) {
	h := newHarness(t)
	const n = 20
	failing := map[int]bool{4: true, 9: true, 15: true}
	var failOn atomic.Int32 // 2: pieces in failing fail; 1: only piece 9; 0: none
	failOn.Store(2)
	var runs pieceRuns
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4,
		Handlers: map[string]engine.Handler{"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			f := &engine.FanOut{BatchType: "piece", Batches: make([][]byte, n), BatchMaxRetries: ptr(0)}
			for i := range f.Batches {
				f.Batches[i] = []byte(strconv.Itoa(i + 1))
			}
			return nil, f
		}},
		Batches: map[string]engine.BatchHandler{"piece": func(ctx context.Context, b *engine.BatchTask) error {
			runs.add(b.Piece)
			if (failOn.Load() == 2 && failing[b.Piece]) || (failOn.Load() == 1 && b.Piece == 9) {
				return &engine.PermanentError{Err: errors.New("piece " + strconv.Itoa(b.Piece) + " failed")}
			}
			return nil
		}}})
	first := h.submit(commands.SubmitRequest{Type: "coord"})
	j := h.waitState(first.Job.ID, domain.StateFailed, 20*time.Second)
	if s := summary(t, j); s.Succeeded != n-3 || s.Failed != 3 {
		t.Fatalf("first run: %+v", s)
	}

	failOn.Store(1) // piece 9 fails again
	second, err := h.st.Retry(h.ctx, first.Job.ID, "", true)
	if err != nil {
		t.Fatal(err)
	}
	if !second.Job.Spec.FailedPieces || second.Job.Spec.RetryOf != first.Job.ID {
		t.Fatalf("retry spec: failed_pieces %v, retry_of %q", second.Job.Spec.FailedPieces, second.Job.Spec.RetryOf)
	}
	j = h.waitState(second.Job.ID, domain.StateFailed, 20*time.Second)
	if s := summary(t, j); s.Total != n || s.Succeeded != n-1 || s.Failed != 1 {
		t.Fatalf("second run: %+v", s)
	}
	carried := h.carriedFrom(second.Job.ID)
	if len(carried) != n-3 || carried[1] != first.Job.ID || carried[4] != "" || carried[9] != "" || carried[15] != "" {
		t.Fatalf("second run carried %v", carried)
	}

	failOn.Store(0)
	third, err := h.st.Retry(h.ctx, second.Job.ID, "", true)
	if err != nil {
		t.Fatal(err)
	}
	j = h.waitState(third.Job.ID, domain.StateSucceeded, 20*time.Second)
	if s := summary(t, j); s.Total != n || s.Succeeded != n || s.Failed != 0 {
		t.Fatalf("third run: %+v", s)
	}
	if carried := h.carriedFrom(third.Job.ID); len(carried) != n-1 || carried[9] != "" || carried[4] != second.Job.ID {
		t.Fatalf("third run carried %v", carried)
	}
	// Each piece ran once, but 4 and 15 twice (failed, then succeeded)
	// and 9 three times.
	got := runs.snapshot()
	for p := 1; p <= n; p++ {
		want := 1
		switch p {
		case 4, 15:
			want = 2
		case 9:
			want = 3
		}
		if got[p] != want {
			t.Errorf("piece %d ran %d times, want %d (all: %v)", p, got[p], want, got)
		}
	}
	h.verify()
}

// Children: only the children that did not succeed are submitted again.
func TestRetryFailedChildrenOnly(t *testing.T) {
	h := newHarness(t)
	var fail atomic.Bool
	fail.Store(true)
	var runs pieceRuns
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4, Handlers: map[string]engine.Handler{
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(10, "child", func(i int) string { return strconv.Itoa(i + 1) })}
		},
		"child": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			runs.add(task.Job.Spec.Piece)
			if p := task.Job.Spec.Piece; fail.Load() && (p == 2 || p == 7) {
				return nil, &engine.PermanentError{Err: errors.New("no")}
			}
			return task.Job.Spec.Payload, nil
		},
	}})
	first := h.submit(commands.SubmitRequest{Type: "coord"})
	h.waitState(first.Job.ID, domain.StateFailed, 20*time.Second)
	fail.Store(false)
	second, err := h.st.Retry(h.ctx, first.Job.ID, "", true)
	if err != nil {
		t.Fatal(err)
	}
	j := h.waitState(second.Job.ID, domain.StateSucceeded, 20*time.Second)
	if s := summary(t, j); s.Total != 10 || s.Succeeded != 10 {
		t.Fatalf("second run: %+v", s)
	}
	for p := 1; p <= 10; p++ {
		_, err := h.st.Record(h.ctx, engine.ChildID("default", second.Job.ID, p))
		made := err == nil
		if made != (p == 2 || p == 7) || (!made && !errors.Is(err, commands.ErrNotFound)) {
			t.Errorf("child %d of the retry: made %v (%v)", p, made, err)
		}
	}
	if got := runs.snapshot(); len(got) != 10 || got[2] != 2 || got[7] != 2 || got[1] != 1 {
		t.Fatalf("child runs %v", got)
	}
	h.verify()
}

// A coordinator that fans out differently the second time (another
// number of pieces) runs every piece: piece n need not be the same work.
func TestRetryFailedPiecesOtherPlanRunsAll(t *testing.T) {
	h := newHarness(t)
	var count atomic.Int32
	count.Store(5)
	var runs atomic.Int32
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 4,
		Handlers: map[string]engine.Handler{"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			f := &engine.FanOut{BatchType: "piece", Batches: make([][]byte, count.Load()), BatchMaxRetries: ptr(0)}
			for i := range f.Batches {
				f.Batches[i] = []byte("{}")
			}
			return nil, f
		}},
		Batches: map[string]engine.BatchHandler{"piece": func(ctx context.Context, b *engine.BatchTask) error {
			runs.Add(1)
			if count.Load() == 5 && b.Piece == 5 {
				return &engine.PermanentError{Err: errors.New("no")}
			}
			return nil
		}}})
	first := h.submit(commands.SubmitRequest{Type: "coord"})
	h.waitState(first.Job.ID, domain.StateFailed, 20*time.Second)
	count.Store(6)
	second, err := h.st.Retry(h.ctx, first.Job.ID, "", true)
	if err != nil {
		t.Fatal(err)
	}
	j := h.waitState(second.Job.ID, domain.StateSucceeded, 20*time.Second)
	if s := summary(t, j); s.Total != 6 || s.Succeeded != 6 || runs.Load() != 11 || len(h.carriedFrom(second.Job.ID)) != 0 {
		t.Fatalf("second run: %+v, runs %d", s, runs.Load())
	}
}

// What cannot be retried piece by piece is refused, writing nothing.
func TestRetryFailedPiecesRefused(t *testing.T) {
	h := newHarness(t)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Concurrency: 2, Handlers: map[string]engine.Handler{
		"plain": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.PermanentError{Err: errors.New("no")}
		},
		"coord": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			return nil, &engine.FanOut{Children: childReqs(2, "ok", func(i int) string { return "1" })}
		},
		"ok": func(ctx context.Context, task *engine.Task) ([]byte, error) { return nil, nil },
	}})
	plain := h.submit(commands.SubmitRequest{Type: "plain", MaxRetries: ptr(0)})
	h.waitState(plain.Job.ID, domain.StateFailed, 10*time.Second)
	coord := h.submit(commands.SubmitRequest{Type: "coord"})
	h.waitState(coord.Job.ID, domain.StateSucceeded, 10*time.Second)
	pending := h.submit(commands.SubmitRequest{Type: "nobody"})
	before := h.lastSeq()
	for _, c := range []struct {
		id     string
		want   error
		reason string
	}{
		{plain.Job.ID, commands.ErrInvalidInput, "did not fan out"},
		{coord.Job.ID, commands.ErrInvalidInput, "all 2 pieces"},
		{pending.Job.ID, commands.ErrInvalidTransition, ""},
	} {
		_, err := h.st.Retry(h.ctx, c.id, "", true)
		if !errors.Is(err, c.want) {
			t.Fatalf("retry %s: %v, want %v", c.id, err, c.want)
		}
		var in *commands.InputError
		if c.reason != "" && (!errors.As(err, &in) || in.Field != "failed_pieces" || !strings.Contains(in.Reason, c.reason)) {
			t.Fatalf("retry %s: %#v", c.id, err)
		}
	}
	if after := h.lastSeq(); after != before {
		t.Fatalf("the log grew from %d to %d", before, after)
	}
}
