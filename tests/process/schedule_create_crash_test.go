package process

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// `jetflow schedule create` killed right after its schedule.created is in
// the log, before the schedule's record (schedule:appended): the schedule
// stands. The engine's Projector writes the record from the log, the
// leader's scheduler, which follows the records, fires it (a job for a
// tick), and creating it again finds it there (exists: nothing written).
func TestScheduleCreateCrashPoint(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	ctx := testkit.Ctx(t)
	st := testkit.StoreOf(t, s.client)
	create := []string{"schedule", "create", "beat", "proc.beat", `{"n":1}`, "--every", "1s", "--queue", "beats"}
	if _, sig, out := s.cli([]string{"JETFLOW_CRASH_AT=schedule:appended"}, create...); sig != syscall.SIGKILL {
		t.Fatalf("schedule create was not killed at schedule:appended:\n%s", out)
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		n := 0
		if err := st.Scan(ctx, func(j *domain.Job) {
			if strings.HasPrefix(j.Spec.Key, "schedule:beat:") {
				n++
			}
		}); err != nil {
			return err
		}
		if n == 0 {
			return errors.New("no tick's job yet")
		}
		return nil
	})
	if info, err := s.client.Schedule(ctx, domain.DefaultNS, "beat"); err != nil || info.Name != "beat" {
		t.Fatalf("the schedule after the killed create: %v %+v", err, info)
	}
	if code, _, out := s.cli(nil, create...); code != 0 || !strings.Contains(out, "beat\texists") {
		t.Fatalf("created again after the killed one: exit %d: %s", code, out)
	}
	if code, _, out := s.cli(nil, "schedule", "delete", "beat"); code != 0 {
		t.Fatalf("schedule delete exited %d: %s", code, out)
	}
	s.verify()
}
