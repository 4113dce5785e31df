package jetflow_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestScheduleClients: the same calls through the engine's store and
// through the command service with a token: create (again with the same
// spec: not created; another spec: conflict), get, list, update, pause,
// resume, delete; a tick fires a job; a namespaced token sees and touches
// only its namespace's schedules; a reader may list but not create.
func TestScheduleClients(t *testing.T) {
	t.Parallel()
	srv, ctx, admin := startEngine(t)
	token := func(ns string, role jetflow.Role) *jetflow.Client {
		tok, err := admin.CreateToken(ctx, jetflow.TokenSpec{Name: string(role) + "@" + ns, Namespace: ns, Role: role})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Token: tok.Token})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	for _, tc := range []struct {
		name string
		cl   *jetflow.Client
		ns   string
	}{{"direct", admin, "direct"}, {"token", token("acme", jetflow.RoleProducer), ""}} {
		t.Run(tc.name, func(t *testing.T) {
			cl, ns := tc.cl, tc.ns
			req := jetflow.ScheduleRequest{Name: "beat", Namespace: ns, Every: time.Second, Overlap: jetflow.OverlapAllow,
				Job: jetflow.SubmitRequest{Type: "sched.beat", Payload: []byte(`{"a":1}`), Queue: "beats"}}
			s, created, err := cl.CreateSchedule(ctx, req)
			if err != nil || !created || s.Every != time.Second || s.NextRunAt == nil || s.Overlap != "allow" || s.Misfire != "once" {
				t.Fatalf("create: %+v %v %v", s, created, err)
			}
			want := ns
			if want == "" {
				want = "acme" // the token's
			}
			if s.Namespace != want {
				t.Fatalf("namespace %q, want %q", s.Namespace, want)
			}
			if _, created, err := cl.CreateSchedule(ctx, req); err != nil || created {
				t.Fatalf("the same again: created %v, %v", created, err)
			}
			other := req
			other.Every = 2 * time.Second
			if _, _, err := cl.CreateSchedule(ctx, other); !errors.Is(err, jetflow.ErrConflict) {
				t.Fatalf("another spec: %v", err)
			}
			bad := req
			bad.Name, bad.Every, bad.Cron = "bad", 0, "61 * * * *"
			_, _, err = cl.CreateSchedule(ctx, bad)
			if p := jetflow.ProblemOf(err); !errors.Is(err, jetflow.ErrInvalidInput) || p.Field != "cron" || p.Type != "invalid-input" {
				t.Fatalf("a bad cron: %v", err)
			}
			// A tick fires a job.
			var fired *jetflow.ScheduleInfo
			testkit.WaitFor(t, 20*time.Second, func() error {
				fired, err = cl.Schedule(ctx, ns, "beat")
				if err != nil {
					return err
				}
				if len(fired.LastRuns) == 0 {
					return errors.New("no tick yet")
				}
				return nil
			})
			run := fired.LastRuns[0]
			job, err := cl.Get(ctx, run.JobID)
			if run.Outcome != jetflow.TickFired || err != nil || job.Type != "sched.beat" || job.Queue != "beats" || job.Namespace != want {
				t.Fatalf("tick %+v, job %+v %v", run, job, err)
			}
			list, err := cl.Schedules(ctx, ns)
			if err != nil || len(list) != 1 || list[0].Name != "beat" {
				t.Fatalf("list: %v %v", list, err)
			}
			cron := "0 9 * * 1-5"
			zone := "Europe/Berlin"
			up, err := cl.UpdateSchedule(ctx, ns, "beat", jetflow.ScheduleUpdate{Cron: &cron, Timezone: &zone})
			if err != nil || up.Cron != cron || up.Every != 0 || up.Timezone != zone || up.NextRunAt.Hour() == 9 && zone == "UTC" {
				t.Fatalf("update: %+v %v", up, err)
			}
			if p, err := cl.PauseSchedule(ctx, ns, "beat"); err != nil || !p.Paused || p.NextRunAt != nil {
				t.Fatalf("pause: %+v %v", p, err)
			}
			if r, err := cl.ResumeSchedule(ctx, ns, "beat"); err != nil || r.Paused || r.NextRunAt == nil {
				t.Fatalf("resume: %+v %v", r, err)
			}
			if _, err := cl.DeleteSchedule(ctx, ns, "beat"); err != nil {
				t.Fatal(err)
			}
			if _, err := cl.Schedule(ctx, ns, "beat"); !errors.Is(err, jetflow.ErrNotFound) {
				t.Fatalf("get a deleted one: %v", err)
			}
		})
	}
	// Namespaces: a token of acme neither sees nor touches another's.
	if _, _, err := admin.CreateSchedule(ctx, jetflow.ScheduleRequest{Name: "theirs", Namespace: "other", Cron: "@daily",
		Job: jetflow.SubmitRequest{Type: "x"}}); err != nil {
		t.Fatal(err)
	}
	acme := token("acme", jetflow.RoleProducer)
	if list, err := acme.Schedules(ctx, ""); err != nil || len(list) != 0 {
		t.Fatalf("acme lists %v, %v", list, err)
	}
	if _, err := acme.Schedule(ctx, "other", "theirs"); !errors.Is(err, jetflow.ErrDenied) {
		t.Fatalf("acme gets another namespace's: %v", err)
	}
	if _, err := acme.PauseSchedule(ctx, "other", "theirs"); !errors.Is(err, jetflow.ErrDenied) {
		t.Fatalf("acme pauses another namespace's: %v", err)
	}
	if _, err := acme.Schedule(ctx, "", "theirs"); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("acme's own namespace has none of that name: %v", err)
	}
	reader := token("other", jetflow.RoleReader)
	if list, err := reader.Schedules(ctx, ""); err != nil || len(list) != 1 || list[0].Name != "theirs" {
		t.Fatalf("a reader lists %v, %v", list, err)
	}
	if _, _, err := reader.CreateSchedule(ctx, jetflow.ScheduleRequest{Name: "mine", Cron: "@daily", Job: jetflow.SubmitRequest{Type: "x"}}); !errors.Is(err, jetflow.ErrDenied) {
		t.Fatalf("a reader creates: %v", err)
	}
	if _, err := reader.DeleteSchedule(ctx, "", "theirs"); !errors.Is(err, jetflow.ErrDenied) {
		t.Fatalf("a reader deletes: %v", err)
	}
	if s, err := admin.Schedule(ctx, "other", "theirs"); err != nil || s.Paused {
		t.Fatalf("after the refusals: %+v %v", s, err)
	}
}

func ExampleClient_CreateSchedule() {
	client, stop := exampleClient()
	defer stop()
	ctx := context.Background()

	s, created, err := client.CreateSchedule(ctx, jetflow.ScheduleRequest{
		Name: "nightly-report", Cron: "30 2 * * *", Timezone: "Europe/Berlin",
		Job:     jetflow.SubmitRequest{Type: "report.build", Payload: []byte(`{"kind":"daily"}`), Queue: "reports"},
		Overlap: jetflow.OverlapSkip, Misfire: jetflow.MisfireOnce,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(s.Name, created, s.NextRunAt.In(time.UTC).Minute(), len(s.Upcoming))

	_, _, err = client.CreateSchedule(ctx, jetflow.ScheduleRequest{Name: "typo", Cron: "30 2 * *", Job: jetflow.SubmitRequest{Type: "x"}})
	var in *jetflow.InputError
	fmt.Println(errors.As(err, &in), in.Field)
	// Output:
	// nightly-report true 30 4
	// true cron
}
