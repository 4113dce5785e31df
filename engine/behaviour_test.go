package engine_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/engine/internal/cmdservice"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/engine/internal/runtime"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

func TestClaimRace16Goroutines(t *testing.T) {
	h := newHarness(t)
	sub := h.submit(commands.SubmitRequest{Type: "nobody.runs.this"})
	start := make(chan struct{})
	var wins, refusals atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		st := testkit.Store(t, testkit.Conn(t, h.srv), "racer")
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			_, _, err := st.Apply(h.ctx, "claim", sub, func(j *domain.Job) (*domain.Event, error) {
				return commands.Start(j, "racer", uint64(100+i), time.Now())
			})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, commands.ErrInvalidTransition):
				refusals.Add(1)
			default:
				t.Errorf("racer %d: %v", i, err)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 || refusals.Load() != 15 {
		t.Fatalf("%d won, %d refused; want 1 and 15", wins.Load(), refusals.Load())
	}
	h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvStarted)
	h.verify()
}

// The work item a submit publishes is made of its record's bytes
// (streams.Writer.DispatchRecordAsync): the same bytes as the work item encoded whole.
func TestWorkItemIsTheRecord(t *testing.T) {
	h := newHarness(t)
	sub := h.submit(commands.SubmitRequest{Type: "item", Queue: "items", Payload: commands.RawJSON(`{"n":1}`)})
	qs, err := h.st.JS.Stream(h.ctx, streams.QueueStream("items"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := qs.Info(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("%d work items, want 1", info.State.Msgs)
	}
	m, err := qs.GetMsg(h.ctx, info.State.FirstSeq)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := h.st.Record(h.ctx, sub.Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := streams.Marshal(&domain.WorkItem{Rev: rec.Rev, Job: *rec.Job})
	if !bytes.Equal(m.Data, want) {
		t.Fatalf("work item\n%x\nwant the record's\n%x", m.Data, want)
	}
	item, err := streams.DecodeWorkItem(m.Data)
	if err != nil || item.Rev != sub.Rev || item.Job.ID != sub.Job.ID || item.Job.State != domain.StateQueued {
		t.Fatalf("work item %+v, %v: want rev %d of %s, queued", item, err, sub.Rev, sub.Job.ID)
	}
}

func TestDuplicateWorkItemsRunOnce(t *testing.T) {
	h := newHarness(t)
	sub := h.submit(commands.SubmitRequest{Type: "dup", Queue: "dups"})
	// Fifteen more copies of its work item, as redelivery or repair could
	// leave (no message id: the stream keeps every copy).
	item, _ := streams.Marshal(&domain.WorkItem{Rev: sub.Rev, Job: *sub.Job})
	for i := 0; i < 15; i++ {
		if _, err := h.st.JS.Publish(h.ctx, streams.RunSubject("dups", "dup"), item); err != nil {
			t.Fatal(err)
		}
	}
	var runs counter
	release := make(chan struct{})
	h.runtime(engine.RuntimeConfig{Queue: "dups", WorkerID: "w", Concurrency: 16, Handlers: map[string]engine.Handler{
		"dup": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			runs.add(task.Job.ID)
			<-release // hold the job while the duplicates arrive
			return []byte(`1`), nil
		}}})
	qs, err := h.st.JS.Stream(h.ctx, streams.QueueStream("dups"))
	if err != nil {
		t.Fatal(err)
	}
	// The fifteen duplicates are dropped while the first holds the job.
	testkit.WaitFor(t, 10*time.Second, func() error {
		info, err := qs.Info(h.ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 1 {
			return testkit.Errorf("%d work items left", info.State.Msgs)
		}
		return nil
	})
	close(release)
	h.waitState(sub.Job.ID, domain.StateSucceeded, 10*time.Second)
	if n := runs.get(sub.Job.ID); n != 1 {
		t.Fatalf("handler ran %d times", n)
	}
	h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvSucceeded)
	h.verify()
}

func TestRetriesWithBackoff(t *testing.T) {
	h := newHarness(t)
	var fails atomic.Int32
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Handlers: map[string]engine.Handler{
		"flaky": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			if task.Job.Attempt <= 2 {
				fails.Add(1)
				return nil, errors.New("not yet")
			}
			return []byte(`"done"`), nil
		}}})
	// Zero backoff: requeued at once.
	fast := h.submit(commands.SubmitRequest{Type: "flaky", Backoff: dur(0)})
	j := h.waitState(fast.Job.ID, domain.StateSucceeded, 10*time.Second)
	if j.Attempt != 3 || j.Retries != 2 || string(j.Result) != `"done"` || j.Error != nil {
		t.Fatalf("job %+v", j)
	}
	h.wantEvents(fast.Job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvRetryScheduled, domain.EvStarted,
		domain.EvRetryScheduled, domain.EvStarted, domain.EvSucceeded)
	// One second base: scheduled (never failed) while it waits.
	slow := h.submit(commands.SubmitRequest{Type: "flaky", Backoff: dur(time.Second), Jitter: ptr(0.0)})
	j = h.waitState(slow.Job.ID, domain.StateScheduled, 10*time.Second)
	if j.Retries != 1 || j.Error == nil || j.Error.Message != "not yet" || j.RunAt.Sub(j.UpdatedAt) != time.Second {
		t.Fatalf("waiting for retry: %+v", j)
	}
	j = h.waitState(slow.Job.ID, domain.StateSucceeded, 15*time.Second)
	h.wantEvents(slow.Job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvRetryScheduled, domain.EvDue,
		domain.EvStarted, domain.EvRetryScheduled, domain.EvDue, domain.EvStarted, domain.EvSucceeded)
	if j.StartedAt.Before(j.RunAt) {
		t.Fatalf("retry started %s before its run_at %s", j.StartedAt, j.RunAt)
	}
	h.verify()
}

func TestFailureKinds(t *testing.T) {
	h := newHarness(t)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Handlers: map[string]engine.Handler{
		"permanent": func(context.Context, *engine.Task) ([]byte, error) {
			return nil, &engine.PermanentError{Err: errors.New("bad input")}
		},
		"coded": func(context.Context, *engine.Task) ([]byte, error) {
			return nil, codeErr("VALIDATION")
		},
		"panics": func(context.Context, *engine.Task) ([]byte, error) { panic("kaboom") },
		"slow": func(ctx context.Context, _ *engine.Task) ([]byte, error) {
			<-ctx.Done()
			if !errors.Is(context.Cause(ctx), engine.ErrTimeout) {
				return nil, errors.New("context ended without the timeout cause")
			}
			return nil, ctx.Err()
		},
		"later": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			if task.Job.Attempt == 1 {
				return nil, &engine.RetryLaterError{Delay: 0, Reason: "GPU busy"}
			}
			return []byte(`1`), nil
		},
		"badresult": func(context.Context, *engine.Task) ([]byte, error) { return []byte(`{not json`), nil },
	}})
	check := func(req commands.SubmitRequest, state domain.State, attempts, retries int, code string, evs ...string) *domain.Job {
		t.Helper()
		sub := h.submit(req)
		j := h.waitState(sub.Job.ID, state, 15*time.Second)
		if j.Attempt != attempts || j.Retries != retries {
			t.Fatalf("%s: attempts %d retries %d, want %d %d", req.Type, j.Attempt, j.Retries, attempts, retries)
		}
		if code != "" && (j.Error == nil || j.Error.Code != code) {
			t.Fatalf("%s: error %+v, want code %s", req.Type, j.Error, code)
		}
		h.wantEvents(sub.Job.ID, evs...)
		return j
	}
	check(commands.SubmitRequest{Type: "permanent"}, domain.StateFailed, 1, 0, runtime.CodeError,
		domain.EvSubmitted, domain.EvStarted, domain.EvFailed)
	check(commands.SubmitRequest{Type: "coded", NoRetryOn: []string{"VALIDATION"}}, domain.StateFailed, 1, 0, "VALIDATION",
		domain.EvSubmitted, domain.EvStarted, domain.EvFailed)
	j := check(commands.SubmitRequest{Type: "panics", MaxRetries: ptr(1), Backoff: dur(0)}, domain.StateFailed, 2, 1, runtime.CodePanic,
		domain.EvSubmitted, domain.EvStarted, domain.EvRetryScheduled, domain.EvStarted, domain.EvFailed)
	if !strings.Contains(j.Error.Stack, "behaviour_test.go") || !strings.Contains(j.Error.Message, "kaboom") {
		t.Fatalf("panic error without its stack: %+v", j.Error)
	}
	start := time.Now()
	check(commands.SubmitRequest{Type: "slow", Timeout: dur(300 * time.Millisecond), MaxRetries: ptr(0)}, domain.StateFailed, 1, 0, runtime.CodeTimeout,
		domain.EvSubmitted, domain.EvStarted, domain.EvFailed)
	if time.Since(start) > 5*time.Second {
		t.Fatalf("timeout took %s", time.Since(start))
	}
	j = check(commands.SubmitRequest{Type: "later", MaxRetries: ptr(0)}, domain.StateSucceeded, 2, 0, "",
		domain.EvSubmitted, domain.EvStarted, domain.EvRetryLater, domain.EvStarted, domain.EvSucceeded)
	evs := h.events(j.ID)
	if evs[2].Message != "GPU busy" {
		t.Fatalf("retry_later event %+v", evs[2])
	}
	check(commands.SubmitRequest{Type: "badresult"}, domain.StateFailed, 1, 0, runtime.CodeError,
		domain.EvSubmitted, domain.EvStarted, domain.EvFailed)
	h.verify()
}

type codeErr string

func (c codeErr) Error() string { return "coded: " + string(c) }
func (c codeErr) Code() string  { return string(c) }

func TestCancel(t *testing.T) {
	h := newHarness(t)
	running := make(chan string, 1)
	cause := make(chan error, 1)
	var ran counter
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Handlers: map[string]engine.Handler{
		"long": func(ctx context.Context, task *engine.Task) ([]byte, error) {
			ran.add(task.Job.ID)
			running <- task.Job.ID
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return []byte(`"finished anyway"`), nil // discarded: cancelled stands
		}}})

	t.Run("queued", func(t *testing.T) {
		sub := h.submit(commands.SubmitRequest{Type: "no.worker"})
		snap, err := h.st.Cancel(h.ctx, sub.Job.ID, "not needed")
		if err != nil || snap.Job.State != domain.StateCancelled {
			t.Fatalf("cancel: %v %+v", err, snap.Job)
		}
		h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvCancelled)
	})
	t.Run("scheduled", func(t *testing.T) {
		sub := h.submit(commands.SubmitRequest{Type: "long", Delay: dur(time.Second)})
		if _, err := h.st.Cancel(h.ctx, sub.Job.ID, ""); err != nil {
			t.Fatal(err)
		}
		// The schedule still fires; the promoter finds the job cancelled and
		// drops the due item.
		qs, err := h.st.JS.Stream(h.ctx, streams.QueueStream("default"))
		if err != nil {
			t.Fatal(err)
		}
		testkit.WaitFor(t, 10*time.Second, func() error {
			if _, err := qs.GetLastMsgForSubject(h.ctx, streams.SchedSubject("default", sub.Job.ID)); !errors.Is(err, jetstream.ErrMsgNotFound) {
				return testkit.Errorf("schedule not fired yet (%v)", err)
			}
			c, err := h.st.JS.Consumer(h.ctx, streams.QueueStream("default"), maintenance.PromoterConsumer)
			if err != nil {
				return err
			}
			info, err := c.Info(h.ctx)
			if err != nil {
				return err
			}
			if info.Delivered.Consumer == 0 || info.NumAckPending != 0 || info.NumPending != 0 {
				return testkit.Errorf("promoter: delivered %d, held %d, waiting %d", info.Delivered.Consumer, info.NumAckPending, info.NumPending)
			}
			return nil
		})
		if ran.get(sub.Job.ID) != 0 {
			t.Fatal("a cancelled scheduled job ran")
		}
		h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvCancelled)
	})
	t.Run("running", func(t *testing.T) {
		sub := h.submit(commands.SubmitRequest{Type: "long"})
		id := <-running
		if id != sub.Job.ID {
			t.Fatalf("running %s", id)
		}
		h.waitState(id, domain.StateRunning, 5*time.Second)
		t0 := time.Now()
		if _, err := h.st.Cancel(h.ctx, id, "user"); err != nil {
			t.Fatal(err)
		}
		select {
		case c := <-cause:
			if !errors.Is(c, engine.ErrJobCancelled) {
				t.Fatalf("handler context cause %v", c)
			}
			if d := time.Since(t0); d > time.Second {
				t.Fatalf("handler saw the cancel after %s", d)
			}
		case <-time.After(time.Second):
			t.Fatal("handler context not cancelled within 1s")
		}
		// Its result is discarded: the work item is settled and nothing
		// more is written.
		testkit.WaitFor(t, 5*time.Second, func() error {
			c, err := h.st.JS.Consumer(h.ctx, streams.QueueStream("default"), engine.ConsumerName("long"))
			if err != nil {
				return err
			}
			info, err := c.Info(h.ctx)
			if err != nil {
				return err
			}
			if info.NumAckPending != 0 || info.NumPending != 0 {
				return testkit.Errorf("work items of long: %d held, %d waiting", info.NumAckPending, info.NumPending)
			}
			return nil
		})
		j := h.get(id)
		if j.State != domain.StateCancelled || j.Result != nil {
			t.Fatalf("job %+v", j)
		}
		h.wantEvents(id, domain.EvSubmitted, domain.EvStarted, domain.EvCancelled)
	})
	t.Run("terminal", func(t *testing.T) {
		sub := h.submit(commands.SubmitRequest{Type: "no.worker"})
		if _, err := h.st.Cancel(h.ctx, sub.Job.ID, ""); err != nil {
			t.Fatal(err)
		}
		before := h.lastSeq()
		snap, err := h.st.Cancel(h.ctx, sub.Job.ID, "again")
		if !errors.Is(err, commands.ErrTerminal) || snap.Job.State != domain.StateCancelled {
			t.Fatalf("second cancel: %v", err)
		}
		if after := h.lastSeq(); after != before {
			t.Fatalf("cancel of a terminal job wrote %d events", after-before)
		}
	})
	h.verify()
}

func TestRefusedTransitionWritesNothing(t *testing.T) {
	h := newHarness(t)
	sub := h.submit(commands.SubmitRequest{Type: "no.worker"})
	before := h.lastSeq()
	for name, d := range map[string]store.Decider{
		"succeed queued": func(j *domain.Job) (*domain.Event, error) { return commands.Succeed(j, nil, "x", time.Now()) },
		"due queued":     func(j *domain.Job) (*domain.Event, error) { return commands.Due(j, false, "x", time.Now()) },
		"requeue queued": func(j *domain.Job) (*domain.Event, error) { return commands.Requeue(j, "", "x", time.Now()) },
	} {
		_, _, err := h.st.Apply(h.ctx, "test", sub, d)
		if !errors.Is(err, commands.ErrInvalidTransition) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if after := h.lastSeq(); after != before {
		t.Fatalf("refused transitions wrote %d events", after-before)
	}
	if _, err := h.st.Record(h.ctx, "NOTANID"); !errors.Is(err, commands.ErrInvalidInput) {
		t.Fatalf("get bad id: %v", err)
	}
	if _, err := h.st.Current(h.ctx, domain.NewID()); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("load unknown id: %v", err)
	}
	if _, err := h.st.Cancel(h.ctx, domain.NewID(), ""); !errors.Is(err, commands.ErrNotFound) {
		t.Fatalf("cancel unknown id: %v", err)
	}
}

// A zombie: worker A's lease went to B; A's late outcome is refused.
func TestZombieWritesRefused(t *testing.T) {
	h := newHarness(t)
	sub := h.submit(commands.SubmitRequest{Type: "no.worker"})
	now := time.Now
	a, _, err := h.st.Apply(h.ctx, "claim", sub, func(j *domain.Job) (*domain.Event, error) {
		return commands.Start(j, "A", 1, now())
	})
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := h.st.Apply(h.ctx, "lease", a, func(j *domain.Job) (*domain.Event, error) { return commands.LeaseLost(j, "B", now()) })
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err = h.st.Apply(h.ctx, "claim", b, func(j *domain.Job) (*domain.Event, error) { return commands.Start(j, "B", 1, now()) }); err != nil {
		t.Fatal(err)
	}
	// A reports success on the snapshot it holds.
	_, _, err = h.st.Apply(h.ctx, "complete", a, func(j *domain.Job) (*domain.Event, error) {
		if err := commands.CheckClaimant(j, "A", 1, a.Job.Attempt); err != nil {
			return nil, err
		}
		return commands.Succeed(j, nil, "A", now())
	})
	if !errors.Is(err, commands.ErrNotClaimant) {
		t.Fatalf("zombie write: %v", err)
	}
	j := h.get(sub.Job.ID)
	if j.State != domain.StateRunning || j.Worker != "B" || j.Attempt != 2 || j.LeaseRequeues != 1 {
		t.Fatalf("job %+v", j)
	}
	h.verify()
}

// A worker that dies (its connection gone, no renewals) loses its lease;
// the server redelivers the item and another worker requeues and runs it.
func TestLeaseExpiryRequeues(t *testing.T) {
	h := newHarness(t)
	held := make(chan struct{}, 1)
	deadSt := testkit.Store(t, testkit.Conn(t, h.srv), "dead")
	dead, err := engine.NewRuntime(deadSt, engine.RuntimeConfig{WorkerID: "dead", Lease: time.Second, Log: testkit.Logger(t),
		Handlers: map[string]engine.Handler{"work": func(ctx context.Context, _ *engine.Task) ([]byte, error) {
			held <- struct{}{}
			<-ctx.Done()
			return nil, ctx.Err()
		}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.Start(h.ctx); err != nil {
		t.Fatal(err)
	}
	sub := h.submit(commands.SubmitRequest{Type: "work"})
	<-held
	h.waitState(sub.Job.ID, domain.StateRunning, 5*time.Second)
	deadSt.NC.Close() // the process is gone: no renewals, no writes
	defer dead.Stop(context.Background())

	var ran atomic.Int32
	h.runtime(engine.RuntimeConfig{WorkerID: "alive", Lease: time.Second, Handlers: map[string]engine.Handler{
		"work": func(context.Context, *engine.Task) ([]byte, error) { ran.Add(1); return []byte(`"ok"`), nil }}})
	j := h.waitState(sub.Job.ID, domain.StateSucceeded, 15*time.Second)
	if ran.Load() != 1 || j.Worker != "alive" || j.LeaseRequeues != 1 || j.Attempt != 2 {
		t.Fatalf("job %+v, ran %d", j, ran.Load())
	}
	h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvLeaseExpiredRequeue, domain.EvStarted, domain.EvSucceeded)
	h.verify()
}

func TestMaxLeaseRequeuesFails(t *testing.T) {
	h := newHarness(t)
	sub := h.submit(commands.SubmitRequest{Type: "no.worker", MaxLeaseRequeues: ptr(1)})
	cur := sub
	var err error
	for i := 0; i < 2; i++ {
		if cur, _, err = h.st.Apply(h.ctx, "claim", cur, func(j *domain.Job) (*domain.Event, error) {
			return commands.Start(j, "w", 1, time.Now())
		}); err != nil {
			t.Fatal(err)
		}
		if cur, _, err = h.st.Apply(h.ctx, "lease", cur, func(j *domain.Job) (*domain.Event, error) {
			return commands.LeaseLost(j, "w2", time.Now())
		}); err != nil {
			t.Fatal(err)
		}
	}
	if cur.Job.State != domain.StateFailed || cur.Job.Error.Code != "LEASE_EXPIRED" || cur.Job.LeaseRequeues != 1 {
		t.Fatalf("job %+v", cur.Job)
	}
	h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvLeaseExpiredRequeue, domain.EvStarted, domain.EvLeaseExpired)
}

func TestGracefulShutdownRequeues(t *testing.T) {
	for _, obedient := range []bool{true, false} {
		name := "handler honours its context"
		if !obedient {
			name = "handler ignores its context"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(t)
			held := make(chan struct{}, 1)
			stuck := make(chan struct{})
			defer close(stuck)
			first, err := engine.NewRuntime(testkit.Store(t, testkit.Conn(t, h.srv), "first"), engine.RuntimeConfig{
				WorkerID: "first", ShutdownGrace: 100 * time.Millisecond, Log: testkit.Logger(t),
				Handlers: map[string]engine.Handler{"work": func(ctx context.Context, _ *engine.Task) ([]byte, error) {
					held <- struct{}{}
					if obedient {
						<-ctx.Done()
						return nil, context.Cause(ctx)
					}
					<-stuck
					return []byte(`"too late"`), nil
				}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := first.Start(h.ctx); err != nil {
				t.Fatal(err)
			}
			sub := h.submit(commands.SubmitRequest{Type: "work"})
			<-held
			h.waitState(sub.Job.ID, domain.StateRunning, 5*time.Second)
			t0 := time.Now()
			first.Stop(context.Background())
			// It takes a few seconds by design (grace, then the wait for
			// cancelled handlers); what it must not take is the 30 s lease.
			if d := time.Since(t0); d > 15*time.Second {
				t.Fatalf("stop took %s", d)
			}
			j := h.get(sub.Job.ID)
			if j.State != domain.StateQueued {
				t.Fatalf("after stop the job is %s", j.State)
			}
			h.runtime(engine.RuntimeConfig{WorkerID: "second", Handlers: map[string]engine.Handler{
				"work": func(context.Context, *engine.Task) ([]byte, error) { return []byte(`"second"`), nil }}})
			j = h.waitState(sub.Job.ID, domain.StateSucceeded, 10*time.Second)
			if j.Worker != "second" || string(j.Result) != `"second"` || j.Retries != 0 {
				t.Fatalf("job %+v", j)
			}
			h.wantEvents(sub.Job.ID, domain.EvSubmitted, domain.EvStarted, domain.EvRequeued, domain.EvStarted, domain.EvSucceeded)
			h.verify()
		})
	}
}

func TestUnknownTypeStaysQueued(t *testing.T) {
	h := newHarness(t)
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Handlers: map[string]engine.Handler{
		"known": func(context.Context, *engine.Task) ([]byte, error) { return nil, nil }}})
	unknown := h.submit(commands.SubmitRequest{Type: "unknown.type"})
	known := h.submit(commands.SubmitRequest{Type: "known"})
	h.waitState(known.Job.ID, domain.StateSucceeded, 10*time.Second)
	// The projector has seen both submits (its lag is 100ms) and the known
	// job went through; the unknown one is still visible and queued.
	testkit.WaitFor(t, 10*time.Second, func() error {
		if _, last := h.eng.Projector.Stats(); last < known.Job.Seq {
			return testkit.Errorf("projector at %d", last)
		}
		return nil
	})
	if j := h.get(unknown.Job.ID); j.State != domain.StateQueued || j.Attempt != 0 {
		t.Fatalf("unknown type: %+v", j)
	}
}

func TestIdempotencyKey(t *testing.T) {
	h := newHarness(t)
	first, err := h.st.Submit(h.ctx, &commands.SubmitRequest{Type: "no.worker", IdempotencyKey: "order-42"})
	if err != nil || !first.Created {
		t.Fatalf("first: %v %v", err, first.Created)
	}
	for _, req := range []commands.SubmitRequest{
		{Type: "no.worker", IdempotencyKey: "order-42"},
		{Type: "other.type", Queue: "elsewhere", IdempotencyKey: "order-42"}, // same key, other subject
	} {
		again, err := h.st.Submit(h.ctx, &req)
		if err != nil || again.Created || again.Job.ID != first.Job.ID || again.Job.Spec.Type != "no.worker" {
			t.Fatalf("again: %v created=%v %+v", err, again.Created, again.Job)
		}
	}
	other, err := h.st.Submit(h.ctx, &commands.SubmitRequest{Type: "no.worker", IdempotencyKey: "order-42", Namespace: "tenant2"})
	if err != nil || !other.Created || other.Job.ID == first.Job.ID {
		t.Fatalf("other namespace: %v %+v", err, other)
	}
	h.wantEvents(first.Job.ID, domain.EvSubmitted)
}

// A writer that crashed right after its append leaves the job only in the
// log: the projector builds its record and dispatches it.
func TestProjectorRepairsWhatACrashLeft(t *testing.T) {
	h := newHarness(t)
	var ran atomic.Int32
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Handlers: map[string]engine.Handler{
		"orphan": func(context.Context, *engine.Task) ([]byte, error) { ran.Add(1); return []byte(`7`), nil }}})
	now := time.Now().UTC()
	spec, _ := (&commands.SubmitRequest{Type: "orphan"}).Spec(now)
	id := domain.NewID()
	ev, _ := commands.Submit(id, spec, false, now)
	if _, err := (streams.Writer{JS: h.st.JS}).AppendAsync(streams.EventSubject(spec.Namespace, spec.Queue, spec.Type, id), ev, 0).Wait(h.ctx); err != nil {
		t.Fatal(err)
	}
	j := h.waitState(id, domain.StateSucceeded, 15*time.Second)
	if ran.Load() != 1 || string(j.Result) != "7" {
		t.Fatalf("ran %d, job %+v", ran.Load(), j)
	}
	if h.eng.Store.Repairs.Load() < 1 {
		t.Fatal("projector did not count the repair")
	}
	h.verify()
}

func TestVerifyFindsTamperedRecord(t *testing.T) {
	h := newHarness(t)
	sub := h.submit(commands.SubmitRequest{Type: "no.worker"})
	h.verify()
	tampered := *sub.Job
	tampered.State = domain.StateSucceeded
	b, _ := streams.EncodeJob(&tampered)
	if _, err := h.st.KV.Put(h.ctx, sub.Job.ID, b); err != nil {
		t.Fatal(err)
	}
	rep, err := projectionsVerify(h)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Diffs) != 1 || rep.Diffs[0].ID != sub.Job.ID || strings.Join(rep.Diffs[0].Fields, ",") != "state" {
		t.Fatalf("diffs %+v", rep.Diffs)
	}
}

func TestWaitAndFollowArePushed(t *testing.T) {
	h := newHarness(t)
	release := make(chan struct{})
	h.runtime(engine.RuntimeConfig{WorkerID: "w", Handlers: map[string]engine.Handler{
		"gate": func(context.Context, *engine.Task) ([]byte, error) { <-release; return nil, nil }}})
	sub := h.submit(commands.SubmitRequest{Type: "gate"})
	got := make(chan []string, 1)
	go func() {
		var seen []string
		_ = h.st.History(h.ctx, sub.Job.ID, 0, true, func(e *domain.Event) error { seen = append(seen, e.Type); return nil })
		got <- seen
	}()
	h.waitState(sub.Job.ID, domain.StateRunning, 5*time.Second)
	close(release)
	select {
	case seen := <-got:
		if strings.Join(seen, " ") != "job.submitted job.started job.succeeded" {
			t.Fatalf("followed %v", seen)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not end at the terminal event")
	}
}

func TestServerRestartKeepsScheduledJobs(t *testing.T) {
	dir := t.TempDir()
	ctx := testkit.Ctx(t)
	start := func() (*engine.Store, func()) {
		srv, err := engine.StartServer(engine.ServerConfig{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		nc, err := engine.ConnectInProcess(srv, "restart")
		if err != nil {
			t.Fatal(err)
		}
		st, err := engine.OpenStore(ctx, nc, streams.Topology{}, "restart")
		if err != nil {
			t.Fatal(err)
		}
		st.SetLogger(testkit.Logger(t))
		return st, func() { nc.Close(); srv.Shutdown(); srv.WaitForShutdown() }
	}
	st, stop := start()
	res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "later", Delay: dur(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	stop() // every process gone while the job waits

	st, stop = start()
	defer stop()
	eng := engine.NewEngine(st, engine.EngineConfig{Log: testkit.Logger(t), ProjectorLag: 100 * time.Millisecond})
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer eng.Stop(context.Background())
	rt, err := engine.NewRuntime(st, engine.RuntimeConfig{WorkerID: "w", Log: testkit.Logger(t),
		Handlers: map[string]engine.Handler{"later": func(context.Context, *engine.Task) ([]byte, error) { return []byte(`1`), nil }}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer rt.Stop(context.Background())
	testkit.WaitFor(t, 15*time.Second, func() error {
		snap, err := st.Record(ctx, res.Job.ID)
		if err != nil {
			return err
		}
		if snap.Job.State != domain.StateSucceeded {
			return testkit.Errorf("job is %s", snap.Job.State)
		}
		return nil
	})
}

func TestCommandProtocol(t *testing.T) {
	h := newHarness(t)
	nc := testkit.Conn(t, h.srv)
	ask := func(verb string, body []byte, jsonCT bool) map[string]any {
		t.Helper()
		m := nats.NewMsg(streams.CommandPrefix + "." + verb)
		m.Data = body
		if jsonCT {
			m.Header.Set("Content-Type", "application/json")
		}
		resp, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", verb, err)
		}
		out := map[string]any{}
		if jsonCT {
			if err := jsonUnmarshal(resp.Data, &out); err != nil {
				t.Fatalf("%s reply %q: %v", verb, resp.Data, err)
			}
		} else if err := streams.Unmarshal(resp.Data, &out); err != nil {
			t.Fatalf("%s reply: %v", verb, err)
		}
		return out
	}
	problemType := func(r map[string]any) string {
		e, _ := r["error"].(map[string]any)
		s, _ := e["type"].(string)
		return s
	}
	r := ask("submit", []byte(`{"type":"demo.x","payload":{"a":[1,2]},"max_retries":0,"delay":"1h"}`), true)
	job, _ := r["job"].(map[string]any)
	if job == nil || job["state"] != "scheduled" || r["created"] != true {
		t.Fatalf("submit reply %v", r)
	}
	id := job["id"].(string)
	mp, _ := streams.Marshal(map[string]any{"type": "demo.y", "payload": map[string]any{"n": 1}})
	r = ask("submit", mp, false)
	if j, _ := r["job"].(map[string]any); j == nil || j["state"] != "queued" {
		t.Fatalf("msgpack submit reply %v", r)
	} else if p, _ := j["payload"].(map[string]any); p == nil {
		t.Fatalf("msgpack reply payload is not a value: %v", j["payload"])
	}
	if r = ask("get", []byte(`{"id":"`+id+`"}`), true); r["job"].(map[string]any)["id"] != id {
		t.Fatalf("get reply %v", r)
	}
	if r = ask("events", []byte(`{"id":"`+id+`"}`), true); len(r["events"].([]any)) != 1 {
		t.Fatalf("events reply %v", r)
	}
	if r = ask("list", []byte(`{"state":"scheduled"}`), true); len(r["jobs"].([]any)) != 1 {
		t.Fatalf("list reply %v", r)
	}
	if r = ask("cancel", []byte(`{"id":"`+id+`","reason":"test"}`), true); r["job"].(map[string]any)["state"] != "cancelled" {
		t.Fatalf("cancel reply %v", r)
	}
	before := h.lastSeq()
	for _, tc := range []struct {
		verb, body string
		json       bool
		want       string
	}{
		{"submit", `{"type":`, true, problems.MalformedRequest},
		{"submit", `{"type":"x","max_retries":"three"}`, true, problems.MalformedRequest},
		{"submit", `{"type":"x","unknown":1}`, true, problems.MalformedRequest},
		{"submit", `{"type":"bad type"}`, true, engine.ProblemInvalidInput},
		{"submit", "\xdd\xff\xff\xff\xff", false, problems.MalformedRequest},
		{"submit", "", true, problems.MalformedRequest},
		{"get", `{"id":"nope"}`, true, engine.ProblemNotFound},
		{"get", `{"id":"` + domain.NewID() + `"}`, true, engine.ProblemNotFound},
		{"cancel", `{"id":"` + domain.NewID() + `"}`, true, engine.ProblemNotFound},
		{"list", `{"state":"sleeping"}`, true, engine.ProblemInvalidInput},
		{"explode", `{}`, true, problems.UnknownCommand},
	} {
		if got := problemType(ask(tc.verb, []byte(tc.body), tc.json)); got != tc.want {
			t.Errorf("%s %q: problem %q, want %q", tc.verb, tc.body, got, tc.want)
		}
	}
	big := make([]byte, cmdservice.MaxCommandBytes+1)
	if got := problemType(ask("submit", big, true)); got != problems.PayloadTooLarge {
		t.Errorf("oversized command: %q", got)
	}
	if after := h.lastSeq(); after != before {
		t.Fatalf("refused commands wrote %d events", after-before)
	}
}

// TestProjectorSkipsWhatItsProcessDid: the Projector neither reads nor
// publishes again what a writer in this process saw done whole: a job
// whose submit saw its record written and its work item acknowledged (a
// backlog of queued jobs older than its lag used to be dispatched twice,
// the stream dropping the second). An event whose writer published less
// than the job implies (job.reprioritized of a queued job) is decided on as
// ever: the Projector dispatches the job at that event, a second item (the
// claim drops it). A job cancelled while queued is never settled: the
// Projector repeats its cascade (it may have children) before it
// acknowledges it. (What a writer that died left undone is repeated:
// tests/process TestSubmitCrashPoints, a real SIGKILL at submit:projected,
// and TestCascadeCrashPoint.)
func TestProjectorSkipsWhatItsProcessDid(t *testing.T) {
	h := newHarnessLag(t, 2*time.Second) // every submit's dispatch acknowledged before the Projector looks
	ctx, st, eng := h.ctx, h.st, h.eng
	const n = 20
	var first, last engine.Snapshot
	for i := range n {
		res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "no.worker", Queue: "skips"})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = res.Snapshot
		}
		last = res.Snapshot
	}
	moved, err := st.Reprioritize(ctx, last.Job.ID, 5)
	if err != nil {
		t.Fatal(err)
	}
	cancelled, err := st.Cancel(ctx, first.Job.ID, "test")
	if err != nil {
		t.Fatal(err)
	}
	end := max(moved.Job.Seq, cancelled.Job.Seq)
	testkit.WaitFor(t, 20*time.Second, func() error {
		if _, seq := eng.Projector.Stats(); seq < end {
			return testkit.Errorf("projector at %d, want %d", seq, end)
		}
		return nil
	})
	if got, skipped := eng.Projector.Settled(), eng.Projector.Skipped(); got != n-2 || skipped != 0 {
		t.Fatalf("%d jobs settled, %d dispatches skipped; want %d and 0", got, skipped, n-2)
	}
	info, err := st.JS.Stream(ctx, streams.QueueStream("skips"))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.CachedInfo().State.Msgs; got != n+1 {
		t.Fatalf("%d work items, want %d", got, n+1)
	}
}

// TestProjectorPassesOverForeignEvents: what another program publishes on
// a job's event subject is left out of the Projector's verification, in
// both forms: bytes that are not an event at all, and an event whose head
// (job, type) reads but whose whole does not (a field of the wrong type).
// The Projector reads the head first, to pass over jobs a writer in its
// process saw settled, and decodes whole the events of every other job: it
// goes past both, and the job's record stays at its last real event.
func TestProjectorPassesOverForeignEvents(t *testing.T) {
	h := newHarnessLag(t, 2*time.Second)
	ctx, st, eng := h.ctx, h.st, h.eng
	res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "no.worker", Queue: "foreign"})
	if err != nil {
		t.Fatal(err)
	}
	j := res.Snapshot.Job
	half, err := streams.Marshal(map[string]any{"v": 1, "type": domain.EvCancelled, "job": j.ID,
		"time": time.Now().UTC(), "to": "cancelled", "attempt": "not a number"})
	if err != nil {
		t.Fatal(err)
	}
	var head domain.Event
	if err := streams.DecodeEventHead(half, &head); err != nil || head.JobID != j.ID {
		t.Fatalf("the half-foreign event's head: %+v, %v; want it read", head, err)
	}
	if _, err := streams.DecodeEvent(half); err == nil {
		t.Fatal("the half-foreign event decodes whole; want a field of the wrong type")
	}
	var end uint64
	for _, data := range [][]byte{[]byte("not an event"), half} {
		ack, err := st.JS.Publish(ctx, streams.JobSubject(j), data)
		if err != nil {
			t.Fatal(err)
		}
		end = ack.Sequence
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		if _, seq := eng.Projector.Stats(); seq < end {
			return testkit.Errorf("projector at %d, want %d", seq, end)
		}
		return nil
	})
	rec, err := st.Record(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Job.Seq != j.Seq || rec.Job.State != domain.StateQueued {
		t.Fatalf("record at seq %d, %s; want %d, queued (the foreign events left out)", rec.Job.Seq, rec.Job.State, j.Seq)
	}
}

// TestHistoryEndsWhereTheLogEnds: a job's history so far is what the log
// has, even when the log ends before the job's record (its events aged out
// or were lost in a crash without sync always): the read returns at once
// instead of waiting for events that will never come.
func TestHistoryEndsWhereTheLogEnds(t *testing.T) {
	h := newHarness(t)
	ctx, st := h.ctx, h.st
	res, err := st.Submit(ctx, &commands.SubmitRequest{Type: "no.worker", Queue: "lost"})
	if err != nil {
		t.Fatal(err)
	}
	j := res.Snapshot.Job
	events, err := st.JS.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Purge(ctx, jetstream.WithPurgeSubject(streams.JobSubject(j))); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	n := 0
	go func() {
		done <- st.History(context.Background(), j.ID, 0, false, func(*domain.Event) error { n++; return nil })
	}()
	select {
	case err := <-done:
		if err != nil || n != 0 {
			t.Fatalf("history: %d events, err %v; want 0 and nil (the log has none)", n, err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the history of a job whose events the log no longer has still waits after 20 s")
	}
}
