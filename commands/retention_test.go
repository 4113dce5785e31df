package commands_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

func TestPurgeOnlyTerminal(t *testing.T) {
	now := time.Now().UTC()
	for _, s := range domain.States {
		j := job(s)
		ev, err := commands.Purge(j, nil, "retention", "purger", now)
		if !s.Terminal() {
			if !errors.Is(err, commands.ErrInvalidTransition) || ev != nil {
				t.Errorf("purge of a %s job: %v, %v; want ErrInvalidTransition and no event", s, ev, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("purge of a %s job: %v", s, err)
		}
		if ev.Type != domain.EvPurged || ev.From != s || ev.To != s || !ev.Time.Equal(now) || ev.Message != "retention" {
			t.Errorf("purge of a %s job: %+v", s, ev)
		}
		ev.Seq = j.Seq + 1
		n, err := projections.Fold(j, ev)
		if err != nil {
			t.Fatal(err)
		}
		if n.State != s || !n.PurgedAt.Equal(now) {
			t.Errorf("fold of job.purged: state %s purged at %v", n.State, n.PurgedAt)
		}
		if _, err := commands.Purge(n, nil, "again", "purger", now); !errors.Is(err, commands.ErrGone) {
			t.Errorf("purge of a purged job: %v, want ErrGone", err)
		}
	}
}

func TestPurgeParentOnlyWithItsChildren(t *testing.T) {
	now := time.Now()
	parent := job(domain.StateFailed)
	_, err := commands.Purge(parent, []domain.State{domain.StateSucceeded, domain.StateRunning, domain.StateQueued}, "", "p", now)
	var pe *commands.PurgeError
	if !errors.As(err, &pe) || !errors.Is(err, commands.ErrInvalidTransition) {
		t.Fatalf("purge of a parent with 2 live children: %v", err)
	}
	if _, err := commands.Purge(parent, []domain.State{domain.StateSucceeded, domain.StateCancelled}, "", "p", now); err != nil {
		t.Fatalf("purge of a parent whose children ended: %v", err)
	}
}

func TestExpired(t *testing.T) {
	now := time.Now()
	j := job(domain.StateSucceeded)
	j.FinishedAt = now.Add(-2 * time.Hour)
	if !commands.Expired(j, time.Hour, now) || commands.Expired(j, 3*time.Hour, now) {
		t.Error("expiry of a job finished 2h ago")
	}
	r := job(domain.StateRunning)
	r.UpdatedAt = now.Add(-48 * time.Hour)
	if commands.Expired(r, time.Hour, now) {
		t.Error("a running job expired")
	}
}

func TestGoneIsNotFound(t *testing.T) {
	err := error(&commands.GoneError{JobID: "J", At: time.Now()})
	if !errors.Is(err, commands.ErrGone) || !errors.Is(err, commands.ErrNotFound) {
		t.Error("GoneError must match ErrGone and ErrNotFound")
	}
}
