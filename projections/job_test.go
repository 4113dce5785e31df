package projections_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

// fold runs decisions through Fold, numbering events 1, 2, ...
func fold(t *testing.T, decide ...func(j *domain.Job) (*domain.Event, error)) (*domain.Job, []*domain.Event) {
	t.Helper()
	spec, err := (&commands.SubmitRequest{Type: "t", Payload: commands.RawJSON(`{"x":1}`)}).Spec(t0)
	if err != nil {
		t.Fatal(err)
	}
	spec.Jitter = 0
	ev, err := commands.Submit("J", spec, false, t0)
	if err != nil {
		t.Fatal(err)
	}
	ev.Seq = 1
	j, err := projections.Fold(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	evs := []*domain.Event{ev}
	for i, d := range decide {
		ev, err := d(j)
		if err != nil {
			t.Fatalf("decision %d on %s: %v", i, j.State, err)
		}
		ev.Seq = uint64(i + 2)
		if j, err = projections.Fold(j, ev); err != nil {
			t.Fatal(err)
		}
		evs = append(evs, ev)
	}
	return j, evs
}

func at(d time.Duration) time.Time { return t0.Add(d) }

func TestFoldRetryThenSuccess(t *testing.T) {
	j, _ := fold(t,
		func(j *domain.Job) (*domain.Event, error) { return commands.Start(j, "w1", 11, at(time.Second)) },
		func(j *domain.Job) (*domain.Event, error) {
			return commands.Fail(j, domain.JobError{Code: "E", Message: "boom"}, true, "w1", at(2*time.Second), 0.5)
		},
		func(j *domain.Job) (*domain.Event, error) {
			return commands.Due(j, false, "engine", at(32*time.Second))
		},
		func(j *domain.Job) (*domain.Event, error) { return commands.Start(j, "w2", 12, at(33*time.Second)) },
		func(j *domain.Job) (*domain.Event, error) {
			return commands.Succeed(j, []byte(`"ok"`), "w2", at(34*time.Second))
		},
	)
	want := &domain.Job{ID: "J", Spec: j.Spec, State: domain.StateSucceeded, Attempt: 2, Retries: 1,
		Worker: "w2", Result: []byte(`"ok"`), CreatedAt: t0, RunAt: at(32 * time.Second), QueuedAt: at(32 * time.Second),
		StartedAt: at(33 * time.Second), FinishedAt: at(34 * time.Second), UpdatedAt: at(34 * time.Second), Seq: 6, Events: 6}
	if d := cmp.Diff(want, j); d != "" {
		t.Fatalf("job (-want +got):\n%s", d)
	}
}

func TestFoldLeaseAndCancel(t *testing.T) {
	j, evs := fold(t,
		func(j *domain.Job) (*domain.Event, error) { return commands.Start(j, "w1", 11, at(time.Second)) },
		func(j *domain.Job) (*domain.Event, error) { return commands.LeaseLost(j, "w2", at(40*time.Second)) },
		func(j *domain.Job) (*domain.Event, error) { return commands.Start(j, "w2", 11, at(41*time.Second)) },
		func(j *domain.Job) (*domain.Event, error) {
			return commands.Cancel(j, "operator", "cli", at(42*time.Second))
		},
	)
	if j.State != domain.StateCancelled || j.LeaseRequeues != 1 || j.Attempt != 2 || j.LeaseItem != 0 ||
		!j.FinishedAt.Equal(at(42*time.Second)) || j.Error == nil || j.Error.Code != "CANCELLED" {
		t.Fatalf("job %+v", j)
	}
	if evs[2].Type != domain.EvLeaseExpiredRequeue || evs[4].Type != domain.EvCancelled {
		t.Fatalf("events %s %s", evs[2].Type, evs[4].Type)
	}
}

func TestFoldIsMonotonic(t *testing.T) {
	j, evs := fold(t,
		func(j *domain.Job) (*domain.Event, error) { return commands.Start(j, "w1", 11, at(time.Second)) },
		func(j *domain.Job) (*domain.Event, error) { return commands.Succeed(j, nil, "w1", at(2*time.Second)) },
	)
	for _, old := range evs { // replaying any event already folded changes nothing
		again, err := projections.Fold(j, old)
		if err != nil || again != j {
			t.Fatalf("replay of event %d moved the job: %+v %v", old.Seq, again, err)
		}
	}
}

func TestFoldRefusesNonsense(t *testing.T) {
	if _, err := projections.Fold(nil, &domain.Event{Type: domain.EvStarted, JobID: "J", Seq: 1}); err == nil {
		t.Fatal("a job's first event must be job.submitted")
	}
	j, evs := fold(t)
	other := *evs[0]
	other.JobID, other.Seq = "K", 9
	if _, err := projections.Fold(j, &other); err == nil {
		t.Fatal("folded another job's event")
	}
	again := *evs[0]
	again.Seq = 5
	if _, err := projections.Fold(j, &again); err == nil {
		t.Fatal("second job.submitted accepted")
	}
}

func TestViewPercentAndDuration(t *testing.T) {
	j, _ := fold(t,
		func(j *domain.Job) (*domain.Event, error) { return commands.Start(j, "w1", 11, at(time.Second)) },
		func(j *domain.Job) (*domain.Event, error) {
			return commands.Progress(j, domain.Progress{Current: 1, Total: 4}, "w1", at(2*time.Second))
		},
	)
	v := projections.View(j)
	if v.Progress == nil || v.Progress.Percent == nil || *v.Progress.Percent != 25 || v.DurationSeconds != nil {
		t.Fatalf("view %+v", v)
	}
	if string(v.Result) != "null" || string(v.Payload) != `{"x":1}` || v.Tags == nil {
		t.Fatalf("view %s %s %v", v.Result, v.Payload, v.Tags)
	}
}

// TestViewUserAndHold: the view shows a job's user, and a pending job's
// recorded hold with its message; a job that moved on shows none.
func TestViewUserAndHold(t *testing.T) {
	spec, err := (&commands.SubmitRequest{Type: "t", Queue: "q", User: "ann"}).Spec(t0)
	if err != nil {
		t.Fatal(err)
	}
	ev, err := commands.Submit("J", spec, true, t0)
	if err != nil {
		t.Fatal(err)
	}
	ev.Seq = 1
	j, err := projections.Fold(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	if v := projections.View(j); v.State != domain.StatePending || v.User != "ann" || v.Hold != nil || v.PendingPosition != nil {
		t.Fatalf("a pending job no admitter looked at: %+v", v)
	}
	h := domain.Hold{Limit: domain.LimitUser, Max: 2, Since: at(time.Second)}
	hev, err := commands.HoldPending(j, h, "adm", at(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	hev.Seq = 2
	if j, err = projections.Fold(j, hev); err != nil {
		t.Fatal(err)
	}
	want := &projections.HoldView{Reason: "quota", Limit: domain.LimitUser, Max: 2, Since: at(time.Second),
		Message: commands.HoldMessage("q", "ann", h)}
	if diff := cmp.Diff(want, projections.View(j).Hold); diff != "" {
		t.Fatalf("hold (-want +got):\n%s", diff)
	}
	aev, err := commands.Admit(j, domain.QueueLimits{}, "adm", at(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	aev.Seq = 3
	if j, err = projections.Fold(j, aev); err != nil {
		t.Fatal(err)
	}
	if v := projections.View(j); v.State != domain.StateQueued || v.Hold != nil || v.User != "ann" {
		t.Fatalf("an admitted job: %+v", v)
	}
}
