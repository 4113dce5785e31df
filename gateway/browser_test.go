package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/streams"
)

// chromium finds a Chromium to drive, or skips the test.
func chromium(t *testing.T) string {
	for _, name := range []string{"/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium found: the dashboard's browser test needs one (Debian/Ubuntu: apt-get install -y chromium); .ci/run installs it")
	return ""
}

// artifactDir is where test artifacts (screenshots) go: $JETFLOW_ARTIFACTS,
// or jetflow-artifacts in the temp dir.
func artifactDir(t *testing.T) string {
	dir := os.Getenv("JETFLOW_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "jetflow-artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestDashboardInBrowser drives the dashboard in a real headless Chromium:
// a job submitted through the API appears live, reaches succeeded without a
// reload, and a running job is cancelled with the job page's button.
func TestDashboardInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := newEnv(t)
	release := make(chan struct{})
	cancelled := make(chan error, 1)
	e.sdkWorker("default", map[string]jetflow.HandlerFunc{
		"ui.gated": func(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
			_ = job.Progress(1, 2, "waiting for the test")
			select {
			case <-release:
				return json.RawMessage(`{"done":true}`), nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		},
		"ui.block": func(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
			<-ctx.Done()
			cancelled <- context.Cause(ctx)
			return nil, context.Cause(ctx)
		},
	})

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(e.ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 90*time.Second)
	defer cancel()
	// Confirm dialogs (cancel asks first) are accepted.
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			go func() {
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}()
		}
	}); err != nil {
		t.Fatalf("start Chromium (%s): %v", exe, err)
	}
	run := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			shot(t, ctx, "failed")
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			shot(t, ctx, "failed")
			t.Fatalf("read %s: %v", sel, err)
		}
		return s
	}

	run("open the dashboard", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(`#live.on`))
	job := e.submit(`{"type":"ui.gated","payload":{"from":"browser test"}}`)
	row := fmt.Sprintf(`#jobs tr[data-id="%s"]`, job.ID)
	run("see the job appear", chromedp.WaitVisible(row))
	run("see it run", chromedp.WaitVisible(row+`[data-state="running"]`))
	// The counts come in an event of their own, after the job's.
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`document.querySelector('[data-count="running"]').textContent === "1"`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		shot(t, ctx, "failed")
		t.Fatalf("running count %q: %v", text(`[data-count="running"]`), err)
	}
	close(release)
	run("see it succeed without a reload", chromedp.WaitVisible(row+`[data-state="succeeded"]`))
	if cell := text(row + ` td.state`); cell != "succeeded" {
		t.Fatalf("state cell %q", cell)
	}

	blocked := e.submit(`{"type":"ui.block"}`)
	e.waitState(blocked.ID, streams.StateRunning)
	run("open the job page", chromedp.Navigate(e.ts.URL+"/jobs/"+blocked.ID),
		chromedp.WaitVisible(`#job[data-state="running"]`), chromedp.WaitVisible(`#cancel-btn`))
	run("click cancel", chromedp.Click(`#cancel-btn`))
	run("see it cancelled", chromedp.WaitVisible(`#job[data-state="cancelled"]`), chromedp.WaitVisible(`#retry-btn`),
		chromedp.WaitVisible(`#events li .badge.st-cancelled`))
	if state := text(`#state`); state != "cancelled" {
		t.Fatalf("state %q", state)
	}
	select {
	case err := <-cancelled:
		if err != jetflow.ErrJobCancelled {
			t.Fatalf("handler's context cause %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not cancelled")
	}
	if j := e.get(blocked.ID); j.State != streams.StateCancelled {
		t.Fatalf("job %s", j.State)
	}
	e.wantEvents(blocked.ID, streams.EvSubmitted, streams.EvStarted, streams.EvCancelled)
	run("back to the list", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(`#live.on`))
	shot(t, ctx, "dashboard")
}

// shot saves a full-page screenshot as a test artifact and prints its path.
func shot(t *testing.T, ctx context.Context, name string) {
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Logf("screenshot: %v", err)
		return
	}
	path := filepath.Join(artifactDir(t), fmt.Sprintf("%s-%s.png", t.Name(), name))
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	fmt.Printf("dashboard screenshot: %s\n", path)
}
