package commands_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

func TestOverdueAndReap(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	p := commands.ReapPolicy{Grace: time.Minute, StallTimeout: time.Hour}
	spec := domain.Spec{Timeout: 10 * time.Minute, QueueTimeout: 5 * time.Minute}
	plan := func(stall time.Duration) *domain.Fanout {
		return &domain.Fanout{Plan: domain.FanoutPlan{Kind: domain.FanoutChildren, Total: 2, StallTimeout: stall}}
	}
	for _, tc := range []struct {
		name string
		job  domain.Job
		want string
		code string
		ev   string
	}{
		{"running within timeout and grace", domain.Job{State: domain.StateRunning, StartedAt: now.Add(-11 * time.Minute), UpdatedAt: now}, "", "", ""},
		{"running past timeout and grace", domain.Job{State: domain.StateRunning, StartedAt: now.Add(-12 * time.Minute), UpdatedAt: now}, commands.ReapTimeout, commands.CodeTimeout, domain.EvFailed},
		{"claimed counts from its update", domain.Job{State: domain.StateClaimed, StartedAt: now.Add(-time.Hour), UpdatedAt: now.Add(-time.Minute)}, "", "", ""},
		{"claimed past", domain.Job{State: domain.StateClaimed, UpdatedAt: now.Add(-12 * time.Minute)}, commands.ReapTimeout, commands.CodeTimeout, domain.EvFailed},
		{"queued within queue timeout", domain.Job{State: domain.StateQueued, QueuedAt: now.Add(-4 * time.Minute)}, "", "", ""},
		{"queued past queue timeout", domain.Job{State: domain.StateQueued, QueuedAt: now.Add(-6 * time.Minute)}, commands.ReapQueueTimeout, commands.CodeQueueTimeout, domain.EvFailed},
		{"waiting within stall", domain.Job{State: domain.StateWaiting, UpdatedAt: now.Add(-59 * time.Minute), Fanout: plan(0)}, "", "", ""},
		{"waiting stalled", domain.Job{State: domain.StateWaiting, UpdatedAt: now.Add(-61 * time.Minute), Fanout: plan(0)}, commands.ReapStalled, "STALLED", domain.EvStalled},
		{"waiting with its own stall timeout", domain.Job{State: domain.StateWaiting, UpdatedAt: now.Add(-2 * time.Minute), Fanout: plan(time.Minute)}, commands.ReapStalled, "STALLED", domain.EvStalled},
		{"scheduled never", domain.Job{State: domain.StateScheduled, UpdatedAt: now.Add(-48 * time.Hour)}, "", "", ""},
		{"terminal never", domain.Job{State: domain.StateFailed, UpdatedAt: now.Add(-48 * time.Hour)}, "", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := tc.job
			j.ID, j.Spec, j.Seq = domain.NewID(), spec, 3
			if j.State == domain.StateQueued {
				j.Spec.QueueTimeout = spec.QueueTimeout
			}
			if got := commands.Overdue(&j, p, now); got != tc.want {
				t.Fatalf("Overdue = %q, want %q", got, tc.want)
			}
			// DueAt is the edge of Overdue: nothing up to it, the same
			// deadline just after it; no edge, never anything.
			if due, ok := commands.DueAt(&j, p); ok {
				if got := commands.Overdue(&j, p, due); got != "" {
					t.Fatalf("Overdue at DueAt %v = %q, want nothing yet", due, got)
				}
				if got := commands.Overdue(&j, p, due.Add(time.Nanosecond)); got == "" || (tc.want != "" && got != tc.want) {
					t.Fatalf("Overdue just after DueAt = %q, want %q", got, tc.want)
				}
			} else if got := commands.Overdue(&j, p, now.Add(100*365*24*time.Hour)); got != "" {
				t.Fatalf("no DueAt, yet Overdue a century later = %q", got)
			}
			ev, why, err := commands.Reap(&j, p, "reaper", now)
			if tc.want == "" {
				if !errors.Is(err, commands.ErrInvalidTransition) || ev != nil {
					t.Fatalf("Reap = %v, %v; want a refusal", ev, err)
				}
				return
			}
			if err != nil || why != tc.want || ev.Type != tc.ev || ev.Error == nil || ev.Error.Code != tc.code || ev.Actor != "reaper" {
				t.Fatalf("Reap = %+v, %q, %v", ev, why, err)
			}
		})
	}
}

func TestCancelNotifies(t *testing.T) {
	for _, s := range []domain.State{domain.StatePending, domain.StateScheduled, domain.StateQueued, domain.StateClaimed,
		domain.StateRunning, domain.StateWaiting, domain.StateSucceeded, domain.StateFailed, domain.StateCancelled} {
		want := s == domain.StateClaimed || s == domain.StateRunning || s == domain.StateWaiting
		if got := commands.CancelNotifies(s); got != want {
			t.Errorf("CancelNotifies(%s) = %v, want %v", s, got, want)
		}
	}
}

func TestPrincipalRules(t *testing.T) {
	all := &commands.Principal{Name: "a", TokenID: "1", Namespace: commands.AllNamespaces, Role: commands.RoleAdmin}
	ns := &commands.Principal{Name: "p", TokenID: "2", Namespace: "team", Role: commands.RoleProducer}
	var none *commands.Principal
	if !all.Sees("x") || !ns.Sees("team") || ns.Sees("other") {
		t.Fatal("Sees")
	}
	if got, err := none.Scope(commands.ActRead, "x"); got != "x" || err != nil {
		t.Fatalf("nil principal scope %q %v", got, err)
	}
	if got, err := ns.Scope(commands.ActRead, ""); got != "team" || err != nil {
		t.Fatalf("own scope %q %v", got, err)
	}
	if _, err := ns.Scope(commands.ActRead, "other"); !errors.Is(err, commands.ErrForbidden) {
		t.Fatalf("other namespace: %v", err)
	}
	if err := ns.Can(commands.ActAdmin); !errors.Is(err, commands.ErrForbidden) {
		t.Fatalf("producer admin: %v", err)
	}
	if err := ns.Can(commands.ActSubmit); err != nil {
		t.Fatal(err)
	}
	if commands.VerbAction("cancel") != commands.ActCancel || commands.VerbAction("nope") != "" {
		t.Fatal("VerbAction")
	}
	if !commands.ClaimableBy("", "x") || !commands.ClaimableBy("team", "team") || commands.ClaimableBy("team", "other") {
		t.Fatal("ClaimableBy")
	}
	if ns.Actor() != "token:p/2" {
		t.Fatal(ns.Actor())
	}
}
