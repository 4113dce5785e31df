package commands_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// allowedMoves is the brief's lifecycle table, written out independently of
// commands.Lifecycle, so that a change to the table shows up here.
var allowedMoves = map[domain.State][]domain.State{
	domain.StateNew:     {domain.StatePending, domain.StateScheduled, domain.StateQueued},
	domain.StatePending: {domain.StateQueued, domain.StateScheduled, domain.StateFailed, domain.StateCancelled, domain.StateWaiting},
	// waiting from pending: jetflow's addition for workflows (a workflow
	// waits in pending while its steps are created, then for them;
	// docs/workflows.md).
	// pending: jetflow's addition to the brief's table (a due job of a
	// queue with limits waits for a slot; docs/quotas.md).
	domain.StateScheduled: {domain.StateQueued, domain.StateCancelled, domain.StatePending},
	domain.StateQueued:    {domain.StateClaimed, domain.StateRunning, domain.StateCancelled, domain.StateFailed},
	domain.StateClaimed:   {domain.StateRunning, domain.StateQueued, domain.StateFailed, domain.StateCancelled},
	domain.StateRunning: {domain.StateSucceeded, domain.StateFailed, domain.StateCancelled, domain.StateScheduled,
		domain.StateQueued, domain.StateWaiting},
	domain.StateWaiting:   {domain.StateSucceeded, domain.StateFailed, domain.StateCancelled},
	domain.StateSucceeded: nil,
	domain.StateFailed:    nil,
	domain.StateCancelled: nil,
}

func TestLifecycleEveryPair(t *testing.T) {
	froms := append([]domain.State{domain.StateNew}, domain.States...)
	for _, from := range froms {
		for _, to := range domain.States {
			want := false
			for _, s := range allowedMoves[from] {
				want = want || s == to
			}
			name := string(from)
			if name == "" {
				name = "new"
			}
			t.Run(name+"->"+string(to), func(t *testing.T) {
				if got := commands.Allowed(from, to); got != want {
					t.Fatalf("Allowed(%q, %q) = %v, want %v", from, to, got, want)
				}
				// Every event type either may make the move or is refused
				// with a TransitionError naming it.
				ok := false
				for _, ev := range eventTypes {
					if _, note := commands.Annotations[ev]; note && from == to {
						continue // an annotation: TestAnnotationsOnlyWhileHeld
					}
					err := commands.Check("J", from, to, ev)
					if err == nil {
						ok = true
						continue
					}
					var te *commands.TransitionError
					if !errors.As(err, &te) || !errors.Is(err, commands.ErrInvalidTransition) {
						t.Fatalf("Check(%q,%q,%s) = %v: want a *TransitionError", from, to, ev, err)
					}
					if te.From != from || te.Event != ev {
						t.Fatalf("TransitionError %+v does not name the move", te)
					}
					if from.Terminal() != errors.Is(err, commands.ErrTerminal) {
						t.Fatalf("Check(%q,...): ErrTerminal match = %v", from, errors.Is(err, commands.ErrTerminal))
					}
				}
				if ok != want {
					t.Fatalf("some event allows %q->%q: %v, want %v", from, to, ok, want)
				}
			})
		}
	}
}

var eventTypes = []string{domain.EvSubmitted, domain.EvDue, domain.EvClaimed, domain.EvStarted, domain.EvSucceeded,
	domain.EvFailed, domain.EvCancelled, domain.EvRetryScheduled, domain.EvRetryLater, domain.EvRequeued,
	domain.EvLeaseExpiredRequeue, domain.EvLeaseExpired, domain.EvWaiting, domain.EvPending, domain.EvAdmitted}

func TestTerminalStatesHaveNoExit(t *testing.T) {
	for _, tr := range commands.Lifecycle {
		if tr.From.Terminal() {
			t.Errorf("table has a move out of terminal state %s: %+v", tr.From, tr)
		}
		if !tr.To.Valid() {
			t.Errorf("table moves to unknown state %q", tr.To)
		}
	}
}

func TestAnnotationsOnlyWhileHeld(t *testing.T) {
	for _, from := range domain.States {
		err := commands.Check("J", from, "", domain.EvProgress)
		want := from == domain.StateClaimed || from == domain.StateRunning || from == domain.StateWaiting
		if (err == nil) != want {
			t.Errorf("progress in %s: err %v, allowed %v", from, err, want)
		}
	}
}

func job(state domain.State) *domain.Job {
	return &domain.Job{ID: "J", State: state, Seq: 7, Attempt: 1, Spec: domain.Spec{
		MaxRetries: 3, Backoff: 30 * time.Second, BackoffCap: time.Hour, MaxLeaseRequeues: 3}}
}

func TestDecisionsRefuseWithoutWriting(t *testing.T) {
	now := time.Now()
	for _, s := range domain.States {
		j := job(s)
		cases := map[string]func() (*domain.Event, error){
			"start":   func() (*domain.Event, error) { return commands.Start(j, "w", 1, now) },
			"claim":   func() (*domain.Event, error) { return commands.Claim(j, "w", 1, now) },
			"succeed": func() (*domain.Event, error) { return commands.Succeed(j, nil, "w", now) },
			"requeue": func() (*domain.Event, error) { return commands.Requeue(j, "", "w", now) },
			"due":     func() (*domain.Event, error) { return commands.Due(j, false, "w", now) },
			"lease":   func() (*domain.Event, error) { return commands.LeaseLost(j, "w", now) },
			"later":   func() (*domain.Event, error) { return commands.RetryLater(j, time.Second, "", "w", now) },
			"cancel":  func() (*domain.Event, error) { return commands.Cancel(j, "", "w", now) },
		}
		for name, f := range cases {
			ev, err := f()
			if err != nil {
				if ev != nil {
					t.Errorf("%s from %s: refused but returned an event", name, s)
				}
				if !errors.Is(err, commands.ErrInvalidTransition) {
					t.Errorf("%s from %s: %v is not ErrInvalidTransition", name, s, err)
				}
				continue
			}
			if ev.From != s || !commands.Allowed(s, ev.To) {
				t.Errorf("%s from %s: event %s %s->%s is not in the table", name, s, ev.Type, ev.From, ev.To)
			}
		}
	}
}

func TestCancelTerminalIsErrTerminal(t *testing.T) {
	for _, s := range []domain.State{domain.StateSucceeded, domain.StateFailed, domain.StateCancelled} {
		_, err := commands.Cancel(job(s), "", "me", time.Now())
		if !errors.Is(err, commands.ErrTerminal) {
			t.Fatalf("cancel %s: %v", s, err)
		}
	}
}

func TestFailDecidesRetry(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		retries   int
		max       int
		retryable bool
		code      string
		retryOn   []string
		noRetryOn []string
		backoff   time.Duration
		want      string
		to        domain.State
	}{
		{"first failure retries after backoff", 0, 3, true, "", nil, nil, 30 * time.Second, domain.EvRetryScheduled, domain.StateScheduled},
		{"zero backoff requeues at once", 0, 3, true, "", nil, nil, 0, domain.EvRetryScheduled, domain.StateQueued},
		{"last retry used", 3, 3, true, "", nil, nil, time.Second, domain.EvFailed, domain.StateFailed},
		{"max_retries 0", 0, 0, true, "", nil, nil, time.Second, domain.EvFailed, domain.StateFailed},
		{"permanent", 0, 3, false, "", nil, nil, time.Second, domain.EvFailed, domain.StateFailed},
		{"no_retry_on matches", 0, 3, true, "BAD", nil, []string{"BAD"}, time.Second, domain.EvFailed, domain.StateFailed},
		{"retry_on misses", 0, 3, true, "OTHER", []string{"NET"}, nil, time.Second, domain.EvFailed, domain.StateFailed},
		{"retry_on matches", 0, 3, true, "NET", []string{"NET"}, nil, time.Second, domain.EvRetryScheduled, domain.StateScheduled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := job(domain.StateRunning)
			j.Retries, j.Spec.MaxRetries, j.Spec.Backoff = tc.retries, tc.max, tc.backoff
			j.Spec.RetryOn, j.Spec.NoRetryOn, j.Spec.Jitter = tc.retryOn, tc.noRetryOn, 0
			ev, err := commands.Fail(j, domain.JobError{Code: tc.code, Message: "boom"}, tc.retryable, "w", now, 0.5)
			if err != nil {
				t.Fatal(err)
			}
			if ev.Type != tc.want || ev.To != tc.to {
				t.Fatalf("got %s -> %s, want %s -> %s", ev.Type, ev.To, tc.want, tc.to)
			}
			if ev.Error == nil || ev.Error.Message != "boom" {
				t.Fatalf("event error %+v", ev.Error)
			}
			if tc.to == domain.StateScheduled && !ev.RunAt.Equal(now.Add(tc.backoff)) {
				t.Fatalf("run_at %s, want %s", ev.RunAt, now.Add(tc.backoff))
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	s := &domain.Spec{Backoff: 30 * time.Second, BackoffCap: time.Hour}
	for n, want := range map[int]time.Duration{1: 30 * time.Second, 2: time.Minute, 3: 2 * time.Minute,
		7: 32 * time.Minute, 8: time.Hour, 30: time.Hour} {
		if got := commands.RetryDelay(s, n, 0.9); got != want {
			t.Errorf("retry %d: %s, want %s", n, got, want)
		}
	}
	s.Jitter = 0.1
	lo, hi := commands.RetryDelay(s, 1, 0), commands.RetryDelay(s, 1, 0.999999)
	if lo != 27*time.Second || hi < 32*time.Second || hi > 33*time.Second {
		t.Errorf("jitter bounds %s..%s, want 27s..33s", lo, hi)
	}
	if d := commands.RetryDelay(&domain.Spec{}, 3, 0.5); d != 0 {
		t.Errorf("zero base: %s", d)
	}
}

func TestLeaseLostCountsRequeues(t *testing.T) {
	for n := 0; n <= 4; n++ {
		j := job(domain.StateRunning)
		j.LeaseRequeues = n
		ev, err := commands.LeaseLost(j, "w", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		want := domain.EvLeaseExpiredRequeue
		if n >= 3 {
			want = domain.EvLeaseExpired
		}
		if ev.Type != want {
			t.Errorf("after %d requeues: %s, want %s", n, ev.Type, want)
		}
	}
}

// A lease is written off only for the attempt whose holder's heartbeat
// was read: when the job's work item was redelivered and another worker
// holds the job's next attempt under the same item, the old holder's beat
// says nothing of the new one's lease.
func TestWriteOffLeaseJudgesTheHolderItWasReadFor(t *testing.T) {
	now := time.Now()
	judged := job(domain.StateRunning)
	judged.Worker, judged.LeaseItem, judged.Attempt = "A", 9, 1
	judged.UpdatedAt = now.Add(-time.Minute)
	gone := commands.Beat{} // A has no record: it is gone
	for _, c := range []struct {
		name   string
		change func(j *domain.Job)
		ok     bool
	}{
		{"as judged", func(*domain.Job) {}, true},
		{"another holder, same item", func(j *domain.Job) { j.Worker, j.Attempt = "B", 2 }, false},
		{"the next attempt of the same holder", func(j *domain.Job) { j.Attempt = 2 }, false},
		{"another item", func(j *domain.Job) { j.LeaseItem = 10 }, false},
	} {
		j := *judged
		c.change(&j)
		ev, err := commands.WriteOffLease(&j, judged, gone, 4*time.Second, "engine", now)
		if c.ok != (err == nil) {
			t.Errorf("%s: %v, %v", c.name, ev, err)
		}
		if !c.ok && !errors.Is(err, commands.ErrInvalidTransition) {
			t.Errorf("%s: %v, want ErrInvalidTransition", c.name, err)
		}
	}
}

func TestCheckClaimant(t *testing.T) {
	j := job(domain.StateRunning)
	j.Worker, j.LeaseItem, j.Attempt = "A", 9, 2
	if err := commands.CheckClaimant(j, "A", 9, 2); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		w     string
		lease uint64
		att   int
	}{{"B", 9, 2}, {"A", 8, 2}, {"A", 9, 1}} {
		if err := commands.CheckClaimant(j, c.w, c.lease, c.att); !errors.Is(err, commands.ErrNotClaimant) {
			t.Errorf("case %d: %v", i, err)
		}
	}
	j.State = domain.StateSucceeded
	if err := commands.CheckClaimant(j, "A", 9, 2); !errors.Is(err, commands.ErrNotClaimant) {
		t.Errorf("terminal: %v", err)
	}
}

func ExampleCheck() {
	err := commands.Check("01J", domain.StateSucceeded, domain.StateRunning, domain.EvStarted)
	fmt.Println(err, errors.Is(err, commands.ErrInvalidTransition), errors.Is(err, commands.ErrTerminal))
	// Output: job 01J: job.started: succeeded -> running is not allowed true true
}

// A scheduled job is due from dueSlack before its run_at: a fired schedule
// that comes earlier (one of an earlier delay, brought back by a crash) is
// told when to ask again, and writes nothing.
func TestDueNotBeforeRunAt(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		runAt time.Time
		due   bool
	}{
		{time.Time{}, true},
		{now.Add(-time.Minute), true},
		{now.Add(commands.DueSlack - time.Millisecond), true},
		{now.Add(commands.DueSlack + time.Millisecond), false},
		{now.Add(30 * time.Second), false},
	} {
		j := job(domain.StateScheduled)
		j.RunAt = c.runAt
		ev, err := commands.Due(j, false, "promoter", now)
		var notYet *commands.NotDueError
		switch {
		case c.due && (err != nil || ev == nil || ev.Type != domain.EvDue):
			t.Errorf("run_at %v: %v %v, want due", c.runAt.Sub(now), ev, err)
		case !c.due && (!errors.As(err, &notYet) || ev != nil || !notYet.RunAt.Equal(c.runAt) || notYet.JobID != "J"):
			t.Errorf("run_at %v: %v %v, want not due yet", c.runAt.Sub(now), ev, err)
		}
	}
}
