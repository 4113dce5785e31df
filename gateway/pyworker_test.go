package gateway

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// TestPythonWorker runs examples/python-worker/worker.py (standard library
// only) against the gateway: it registers, claims, reports progress and
// outcomes, and unregisters when done.
func TestPythonWorker(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed (apt-get install -y python3): the Python worker example is not run")
	}
	e := newEnv(t)
	script, err := filepath.Abs("../examples/python-worker/worker.py")
	if err != nil {
		t.Fatal(err)
	}
	ok := e.submit(`{"type":"py.reverse","payload":{"text":"jetflow"}}`)
	bad := e.submit(`{"type":"py.fail","payload":{"n":1},"max_retries":3}`)
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, script, "--url", e.ts.URL, "--types", "py.reverse,py.fail", "--max-jobs", "2", "--wait", "5")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("worker.py: %v\n%s", err, out.String())
	}
	t.Logf("worker.py:\n%s", out.String())
	done := e.get(ok.ID)
	if done.State != domain.StateSucceeded || string(done.Result) != `{"reversed":"wolftej"}` ||
		done.Progress == nil || done.Progress.Current != 2 || done.Progress.Message != "reversed 7 characters" {
		t.Fatalf("py.reverse: %+v", done)
	}
	e.wantEvents(ok.ID, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvProgress, domain.EvProgress, domain.EvSucceeded)
	failed := e.get(bad.ID)
	if failed.State != domain.StateFailed || failed.Error == nil || failed.Error.Code != "PY_FAIL" || failed.Attempts != 1 {
		t.Fatalf("py.fail: %+v (retryable false must not be retried)", failed)
	}
	e.wantEvents(bad.ID, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvFailed)
	var list struct{ Workers []WorkerView }
	e.do("GET", "/api/v1/workers", nil).want(t, 200).json(t, &list)
	if len(list.Workers) != 0 {
		t.Fatalf("worker.py did not unregister: %+v", list.Workers)
	}
}
