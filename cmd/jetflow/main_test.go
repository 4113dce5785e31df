package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// cliEnv is an embedded server listening on a free port, with an engine
// and the demo handlers running, as `serve --demo` would have them.
type cliEnv struct {
	t   *testing.T
	url string
	cl  *jetflow.Client
}

func newCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	srv := testkit.Server(t, "127.0.0.1:-1")
	ctx := testkit.Ctx(t)
	cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.NewEngine(testkit.StoreOf(t, cl), engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Log: testkit.Logger(t)})
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	w := jetflow.NewWorker(cl, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	registerDemo(w, "default", false)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	return &cliEnv{t: t, url: srv.ClientURL(), cl: cl}
}

// jetflow runs the CLI with --nats pointing at the test server.
func (e *cliEnv) jetflow(args ...string) (stdout, stderr string, code int) {
	e.t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{args[0], "--nats", e.url}, args[1:]...)
	code = run(full, &out, &errb)
	return out.String(), errb.String(), code
}

func TestCLISubmitWaitAndJSONContract(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("submit", "demo.echo", `{"x": [1, 2]}`, "--wait", "--json", "--tag", "a")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errs)
	}
	var job map[string]any
	if err := json.Unmarshal([]byte(out), &job); err != nil {
		t.Fatalf("not one JSON object: %q", out)
	}
	for _, k := range []string{"id", "type", "queue", "state", "attempts", "max_retries", "result", "error",
		"created_at", "started_at", "finished_at"} {
		if _, ok := job[k]; !ok {
			t.Errorf("job JSON has no %q", k)
		}
	}
	if job["state"] != "succeeded" || job["type"] != "demo.echo" || job["queue"] != "default" {
		t.Fatalf("job %v", job)
	}
	if r, _ := json.Marshal(job["result"]); string(r) != `{"x":[1,2]}` {
		t.Fatalf("result %s", r)
	}
	id := job["id"].(string)
	out, _, code = e.jetflow("get", id, "--json")
	var again map[string]any
	if code != exitOK || json.Unmarshal([]byte(out), &again) != nil || again["id"] != id {
		t.Fatalf("get: %d %q", code, out)
	}
	out, _, code = e.jetflow("events", id)
	if code != exitOK || !strings.Contains(out, "job.submitted") || !strings.Contains(out, "job.succeeded") {
		t.Fatalf("events: %d %q", code, out)
	}
	out, _, code = e.jetflow("ls", "--state", "succeeded", "--json")
	var list struct {
		Jobs       []map[string]any `json:"jobs"`
		NextCursor *string          `json:"next_cursor"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &list) != nil || len(list.Jobs) != 1 || list.NextCursor == nil || *list.NextCursor != "" {
		t.Fatalf("ls: %d %q", code, out)
	}
}

func TestCLIExitCodes(t *testing.T) {
	e := newCLIEnv(t)
	// Failed for good: exit 1.
	if _, errs, code := e.jetflow("submit", "demo.fail", `{"times":3}`, "--max-retries", "1", "--backoff", "0", "--wait"); code != exitFailed {
		t.Fatalf("failed job: exit %d (%s)", code, errs)
	}
	// Retried to success: exit 0, attempts 3.
	out, _, code := e.jetflow("submit", "demo.fail", `{"times":2}`, "--backoff", "0s", "--wait", "--json")
	var j map[string]any
	if code != exitOK || json.Unmarshal([]byte(out), &j) != nil || j["attempts"] != float64(3) {
		t.Fatalf("retried job: exit %d %q", code, out)
	}
	// Cancelled while waiting: exit 1.
	out, _, _ = e.jetflow("submit", "demo.sleep", `{"seconds": 30}`)
	id := strings.Fields(out)[0]
	done := make(chan int, 1)
	go func() { _, _, code := e.jetflow("wait", id); done <- code }()
	testkit.WaitFor(t, 10*time.Second, func() error {
		info, err := e.cl.Get(testkit.Ctx(t), id)
		if err != nil || info.State != jetflow.Running {
			return testkit.Errorf("job %v %v", info, err)
		}
		return nil
	})
	if _, errs, code := e.jetflow("cancel", id); code != exitOK {
		t.Fatalf("cancel: %d %s", code, errs)
	}
	if code := <-done; code != exitFailed {
		t.Fatalf("wait on a cancelled job: exit %d", code)
	}
	// wait --timeout on a job that does not finish in time: exit 3.
	out, _, _ = e.jetflow("submit", "nobody.runs.this")
	if _, _, code := e.jetflow("wait", strings.Fields(out)[0], "--timeout", "200ms"); code != exitTimeout {
		t.Fatalf("wait timeout: exit %d", code)
	}
	// Usage and bad input: exit 2, nothing written.
	info, _ := testkit.StoreOf(t, e.cl).Events.Info(testkit.Ctx(t))
	before := info.State.LastSeq
	for _, args := range [][]string{
		{"submit", "bad type!"},
		{"submit", "demo.echo", "{not json"},
		{"submit", "demo.echo", "1", "2", "3"},
		{"submit", "demo.echo", "--delay", "soon"},
		{"get", "NOT-AN-ID"},
		{"get", domain.NewID()},
		{"wait", domain.NewID()},
		{"cancel", domain.NewID()},
		{"ls", "--state", "sleeping"},
	} {
		if _, errs, code := e.jetflow(args...); code != exitUsage || errs == "" {
			t.Errorf("%v: exit %d, stderr %q", args, code, errs)
		}
	}
	info, _ = testkit.StoreOf(t, e.cl).Events.Info(testkit.Ctx(t))
	if info.State.LastSeq != before {
		t.Fatalf("bad input wrote %d events", info.State.LastSeq-before)
	}
	// No server there: exit 2.
	var out2, errb bytes.Buffer
	if code := run([]string{"get", domain.NewID(), "--nats", "nats://127.0.0.1:1"}, &out2, &errb); code != exitUsage {
		t.Fatalf("connection error: exit %d", code)
	}
	if code := run([]string{"frobnicate"}, &out2, &errb); code != exitUsage {
		t.Fatalf("unknown command: exit %d", code)
	}
}

func TestCLIReplayVerifyFindsTampering(t *testing.T) {
	e := newCLIEnv(t)
	out, _, code := e.jetflow("submit", "demo.echo", `"a"`, "--wait", "--json")
	if code != exitOK {
		t.Fatalf("submit: %d", code)
	}
	var j map[string]any
	_ = json.Unmarshal([]byte(out), &j)
	id := j["id"].(string)
	if out, errs, code := e.jetflow("replay", "--verify"); code != exitOK || !strings.Contains(out, "0 differ") {
		t.Fatalf("clean verify: %d %q %q", code, out, errs)
	}
	// Tamper with the projection: the record says failed, the log says succeeded.
	ctx := testkit.Ctx(t)
	st := testkit.StoreOf(t, e.cl)
	snap, err := st.Record(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	bad := *snap.Job
	bad.State = domain.StateFailed
	b, _ := streams.EncodeJob(&bad)
	if _, err := st.KV.Update(ctx, id, b, snap.Rev); err != nil {
		t.Fatal(err)
	}
	out, _, code = e.jetflow("replay", "--verify", "--settle", "100ms")
	if code != exitFailed || !strings.Contains(out, id) || !strings.Contains(out, "state") {
		t.Fatalf("tampered verify: exit %d, %q", code, out)
	}
	out, _, code = e.jetflow("replay", "--verify", "--json", "--settle", "100ms")
	var rep struct {
		Diffs []struct {
			ID     string   `json:"id"`
			Fields []string `json:"fields"`
		} `json:"diffs"`
	}
	if code != exitFailed || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Diffs) != 1 || rep.Diffs[0].ID != id {
		t.Fatalf("tampered verify json: %d %q", code, out)
	}
	if out, _, code := e.jetflow("replay"); code != exitOK || !strings.Contains(out, "succeeded  1") {
		t.Fatalf("replay: %d %q", code, out)
	}
}

func TestCLIFanOutTree(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("submit", "demo.fanout", `{"children": 3, "child_seconds": 0}`, "--wait", "--json")
	if code != exitOK {
		t.Fatalf("fanout: exit %d %s %s", code, out, errs)
	}
	var j map[string]any
	_ = json.Unmarshal([]byte(out), &j)
	id := j["id"].(string)
	out, _, code = e.jetflow("tree", id)
	if code != exitOK || strings.Count(out, "demo.sleep succeeded") != 3 || !strings.Contains(out, "3/3 children") {
		t.Fatalf("tree: %d\n%s", code, out)
	}
	out, _, code = e.jetflow("ls", "--parent", id, "--json")
	var kids struct{ Jobs []map[string]any }
	if code != exitOK || json.Unmarshal([]byte(out), &kids) != nil || len(kids.Jobs) != 3 {
		t.Fatalf("ls --parent: %d %q", code, out)
	}
}

// A running job's progress shows in `get` (bar and percent) and its
// progress and handler events in `events --follow`, while it runs.
func TestCLIProgressAndFollowLive(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testkit.Ctx(t)
	release := make(chan struct{})
	w := jetflow.NewWorker(e.cl, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	jetflow.Register(w, "cli.steps", func(ctx context.Context, job *jetflow.Job[struct{}]) (string, error) {
		if err := job.Progress(3, 4, "resizing"); err != nil {
			return "", err
		}
		if err := job.Emit(ctx, "resize.page", "warning", "page 3 is large", map[string]any{"page": 3}); err != nil {
			return "", err
		}
		<-release
		return "done", nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	job, err := e.cl.Submit(ctx, "cli.steps", nil)
	if err != nil {
		t.Fatal(err)
	}
	follow := &testkit.SyncBuffer{}
	followed := make(chan int, 1)
	go func() {
		followed <- run([]string{"events", job.ID, "--follow", "--nats", e.url}, follow, &testkit.SyncBuffer{})
	}()
	testkit.WaitFor(t, 10*time.Second, func() error {
		out, _, code := e.jetflow("get", job.ID)
		if code != exitOK || !strings.Contains(out, "[###############.....] 3/4 (75.0%) resizing") {
			return testkit.Errorf("get exited %d:\n%s", code, out)
		}
		return nil
	})
	testkit.WaitFor(t, 10*time.Second, func() error {
		out := follow.String()
		for _, want := range []string{"job.progress", "3/4", `job.event                  resize.page [warning]`, `"page 3 is large"`, `{"page":3}`} {
			if !strings.Contains(out, want) {
				return testkit.Errorf("events --follow has not shown %q yet:\n%s", want, out)
			}
		}
		return nil
	})
	close(release)
	select {
	case code := <-followed:
		if code != exitOK {
			t.Fatalf("events --follow exited %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("events --follow did not end with the job")
	}
	if out := follow.String(); !strings.Contains(out, "job.succeeded") {
		t.Fatalf("follow output:\n%s", out)
	}
}
