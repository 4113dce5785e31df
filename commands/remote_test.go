package commands_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

func heldJob(state domain.State, since time.Time) *domain.Job {
	j := &domain.Job{ID: "J", State: state, Worker: "wk", LeaseAck: "$JS.ACK.x", Attempt: 1,
		Spec: domain.Spec{Timeout: 2 * time.Second, MaxRetries: 1, Backoff: time.Second}}
	if state == domain.StateRunning {
		j.StartedAt = since
	} else {
		j.ClaimedAt = since
	}
	j.UpdatedAt = since.Add(time.Hour) // a later progress moves nothing
	return j
}

// A held job's deadline counts from its start (running) or its claim
// (claimed); timeOut ends it only once the grace passed too, with the
// retry policy: a running job with retries left is retried, a claimed one
// fails.
func TestDeadlineAndTimeOut(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, st := range []domain.State{domain.StateRunning, domain.StateClaimed} {
		j := heldJob(st, t0)
		d, ok := commands.Deadline(j)
		if !ok || !d.Equal(t0.Add(2*time.Second)) {
			t.Fatalf("%s: deadline %v %v", st, d, ok)
		}
		grace := commands.DeadlineGrace
		if commands.TimedOut(j, grace, d.Add(grace)) || !commands.TimedOut(j, grace, d.Add(grace+time.Millisecond)) {
			t.Fatalf("%s: timed out at the wrong moment", st)
		}
		if _, err := commands.TimeOut(j, grace, "engine", d.Add(grace), 0.5); !errors.Is(err, commands.ErrInvalidTransition) {
			t.Fatalf("%s: time out before the grace: %v", st, err)
		}
		ev, err := commands.TimeOut(j, grace, "engine", d.Add(grace+time.Second), 0.5)
		if err != nil || ev.Error == nil || ev.Error.Code != commands.CodeTimeout {
			t.Fatalf("%s: time out: %+v %v", st, ev, err)
		}
		want := map[domain.State]string{domain.StateRunning: domain.EvRetryScheduled, domain.StateClaimed: domain.EvFailed}[st]
		if ev.Type != want {
			t.Fatalf("%s: time out wrote %s, want %s", st, ev.Type, want)
		}
	}
	j := heldJob(domain.StateRunning, t0)
	j.Retries = 1
	if ev, _ := commands.TimeOut(j, 0, "engine", t0.Add(time.Minute), 0.5); ev == nil || ev.Type != domain.EvFailed || ev.To != domain.StateFailed {
		t.Fatalf("no retries left: %+v", ev)
	}
	for _, st := range []domain.State{domain.StateQueued, domain.StateWaiting, domain.StateSucceeded} {
		j := heldJob(domain.StateRunning, t0)
		j.State = st
		if _, ok := commands.Deadline(j); ok {
			t.Fatalf("%s has a deadline", st)
		}
		if _, err := commands.TimeOut(j, 0, "engine", t0.Add(time.Hour), 0); !errors.Is(err, commands.ErrInvalidTransition) {
			t.Fatalf("%s timed out: %v", st, err)
		}
	}
	if !commands.HeldRemotely(heldJob(domain.StateClaimed, t0)) {
		t.Fatal("a job claimed over HTTP is held remotely")
	}
	sdk := heldJob(domain.StateRunning, t0)
	sdk.LeaseAck = ""
	if commands.HeldRemotely(sdk) {
		t.Fatal("a job an SDK worker runs is not held remotely")
	}
}

func TestCheckEvent(t *testing.T) {
	for _, tc := range []struct {
		name, level, message string
		fields               int
		field                string // "" accepted
	}{
		{"page.done", "", "", 0, ""},
		{"page.done", "warning", "m", 64, ""},
		{"", "info", "", 0, "name"},
		{strings.Repeat("n", 129), "info", "", 0, "name"},
		{"n", "debug", "", 0, "level"},
		{"n", "info", strings.Repeat("m", 4097), 0, "message"},
		{"n", "info", "", 65, "fields"},
	} {
		fields := map[string]any{}
		for i := range tc.fields {
			fields[strings.Repeat("k", i+1)] = i
		}
		level, err := commands.CheckEvent(tc.name, tc.level, tc.message, fields)
		var in *commands.InputError
		switch {
		case tc.field == "" && (err != nil || level == ""):
			t.Errorf("%+v: refused %v", tc, err)
		case tc.field != "" && (!errors.As(err, &in) || in.Field != tc.field):
			t.Errorf("%+v: %v, want a refusal of %s", tc, err, tc.field)
		}
	}
}

// A remote worker's retry-later and waiting reports are the outcomes the
// Go runtime records for RetryLater and FanOut; an event is checked with
// the report as a whole.
func TestRemoteReports(t *testing.T) {
	now := time.Now().UTC()
	j := heldJob(domain.StateRunning, now)
	rep := commands.Report{State: commands.StateRetryLater, Delay: 5 * time.Second, Reason: "GPU busy"}
	o, ends, err := rep.Outcome()
	if err != nil || !ends || o.Kind != commands.RetryingLater || o.Delay != 5*time.Second || o.Reason != "GPU busy" {
		t.Fatalf("retry later: %+v %v %v", o, ends, err)
	}
	if err := commands.CheckReport(j, "wk", rep, nil, now); err != nil {
		t.Fatal(err)
	}
	ev, err := o.Decide(j, "wk", now, 0)
	if err != nil || ev.Type != domain.EvRetryLater || ev.To != domain.StateScheduled || !ev.RunAt.Equal(now.Add(5*time.Second)) {
		t.Fatalf("retry later: %+v %v", ev, err)
	}
	if _, _, err := (commands.Report{State: commands.StateRetryLater, Delay: -1}).Outcome(); !errors.Is(err, commands.ErrInvalidInput) {
		t.Fatalf("negative delay: %v", err)
	}
	claimed := heldJob(domain.StateClaimed, now)
	if err := commands.CheckReport(claimed, "wk", rep, nil, now); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("retry later of a claimed job: %v", err)
	}
	plan := &domain.FanoutPlan{Kind: domain.FanoutChildren, Total: 2}
	wait := commands.Report{State: domain.StateWaiting, Plan: plan}
	if err := commands.CheckReport(j, "wk", wait, nil, now); err != nil {
		t.Fatal(err)
	}
	if err := commands.CheckReport(j, "wk", commands.Report{State: domain.StateWaiting}, nil, now); !errors.Is(err, commands.ErrInvalidInput) {
		t.Fatalf("waiting without a plan: %v", err)
	}
	ev2 := &commands.EventReport{Name: "page.done", Fields: map[string]any{"page": 3}}
	if err := commands.CheckReport(j, "wk", commands.Report{Event: ev2}, nil, now); err != nil {
		t.Fatal(err)
	}
	bad := &commands.EventReport{Name: "x", Level: "loud"}
	var in *commands.InputError
	if err := commands.CheckReport(j, "wk", commands.Report{Event: bad}, nil, now); !errors.As(err, &in) || in.Field != "event.level" {
		t.Fatalf("bad event level: %v", err)
	}
	queued := &domain.Job{ID: "J", State: domain.StateQueued}
	if _, err := ev2.Decide(queued, "wk", now); !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("event on a queued job: %v", err)
	}
}

func TestChildBlocked(t *testing.T) {
	for st, want := range map[domain.State]bool{domain.StateCancelled: true, domain.StateFailed: true,
		domain.StateSucceeded: false, domain.StateRunning: false, domain.StateWaiting: false} {
		if got := commands.ChildBlocked(&domain.Job{State: st}); got != want {
			t.Errorf("%s: %v, want %v", st, got, want)
		}
	}
}

// A batch reports succeeded, failed or retry_later, without a result.
func TestBatchOutcome(t *testing.T) {
	for _, tc := range []struct {
		rep   commands.Report
		kind  commands.OutcomeKind
		field string // "" accepted
	}{
		{commands.Report{State: domain.StateSucceeded}, commands.Succeeded, ""},
		{commands.Report{State: domain.StateFailed, Error: &domain.JobError{Message: "x"}}, commands.Failed, ""},
		{commands.Report{State: commands.StateRetryLater, Delay: time.Second}, commands.RetryingLater, ""},
		{commands.Report{State: domain.StateSucceeded, Result: []byte(`1`)}, 0, "result"},
		{commands.Report{State: domain.StateRunning}, 0, "state"},
		{commands.Report{State: domain.StateQueued}, 0, "state"},
		{commands.Report{State: domain.StateWaiting}, 0, "state"},
	} {
		o, err := tc.rep.BatchOutcome()
		var in *commands.InputError
		switch {
		case tc.field == "" && (err != nil || o.Kind != tc.kind):
			t.Errorf("%+v: %+v %v", tc.rep, o, err)
		case tc.field != "" && (!errors.As(err, &in) || in.Field != tc.field):
			t.Errorf("%+v: %v, want a refusal of %s", tc.rep, err, tc.field)
		}
	}
}
