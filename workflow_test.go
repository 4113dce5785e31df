package jetflow_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// The Go SDK's workflows: a builder (Step, Chain, Group.Then), checked
// before it is sent (a cycle names its steps); each step's handler reads
// its dependencies' results by name with Job.Output; the workflow's job
// ends succeeded; GetWorkflow shows each step; a token client submits and
// reads workflows of its namespace, and another namespace's is not found.
func TestWorkflowSDK(t *testing.T) {
	t.Parallel()
	srv, ctx, admin := startEngine(t)

	type sum struct {
		N    int      `json:"n"`
		From []string `json:"from"`
	}
	var mu sync.Mutex
	ran := map[string]int{}
	w := jetflow.NewWorker(admin, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	jetflow.Register(w, "sdk.add", func(ctx context.Context, job *jetflow.Job[int]) (sum, error) {
		mu.Lock()
		ran[job.Step()]++
		mu.Unlock()
		in, err := job.Inputs(ctx)
		if err != nil {
			return sum{}, err
		}
		out := sum{N: job.Payload}
		for name := range in {
			var s sum
			if err := job.Output(ctx, name, &s); err != nil {
				return sum{}, err
			}
			out.N += s.N
			out.From = append(out.From, name)
		}
		sort.Strings(out.From)
		var none sum
		if err := job.Output(ctx, "not-a-dependency", &none); !errors.Is(err, jetflow.ErrNotAStep) {
			return sum{}, fmt.Errorf("output of a step not depended on: %v", err)
		}
		return out, nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })

	// a -> b -> c, then x and y side by side after c, then z after both.
	wf := jetflow.NewWorkflow("sums")
	c := wf.Chain(wf.Step("a", "sdk.add", 1), wf.Step("b", "sdk.add", 2), wf.Step("c", "sdk.add", 3))
	z := wf.Group(wf.Step("x", "sdk.add", 10).After(c), wf.Step("y", "sdk.add", 20).After(c)).
		Then(wf.Step("z", "sdk.add", 100, jetflow.MaxRetries(0)))
	if z.Name() != "z" || len(wf.Steps()) != 6 {
		t.Fatalf("builder: %s, %d steps", z.Name(), len(wf.Steps()))
	}
	if err := wf.Validate(); err != nil {
		t.Fatal(err)
	}
	res, err := admin.SubmitWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || len(res.Steps) != 6 || res.Job == nil || res.State != jetflow.Waiting {
		t.Fatalf("submitted %+v", res)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done, err := admin.Wait(wctx, res.ID)
	if err != nil || done.State != jetflow.Succeeded {
		t.Fatalf("wait: %+v %v", done, err)
	}
	info, err := admin.GetWorkflow(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if info.State != jetflow.Succeeded || info.Counts["succeeded"] != 6 || len(info.Layers) != 5 {
		t.Fatalf("workflow %+v", info)
	}
	// a=1, b=3, c=6, x=16, y=26, z=100+16+26.
	if s := info.Step("z"); s == nil || string(s.Result) != `{"n":142,"from":["x","y"]}` || strings.Join(s.DependsOn, ",") != "x,y" {
		t.Fatalf("z %+v", s)
	}
	mu.Lock()
	for _, name := range []string{"a", "b", "c", "x", "y", "z"} {
		if ran[name] != 1 {
			t.Errorf("step %s ran %d times", name, ran[name])
		}
	}
	mu.Unlock()
	if _, err := admin.GetWorkflow(ctx, res.Steps["a"]); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("a step as a workflow: %v", err)
	}
	if _, err := admin.RetryWorkflow(ctx, res.ID); !errors.Is(err, jetflow.ErrInvalidTransition) {
		t.Fatalf("retry of a succeeded workflow: %v", err)
	}

	// Refused before anything is sent.
	bad := jetflow.NewWorkflow("loop")
	p, q := bad.Step("p", "sdk.add", 0), bad.Step("q", "sdk.add", 0)
	p.After(q)
	q.After(p)
	if err := bad.Validate(); !errors.Is(err, jetflow.ErrInvalidWorkflow) || !strings.Contains(err.Error(), "cycle p -> q -> p") {
		t.Fatalf("validate a cycle: %v", err)
	}
	if _, err := admin.SubmitWorkflow(ctx, bad); !errors.Is(err, jetflow.ErrInvalidWorkflow) {
		t.Fatalf("submit a cycle: %v", err)
	}

	// Over the command service with a token: its namespace only.
	tok, err := admin.CreateToken(ctx, jetflow.TokenSpec{Name: "wf", Namespace: "acme", Role: jetflow.RoleProducer})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Token: tok.Token})
	if err != nil {
		t.Fatal(err)
	}
	tw := jetflow.NewWorkflow("tok")
	tw.Chain(tw.Step("one", "sdk.park", nil), tw.Step("two", "sdk.park", nil))
	tres, err := cl.SubmitWorkflow(ctx, tw)
	if err != nil || !tres.Created || len(tres.Steps) != 2 || tres.Job.Namespace != "acme" {
		t.Fatalf("token submit: %+v %v", tres, err)
	}
	tinfo, err := cl.GetWorkflow(ctx, tres.ID)
	if err != nil || tinfo.Namespace != "acme" || tinfo.Step("two").Status != "pending" {
		t.Fatalf("token get: %+v %v", tinfo, err)
	}
	if _, err := cl.GetWorkflow(ctx, res.ID); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("another namespace's workflow: %v, want ErrNotFound", err)
	}
	if _, err := cl.SubmitWorkflow(ctx, bad); !errors.Is(err, jetflow.ErrInvalidWorkflow) {
		t.Fatalf("token submit of a cycle: %v", err)
	}
}

// Purging a workflow purges its steps with it, but not a step that
// succeeded while a run resumes the workflow: that run carries it (its
// record is that run's step too). Purging the resuming run leaves the step
// it carried, which is the first run's.
func TestPurgeOfAResumedWorkflow(t *testing.T) {
	t.Parallel()
	_, ctx, admin := startEngine(t)
	var fixed atomic.Bool
	w := jetflow.NewWorker(admin, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	jetflow.Register(w, "rp.ok", func(ctx context.Context, job *jetflow.Job[any]) (string, error) { return "ok", nil })
	jetflow.Register(w, "rp.flaky", func(ctx context.Context, job *jetflow.Job[any]) (string, error) {
		if !fixed.Load() {
			return "", jetflow.Permanent(errors.New("not yet"))
		}
		return "fixed", nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	wf := jetflow.NewWorkflow("resumed")
	wf.Chain(wf.Step("a", "rp.ok", nil), wf.Step("b", "rp.flaky", nil, jetflow.MaxRetries(0)))
	first, err := admin.SubmitWorkflow(ctx, wf)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if done, err := admin.Wait(wctx, first.ID); err != nil || done.State != jetflow.Failed {
		t.Fatalf("first run: %+v %v", done, err)
	}
	fixed.Store(true)
	second, err := admin.RetryWorkflow(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if second.Steps["a"] != first.Steps["a"] || second.Steps["b"] == first.Steps["b"] {
		t.Fatalf("the second run's steps %v, the first's %v", second.Steps, first.Steps)
	}
	if done, err := admin.Wait(wctx, second.ID); err != nil || done.State != jetflow.Succeeded {
		t.Fatalf("second run: %+v %v", done, err)
	}
	// The first run, its failed step; a (carried by the second) stays.
	if n, err := admin.PurgeJob(ctx, first.ID, "test"); err != nil || n != 2 {
		t.Fatalf("purge of the first run: %d, %v; want 2", n, err)
	}
	if a, err := admin.Get(ctx, first.Steps["a"]); err != nil || a.State != jetflow.Succeeded {
		t.Fatalf("the carried step after the first run's purge: %+v %v", a, err)
	}
	if _, err := admin.Get(ctx, first.Steps["b"]); !errors.Is(err, jetflow.ErrNotFound) {
		t.Fatalf("the first run's failed step after its purge: %v", err)
	}
	if info, err := admin.GetWorkflow(ctx, second.ID); err != nil || info.Step("a").Status == "missing" {
		t.Fatalf("the second run after the first's purge: %+v %v", info, err)
	}
	// The second run and its own step b; a is the first run's.
	if n, err := admin.PurgeJob(ctx, second.ID, "test"); err != nil || n != 2 {
		t.Fatalf("purge of the second run: %d, %v; want 2", n, err)
	}
	if _, err := admin.Get(ctx, first.Steps["a"]); err != nil {
		t.Fatalf("the carried step after both purges: %v", err)
	}
}
