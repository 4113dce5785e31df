package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// `jetflow purge` killed right after a job.purged (purge:appended), before
// the record, the files and the rest of the family: a fan-out parent's
// purge purges its children first, so each killed run purges one more job
// of the family in the log, a child, then the next, the parent last. The
// Projector deletes each one's record without a reader asking; the others
// are untouched until a run reaches them, and none is purged twice. A job
// with files keeps them after its purge is killed, until the FileSweeper
// finds they belong to no job. Then a purge finds nothing left, and the
// log and the bucket agree.
func TestPurgeCrashPoint(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.worker("W", nil, "--concurrency", "4")
	ctx := testkit.Ctx(t)
	st := testkit.StoreOf(t, s.client)
	sweeper := engine.NewFileSweeper(st, time.Nanosecond, time.Hour, testkit.Logger(t))

	parent, err := s.client.Submit(ctx, "demo.fanout", map[string]any{"children": 3, "child_seconds": 0})
	if err != nil {
		t.Fatal(err)
	}
	if j := testkit.WaitTerminal(t, s.client, parent.ID, 30*time.Second); j.State != jetflow.Succeeded {
		t.Fatalf("parent %s", j.State)
	}
	kids, err := s.client.Children(ctx, parent.ID)
	if err != nil || len(kids) != 3 {
		t.Fatalf("children: %v, %d", err, len(kids))
	}
	withFiles, err := s.client.Submit(ctx, "demo.echo", map[string]int{"n": 1},
		jetflow.Files(map[string]io.Reader{"a.txt": strings.NewReader("a"), "b.txt": strings.NewReader("b")}))
	if err != nil {
		t.Fatal(err)
	}
	if j := testkit.WaitTerminal(t, s.client, withFiles.ID, 30*time.Second); j.State != jetflow.Succeeded {
		t.Fatalf("job with files %s", j.State)
	}
	if n, err := sweeper.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("a sweep while every job exists deleted %d: %v", n, err)
	}

	// The fan-out family first (it ended first), each run killed after the
	// job.purged of one more of it: the children, then the parent.
	family := append(ids(kids), parent.ID)
	purged := purgedCounter(t, st, append(family, withFiles.ID)...)
	var gone []string
	for range family {
		s.purgeKilled()
		next := ""
		for _, id := range family {
			switch n := purged(id); {
			case n == 1 && !slices.Contains(gone, id) && next == "":
				next = id
			case n == 1 && slices.Contains(gone, id):
			case n != 0:
				t.Fatalf("job %s has %d job.purged after %d killed purges", id, n, len(gone)+1)
			}
		}
		if next == "" {
			t.Fatalf("killed purge %d purged nothing of the family", len(gone)+1)
		}
		gone = append(gone, next)
		s.waitRecordGone(st, next)
		if _, err := s.client.Get(ctx, next); !errors.Is(err, commands.ErrGone) {
			t.Fatalf("get of %s purged by a killed purge: %v", next, err)
		}
		if len(gone) < len(family) { // the parent is purged last, with its children gone
			if j, err := s.client.Get(ctx, parent.ID); err != nil || j.State != jetflow.Succeeded {
				t.Fatalf("parent after %d killed purges: %v %+v", len(gone), err, j)
			}
		}
	}
	if gone[len(gone)-1] != parent.ID {
		t.Fatalf("purged in the order %v, want the parent %s last", gone, parent.ID)
	}

	// The job with files: purged in the log, its record and files left.
	s.purgeKilled()
	if n := purged(withFiles.ID); n != 1 {
		t.Fatalf("job with files: %d job.purged", n)
	}
	s.waitRecordGone(st, withFiles.ID)
	if n, err := sweeper.Sweep(ctx); err != nil || n != 2 {
		t.Fatalf("the sweep after the killed purge deleted %d files, want 2: %v", n, err)
	}
	if n, err := sweeper.Sweep(ctx); err != nil || n != 0 {
		t.Fatalf("a second sweep deleted %d: %v", n, err)
	}

	// Nothing left to purge, nothing purged twice, the log and the bucket agree.
	if code, _, out := s.cli(nil, "purge", "--older-than", "1ms"); code != 0 || !strings.Contains(out, "purged 0 jobs") {
		t.Fatalf("purge after the killed ones exited %d: %s", code, out)
	}
	for _, id := range append(family, withFiles.ID) {
		if n := purged(id); n != 1 {
			t.Fatalf("job %s has %d job.purged, want 1", id, n)
		}
	}
	s.verify()
}

func ids(jobs []*jetflow.JobInfo) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// purgeKilled runs `jetflow purge` with a crash at its first job.purged,
// again while nothing has ended long enough ago, and fails unless it was
// killed there.
func (s *system) purgeKilled() {
	s.t.Helper()
	testkit.WaitFor(s.t, 10*time.Second, func() error {
		code, sig, out := s.cli([]string{"JETFLOW_CRASH_AT=purge:appended"}, "purge", "--older-than", "1ms")
		if sig == syscall.SIGKILL {
			return nil
		}
		if code != 0 || !strings.Contains(out, "purged 0 jobs") {
			s.t.Fatalf("purge exited %d, signal %v:\n%s", code, sig, out)
		}
		return errors.New("nothing old enough to purge yet")
	})
}

// waitRecordGone waits until job id's record is deleted, by the
// Projector: nobody reads the job meanwhile.
func (s *system) waitRecordGone(st *engine.Store, id string) {
	s.t.Helper()
	testkit.WaitFor(s.t, 20*time.Second, func() error {
		if _, err := st.Record(context.Background(), id); !errors.Is(err, commands.ErrNotFound) {
			return fmt.Errorf("record of purged job %s: %v", id, err)
		}
		return nil
	})
}

// purgedCounter counts the job.purged on each of jobs ids' subjects of
// the log (noted before their purge: a purged job's history is not
// served, it is gone).
func purgedCounter(t *testing.T, st *engine.Store, ids ...string) func(id string) int {
	t.Helper()
	subjects := map[string]string{}
	for _, id := range ids {
		snap, err := st.Record(testkit.Ctx(t), id)
		if err != nil {
			t.Fatal(err)
		}
		subjects[id] = streams.JobSubject(snap.Job)
	}
	return func(id string) int {
		t.Helper()
		var types []string
		_, err := streams.ReadSubject(testkit.Ctx(t), st.NC, streams.EventsStream, subjects[id], 1, func(seq uint64, data []byte) error {
			ev, err := streams.DecodeEvent(data)
			if err != nil {
				return fmt.Errorf("event %d: %w", seq, err)
			}
			types = append(types, ev.Type)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return countOf(types, domain.EvPurged)
	}
}
