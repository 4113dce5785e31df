package process

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// The CLI submitting a workflow killed after its steps are written and
// before the workflow records that it waits for them
// (JETFLOW_CRASH_AT=workflow:steps): the leader's workflow counter finds
// the workflow pending past its grace, makes what is missing (nothing:
// the step ids are derived) and starts it; every step runs once, in the
// graph's order, and the workflow succeeds. Submitting it again with the
// same key returns it.
func TestWorkflowSubmitCrashPoint(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.worker("B", nil)
	file := filepath.Join(t.TempDir(), "wf.json")
	if err := os.WriteFile(file, []byte(`{"name":"crash","steps":[
		{"name":"one","type":"demo.echo","payload":{"n":1}},
		{"name":"two","type":"demo.echo","payload":{"n":2},"depends_on":["one"]},
		{"name":"three","type":"demo.echo","payload":{"n":3},"depends_on":["one","two"]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	const key = "wf-crash"
	_, sig, out := s.cli([]string{"JETFLOW_CRASH_AT=workflow:steps"}, "workflow", "submit", file, "--key", key)
	if sig != syscall.SIGKILL {
		t.Fatalf("workflow submit was not killed at workflow:steps:\n%s", out)
	}
	id := domain.KeyedID(domain.DefaultNS, key)
	done := testkit.WaitTerminal(t, s.client, id, 60*time.Second)
	if done.State != jetflow.Succeeded {
		t.Fatalf("workflow %+v", done)
	}
	evs, err := s.client.Events(testkit.Ctx(t), id)
	if err != nil || len(evs) < 3 || evs[0].Type != evSubmitted || evs[1].Type != domain.EvWaiting || evs[len(evs)-1].Type != evSucceeded {
		t.Fatalf("the workflow's events: %v %+v", err, evs)
	}
	info, err := s.client.GetWorkflow(testkit.Ctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	s.wantEvents(info.Step("one").ID, evSubmitted, evStarted, evSucceeded)
	for _, name := range []string{"two", "three"} {
		s.wantEvents(info.Step(name).ID, evSubmitted, domain.EvAdmitted, evStarted, evSucceeded)
	}
	code, _, out := s.cli(nil, "workflow", "submit", file, "--key", key)
	if code != 0 || !strings.HasPrefix(out, id+"\tsucceeded\texists, 3 steps") {
		t.Fatalf("submit again exited %d: %s", code, out)
	}
	s.waitDrained("default")
	s.verify()
}

// The leading engine killed between its workflow counter's decision to
// admit a step (its dependency succeeded) and the admission's write
// (JETFLOW_CRASH_AT=wfadmit:decided): nothing of the admission is in the
// log, the step stays pending; the next leader's counter rebuilds from
// the log, admits it once, and the workflow succeeds.
func TestWorkflowAdmitCrashPoint(t *testing.T) {
	t.Parallel()
	s := startOnNATS(t)
	setup := s.startEngine("serve 1")
	setup.Signal(t, syscall.SIGTERM) // gives up the lead at once
	if code, sig := setup.WaitExit(t, 30*time.Second); code != 0 || sig != 0 {
		t.Fatalf("serve 1 exited with code %d, signal %v", code, sig)
	}
	s.worker("W", nil)
	wf := jetflow.NewWorkflow("admit-crash")
	wf.Step("two", "demo.echo", map[string]int{"n": 2}).After(wf.Step("one", "demo.echo", map[string]int{"n": 1}))
	res, err := s.client.SubmitWorkflow(testkit.Ctx(t), wf)
	if err != nil {
		t.Fatal(err)
	}
	one, two := res.Steps["one"], res.Steps["two"]
	s.waitState(one, jetflow.Succeeded)
	s.wantState(two, jetflow.Pending) // no engine: no counter

	crashed := s.startEngineEnv("serve 2 (crash at wfadmit:decided)", []string{"JETFLOW_CRASH_AT=wfadmit:decided"})
	wantKilled(t, crashed)
	s.wantEvents(two, evSubmitted) // the decision died with it
	s.wantState(two, jetflow.Pending)

	s.startEngine("serve 3")
	done := testkit.WaitTerminal(t, s.client, res.ID, 60*time.Second)
	if done.State != jetflow.Succeeded {
		t.Fatalf("workflow %+v", done)
	}
	evs := s.wantEvents(two, evSubmitted, domain.EvAdmitted, evStarted, evSucceeded)
	if pid := fmt.Sprintf("-%d", crashed.Cmd.Process.Pid); strings.HasSuffix(evs[1].Actor, pid) {
		t.Fatalf("two admitted by %q, the engine that was killed", evs[1].Actor)
	}
	s.verify()
}

// A worker SIGKILLed inside a step: the step's lease runs out, it is
// requeued and another worker runs it; its dependent waits for it and is
// admitted once, and the workflow succeeds.
func TestWorkflowWorkerKilledInAStep(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	a := s.worker("A", nil)
	wf := jetflow.NewWorkflow("worker-kill")
	wf.Step("after", "demo.echo", map[string]int{"n": 2}).After(wf.Step("slow", "demo.sleep", map[string]float64{"seconds": 3}))
	res, err := s.client.SubmitWorkflow(testkit.Ctx(t), wf)
	if err != nil {
		t.Fatal(err)
	}
	slow, after := res.Steps["slow"], res.Steps["after"]
	s.waitRunning(slow, "A")
	a.Kill(t)
	s.wantState(after, jetflow.Pending) // its dependency has not ended
	s.worker("B", nil)
	done := testkit.WaitTerminal(t, s.client, res.ID, 60*time.Second)
	if done.State != jetflow.Succeeded {
		t.Fatalf("workflow %+v", done)
	}
	step := testkit.WaitTerminal(t, s.client, slow, time.Second)
	if step.State != jetflow.Succeeded || step.Worker != "B" || step.Attempts != 2 || step.LeaseRequeues != 1 {
		t.Fatalf("step slow %s under %s, attempts %d, lease requeues %d", step.State, step.Worker, step.Attempts, step.LeaseRequeues)
	}
	wantLeaseTakeover(t, s.wantEvents(slow, evSubmitted, evStarted, evRequeue, evStarted, evSucceeded), "A", "B")
	s.wantEvents(after, evSubmitted, domain.EvAdmitted, evStarted, evSucceeded)
	s.waitDrained("default")
	s.verify()
}

// A thousand random graphs (testkit.RandomWorkflow: 1-12 steps, policies
// skip and always, steps that fail) run by worker processes of which one
// is SIGKILLed every 400 ms (and another started) while they run: each
// graph ends as the model of the rules says, every step as the model says,
// a step that runs completes exactly once (an attempt cut by a kill is
// requeued when its lease runs out: attempts = 1 + lease requeues), a
// skipped step never started, and the log verifies.
func TestWorkflowRandomGraphsUnderWorkerKills(t *testing.T) {
	t.Parallel()
	graphs, kills := 1000, 25
	s := startSystem(t)
	workers := map[string]*testkit.Proc{}
	n := 0
	start := func() {
		n++
		name := fmt.Sprintf("w%d", n)
		workers[name] = s.worker(name, nil, "--concurrency", "8")
	}
	for range 3 {
		start()
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 2))
	models := make([]testkit.WorkflowModel, graphs)
	subs := make([]*jetflow.SubmittedWorkflow, graphs)
	ctx := testkit.Ctx(t)
	var wg sync.WaitGroup
	errs := make(chan error, graphs)
	for k := range graphs {
		models[k] = testkit.RandomWorkflow(r)
	}
	for part := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := part; k < graphs; k += 8 {
				g := models[k]
				wf := jetflow.NewWorkflow(fmt.Sprintf("model-%d", k))
				wf.OnFailure = jetflow.SkipDependents
				steps := make([]*jetflow.Step, len(g.Deps))
				for i, deps := range g.Deps {
					if g.Fails[i] {
						steps[i] = wf.Step(fmt.Sprintf("s%d", i), "demo.fail", map[string]int{"times": 1000}, jetflow.MaxRetries(0))
					} else {
						steps[i] = wf.Step(fmt.Sprintf("s%d", i), "demo.sleep", map[string]float64{"seconds": 0.05}, jetflow.MaxRetries(0))
					}
					for _, d := range deps {
						steps[i].After(steps[d])
					}
					if g.Always[i] {
						steps[i].OnFailure(jetflow.RunAlways)
					}
				}
				res, err := s.client.SubmitWorkflow(ctx, wf)
				if err != nil {
					errs <- fmt.Errorf("graph %d: %w", k, err)
					return
				}
				subs[k] = res
			}
		}()
	}
	// Kill a worker every 400 ms while the graphs run.
	for range kills {
		time.Sleep(400 * time.Millisecond) // the kills' pace, not a wait for a condition
		var names []string
		for name := range workers {
			names = append(names, name)
		}
		victim := names[r.IntN(len(names))]
		workers[victim].Kill(t)
		delete(workers, victim)
		start()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	killedInAStep := 0
	for k, g := range models {
		want, ok := g.Outcome()
		state := jetflow.Succeeded
		if !ok {
			state = jetflow.Failed
		}
		if done := testkit.WaitTerminal(t, s.client, subs[k].ID, 3*time.Minute); done.State != state {
			t.Fatalf("graph %d (seed %d) %+v: workflow %s %s, the model says %s", k, seed, g, done.ID, done.State, state)
		}
		info, err := s.client.GetWorkflow(ctx, subs[k].ID)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range info.Steps {
			if st.Status != want[i] {
				t.Fatalf("graph %d (seed %d) %+v: step %s is %s, the model says %s", k, seed, g, st.Name, st.Status, want[i])
			}
			if want[i] == "skipped" {
				if st.Attempts != 0 {
					t.Fatalf("graph %d: skipped step %s started %d times", k, st.Name, st.Attempts)
				}
				continue
			}
			if st.Attempts == 1 {
				continue
			}
			j, err := s.client.Get(ctx, st.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j.Attempts != 1+j.LeaseRequeues || j.Retries != 0 {
				t.Fatalf("graph %d: step %s %s after %d attempts, %d lease requeues, %d retries", k, st.Name, j.State, j.Attempts, j.LeaseRequeues, j.Retries)
			}
			killedInAStep++
		}
	}
	t.Logf("%d graphs, %d kills, %d steps cut by a kill and run again", graphs, kills, killedInAStep)
	if killedInAStep == 0 {
		t.Fatal("no kill cut a step: the test tested no crash")
	}
	s.verify()
}
