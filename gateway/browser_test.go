package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
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

	b := openBrowser(t, e, exe)
	ctx, run, text := b.ctx, b.run, b.text
	run("open the dashboard", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(`#live.on`))
	job := e.submit(`{"type":"ui.gated","payload":{"from":"browser test"}}`)
	row := fmt.Sprintf(`#jobs tr[data-id="%s"]`, job.ID)
	run("see the job appear", chromedp.WaitVisible(row))
	run("see it run", chromedp.WaitVisible(row+`[data-state="running"]`))
	// The counts come in an event of their own, after the job's.
	b.until("see it counted", `document.querySelector('[data-count="running"]').textContent === "1"`)
	close(release)
	run("see it succeed without a reload", chromedp.WaitVisible(row+`[data-state="succeeded"]`))
	if cell := text(row + ` td.state`); cell != "succeeded" {
		t.Fatalf("state cell %q", cell)
	}

	// A job no worker takes yet: its priority set from its page.
	parked := e.submit(`{"type":"ui.nobody"}`)
	run("open a queued job's page", chromedp.Navigate(e.ts.URL+"/jobs/"+parked.ID),
		chromedp.WaitVisible(`#job[data-state="queued"]`), chromedp.WaitVisible(`#prio-btn`))
	run("set its priority", chromedp.SetValue(`#prio-input`, "42"), chromedp.Click(`#prio-btn`))
	b.until("see the new priority", `document.getElementById("f-priority").textContent === "42"`)
	if j := e.get(parked.ID); j.Priority != 42 {
		t.Fatalf("priority %d", j.Priority)
	}
	e.wantEvents(parked.ID, domain.EvSubmitted, domain.EvReprioritized)

	blocked := e.submit(`{"type":"ui.block"}`)
	e.waitState(blocked.ID, domain.StateRunning)
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
	if j := e.get(blocked.ID); j.State != domain.StateCancelled {
		t.Fatalf("job %s", j.State)
	}
	e.wantEvents(blocked.ID, domain.EvSubmitted, domain.EvStarted, domain.EvCancelled)
	run("back to the list", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(`#live.on`))
	shot(t, ctx, "dashboard")
}

// TestDashboardTypesAndNamespacesInBrowser: the Types page lists the
// registered types with their live workers and queued and running counts
// (kept current without a reload), schemas collapsed, deleted ones behind
// a toggle; the namespace selector filters every page, hides another
// namespace's jobs (the live ones too) and types, and is remembered.
func TestDashboardTypesAndNamespacesInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := newEnv(t)
	e.do("PUT", "/api/v1/types/default/billing/invoice",
		`{"schema": {"type": "object", "required": ["amount"]}, "description": "an invoice"}`).want(t, http.StatusCreated)
	for _, path := range []string{"@global/mail/send", "other/x/y", "default/old/gone"} {
		e.do("PUT", "/api/v1/types/"+path, `{}`).want(t, http.StatusCreated)
	}
	if _, err := e.store.Types.Delete(e.ctx, commands.TypeName{Scope: "default", Category: "old", Name: "gone"}, "test", "test", nil); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	e.sdkWorker("default", map[string]jetflow.HandlerFunc{
		"billing:invoice": func(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
			select {
			case <-release:
				return json.RawMessage(`{"paid":true}`), nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		},
	})
	running := e.submit(`{"type": "billing:invoice", "payload": {"amount": 1}}`)
	e.submit(`{"type": "billing:invoice", "payload": {"amount": 2}, "queue": "unserved"}`)
	e.waitState(running.ID, domain.StateRunning)

	b := openBrowser(t, e, exe)
	invoice := `#types tr[data-type="default:billing:invoice"]`
	b.run("open the types page", chromedp.Navigate(e.ts.URL+"/types"), chromedp.WaitVisible(invoice), chromedp.WaitVisible(`#live.on`))
	for sel, want := range map[string]string{invoice + ` td.scope`: "default", invoice + ` td.category`: "billing",
		invoice + ` td.name`: "invoice", invoice + ` td.desc`: "an invoice", invoice + ` td.status`: "active",
		`#types tr[data-type="@global:mail:send"] td.schema`: "any payload"} {
		if got := b.text(sel); got != want {
			t.Fatalf("%s: %q, want %q", sel, got, want)
		}
	}
	b.until("see its worker and jobs", `(() => { const r = document.querySelector('`+invoice+`');
		return r.querySelector("td.live-workers").textContent === "1" && r.querySelector("td.queued").textContent === "1" &&
			r.querySelector("td.running").textContent === "1"; })()`)
	b.until("see the schema collapsed", `!document.querySelector('`+invoice+` details').open`)
	b.run("open the schema", chromedp.Click(invoice+` details summary`), chromedp.WaitVisible(invoice+` details pre`))
	if schema := b.text(invoice + ` details pre`); !strings.Contains(schema, `"required": [`) || !strings.Contains(schema, `"amount"`) {
		t.Fatalf("schema %q", schema)
	}
	b.run("see another namespace's type, not a deleted one", chromedp.WaitVisible(`#types tr[data-type="other:x:y"]`),
		chromedp.WaitNotPresent(`#types tr[data-type="default:old:gone"]`))
	close(release)
	b.until("see it run no more, without a reload", `document.querySelector('`+invoice+` td.running').textContent === "0"`)
	b.until("see the schema still open", `document.querySelector('`+invoice+` details').open`)
	shot(t, b.ctx, "types")
	b.run("show deleted", chromedp.Click(`#show-deleted`),
		chromedp.WaitVisible(`#types tr[data-type="default:old:gone"][data-deleted="true"]`))
	if status := b.text(`#types tr[data-type="default:old:gone"] td.status`); status != "deleted" {
		t.Fatalf("deleted type's status %q", status)
	}

	// Jobs of two namespaces; the selector shows one.
	there := e.submit(`{"type": "ui.ns", "namespace": "billing"}`)
	here := e.submit(`{"type": "ui.ns"}`)
	rowOf := func(id string) string { return fmt.Sprintf(`#jobs tr[data-id="%s"]`, id) }
	b.run("open the jobs of every namespace", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(rowOf(there.ID)),
		chromedp.WaitVisible(rowOf(here.ID)), chromedp.WaitVisible(`#live.on`))
	choose := func(ns string) {
		t.Helper()
		b.run("choose namespace "+ns, chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById("ns-select");
			s.value = `+"`"+ns+"`"+`; s.dispatchEvent(new Event("change")); })()`),
			chromedp.WaitVisible(`body[data-namespace="`+ns+`"] #live.on`))
	}
	choose("billing")
	b.until("see the namespace in the address", `location.search === "?namespace=billing"`)
	b.run("see billing's job only", chromedp.WaitVisible(rowOf(there.ID)+` td.ns`), chromedp.WaitNotPresent(rowOf(here.ID)),
		chromedp.WaitVisible(`#live.on`))
	if total := b.text(`[data-count="total"]`); total != "1" {
		t.Fatalf("total %q in billing", total)
	}
	// Live: a job of another namespace does not come; one of this one does.
	hidden := e.submit(`{"type": "ui.ns"}`)
	shown := e.submit(`{"type": "ui.ns", "namespace": "billing"}`)
	b.run("see the new billing job", chromedp.WaitVisible(rowOf(shown.ID)))
	b.until("see it counted in billing", `document.querySelector('[data-count="total"]').textContent === "2"`)
	b.run("not see the other", chromedp.WaitNotPresent(rowOf(hidden.ID)))
	// Remembered: a page opened without ?namespace= shows billing.
	b.run("open / again", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(rowOf(shown.ID)))
	b.until("see billing remembered", `location.search === "?namespace=billing" && document.getElementById("ns-select").value === "billing"`)
	b.run("still not see the other namespace's", chromedp.WaitNotPresent(rowOf(here.ID)))
	b.run("go to the types", chromedp.Click(`header nav a[href^="/types"]`), chromedp.WaitVisible(`#types tr[data-type="@global:mail:send"]`))
	b.until("see the namespace kept", `location.pathname === "/types" && location.search === "?namespace=billing"`)
	b.run("see only the types visible from billing", chromedp.WaitNotPresent(invoice), chromedp.WaitNotPresent(`#types tr[data-type="other:x:y"]`))
	shot(t, b.ctx, "types-billing")
	choose("")
	b.run("see every namespace's types again", chromedp.WaitVisible(invoice), chromedp.WaitVisible(`#types tr[data-type="other:x:y"]`))
	b.run("open / with every namespace", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(rowOf(here.ID)), chromedp.WaitVisible(rowOf(shown.ID)))
	if loc, err := chromedp.Run(b.ctx, chromedp.Location()); err != nil || loc != e.ts.URL+"/" {
		t.Fatalf("location %q %v", loc, err)
	}
}

// browser is a headless Chromium driven by a test, with the steps that
// fail the test (and leave a screenshot) when they do not happen.
type browser struct {
	t   *testing.T
	ctx context.Context

	mu      sync.Mutex
	dialogs []string // the messages of the dialogs accepted, in order
}

// stepTimeout bounds each step of a browser test. The browser's own
// context lives as long as the test (a whole test of many steps under
// -race on a loaded machine can take minutes; a deadline for the whole
// session failed steps that were not slow themselves).
const stepTimeout = 45 * time.Second

// dialogsSeen returns the messages of the dialogs accepted so far.
func (b *browser) dialogsSeen() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.dialogs...)
}

// openBrowser starts a Chromium for the test (stopped at its end) that
// accepts confirm dialogs (cancel asks first).
func openBrowser(t *testing.T, e *env, exe string) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(e.ctx, opts...)
	t.Cleanup(cancelAlloc)
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelBrowser)
	ctx, cancel := context.WithTimeout(bctx, 8*time.Minute)
	t.Cleanup(cancel)
	b := &browser{t: t, ctx: ctx}
	if err := chromedp.Listen(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			b.mu.Lock()
			b.dialogs = append(b.dialogs, d.Message)
			b.mu.Unlock()
			go func() {
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
			}()
		}
	}); err != nil {
		t.Fatalf("start Chromium (%s): %v", exe, err)
	}
	return b
}

func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		shot(b.t, b.ctx, "failed")
		b.t.Fatalf("%s: %v", what, err)
	}
}

// clickNow finds the element sel and clicks it in one step in the page. On
// a page that re-renders live (a schedule's row, each second), the node
// chromedp.Click looked up can be replaced before it clicks ("Could not
// find node with given id").
func (b *browser) clickNow(what, sel string) {
	b.t.Helper()
	expr := `(() => { const e = document.querySelector(` + strconv.Quote(sel) + `); if (!e) return false; e.click(); return true; })()`
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
		clicked, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		cancel()
		if err != nil { // not retried: the click may have been made
			shot(b.t, b.ctx, "failed")
			b.t.Fatalf("%s: click %s: %v", what, sel, err)
		}
		if clicked {
			return
		}
		if time.Now().After(deadline) {
			shot(b.t, b.ctx, "failed")
			b.t.Fatalf("%s: %s not found to click", what, sel)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// text returns the visible text of the first element sel matches.
func (b *browser) text(sel string) string {
	b.t.Helper()
	return b.read(sel, chromedp.WaitVisible(sel), "e.innerText")
}

// attr returns an attribute of the first element sel matches ("" if it
// has none).
func (b *browser) attr(sel, name string) string {
	b.t.Helper()
	n, _ := json.Marshal(name)
	return b.read(sel, chromedp.WaitReady(sel), `e.getAttribute(`+string(n)+`)||""`)
}

// read waits for sel, then evaluates expr on e, the first element sel
// matches, found and read in one go in the page: a live page that
// re-renders the element between a query and a read (as chromedp.Text
// does them) would leave a detached node, whose text reads as "".
func (b *browser) read(sel string, wait chromedp.Action[chromedp.Void], expr string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	q, _ := json.Marshal(sel)
	js := `(function(){var e=document.querySelector(` + string(q) + `);return e&&e.isConnected?(` + expr + `):null})()`
	for {
		_, err := chromedp.Run(ctx, wait)
		var v *string
		if err == nil {
			v, err = chromedp.Run(ctx, chromedp.Evaluate[*string](js))
		}
		if err == nil && v != nil {
			return *v
		}
		if err == nil {
			err = ctx.Err()
		}
		if err != nil {
			shot(b.t, b.ctx, "failed")
			b.t.Fatalf("read %s (%s): %v", sel, expr, err)
		}
	}
}

// until waits for a JavaScript expression to be true, across the page's
// navigations (a poll in a page that navigates away is polled again in the
// next one).
func (b *browser) until(what, expr string) {
	b.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr,
			chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(time.Until(deadline))))
		if err == nil {
			return
		}
		if !navigating(err) || time.Now().After(deadline) {
			shot(b.t, b.ctx, "failed")
			b.t.Fatalf("%s (%s): %v", what, expr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// navigating reports whether err is a poll cut short by the page's
// navigation (a form submit, a reload): the document it ran in went away
// (chromedp's own error), or its execution context did before chromedp saw
// the navigation (CDP error -32000). The poll is run again on the new page.
func navigating(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "navigated or closed") ||
		strings.Contains(msg, "Cannot find context with specified id") ||
		strings.Contains(msg, "Execution context was destroyed")
}

// shot saves a full-page screenshot as a test artifact and prints its path.
func shot(t *testing.T, ctx context.Context, name string) {
	savePNG(t, ctx, name, chromedp.FullScreenshot(100))
}

// shotView saves what the window shows: a full-page screenshot resizes the
// page, which moves it under the pointer.
func shotView(t *testing.T, ctx context.Context, name string) {
	savePNG(t, ctx, name, chromedp.CaptureScreenshot())
}

func savePNG(t *testing.T, ctx context.Context, name string, capture chromedp.Action[[]byte]) {
	png, err := chromedp.Run(ctx, capture)
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

// TestDashboardSignInInBrowser: with access control on, the dashboard sends
// a browser without a token to the sign-in page; a reader token of
// namespace acme signs in (kept in a cookie scripts cannot read), and the
// jobs page, with its live updates, shows acme's jobs and not another
// namespace's; signing out goes back to the sign-in page.
func TestDashboardSignInInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := newAuthEnv(t)
	var mine, theirs struct{ ID string }
	e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "ui.mine"}).want(t, 201).json(t, &mine)
	e.as("prodB", "POST", "/api/v1/jobs", map[string]any{"type": "ui.theirs"}).want(t, 201).json(t, &theirs)
	b := openBrowser(t, e.env, exe)
	b.run("open the dashboard", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(`#token`))
	b.run("sign in with a wrong token", chromedp.SendKeys(`#token`, "jft_wrong"), chromedp.Click(`#login-submit`),
		chromedp.WaitVisible(`#login-error`))
	b.run("sign in", chromedp.SendKeys(`#token`, e.tok["readA"]), chromedp.Click(`#login-submit`),
		chromedp.WaitVisible(`#live.on`), chromedp.WaitVisible(fmt.Sprintf(`#jobs tr[data-id="%s"]`, mine.ID)))
	b.until("no other namespace's job", fmt.Sprintf(`document.querySelector('#jobs tr[data-id="%s"]') === null`, theirs.ID))
	b.until("the cookie is out of scripts' reach", `document.cookie.indexOf("jetflow_token") < 0`)
	// A job submitted now appears live: the stream took the cookie.
	var later struct{ ID string }
	e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "ui.later"}).want(t, 201).json(t, &later)
	b.run("see a new job live", chromedp.WaitVisible(fmt.Sprintf(`#jobs tr[data-id="%s"]`, later.ID)))
	b.run("sign out", chromedp.Click(`#logout`), chromedp.WaitVisible(`#token`))
	b.run("a page after signing out", chromedp.Navigate(e.ts.URL+"/queues"), chromedp.WaitVisible(`#token`))
}

// TestDashboardQuotasInBrowser: the queues page shows a queue's limits and
// pending jobs, kept current without a reload; a pending job's page says
// why it waits and where it stands, and stops saying so, without a
// reload, once it is admitted.
func TestDashboardQuotasInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := newEnv(t)
	e.do("PUT", "/api/v1/queues/lim", `{"max_running": 1}`).want(t, http.StatusOK)
	first := e.submit(`{"type": "ui.quota", "queue": "lim", "user": "ann"}`)
	e.waitState(first.ID, domain.StateQueued) // holds the slot: no worker takes it
	held := e.submit(`{"type": "ui.quota", "queue": "lim", "user": "bob"}`)

	b := openBrowser(t, e, exe)
	row := `#queues tr[data-queue="lim"]`
	b.run("open the queues page", chromedp.Navigate(e.ts.URL+"/queues"), chromedp.WaitVisible(row), chromedp.WaitVisible(`#live.on`))
	b.until("see the limits and the pending job", `(() => { const r = document.querySelector('`+row+`');
		return r.querySelector("td.maxrun").textContent === "1" && r.querySelector("td.maxuser").textContent === "—" &&
			r.querySelector("td.pending").textContent === "1" && r.querySelector("td.pending").title.includes("bob: 0 running, 1 pending"); })()`)
	e.do("PUT", "/api/v1/queues/lim", `{"max_running_per_user": 3}`).want(t, http.StatusOK)
	b.until("see the new limit without a reload", `document.querySelector('`+row+` td.maxuser').textContent === "3"`)
	shot(t, b.ctx, "queues")

	b.run("open the pending job's page", chromedp.Navigate(e.ts.URL+"/jobs/"+held.ID),
		chromedp.WaitVisible(`#job[data-state="pending"]`), chromedp.WaitVisible(`#f-hold`), chromedp.WaitVisible(`#f-pending`))
	if hold := b.text(`#f-hold-msg`); !strings.Contains(hold, "max_running") {
		t.Fatalf("hold %q", hold)
	}
	if place := b.text(`#f-pending`); place != "0 ahead" {
		t.Fatalf("pending position %q", place)
	}
	if user := b.text(`#f-user`); user != "bob" {
		t.Fatalf("user %q", user)
	}
	shot(t, b.ctx, "pending")
	e.do("PUT", "/api/v1/queues/lim", `{"max_running": 2}`).want(t, http.StatusOK)
	b.run("see it admitted without a reload", chromedp.WaitVisible(`#job[data-state="queued"]`))
	b.until("see the reason and the place gone", `!document.getElementById("f-hold") && !document.getElementById("f-pending")`)
}

// TestDashboardSchedulesInBrowser: the schedules page shows a schedule's
// ticks live, each fired one linking to its job; a schedule created
// meanwhile appears without a reload; Pause and Resume pause and resume it.
func TestDashboardSchedulesInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := newEnv(t)
	e.do("POST", "/api/v1/schedules", `{"name":"beat","every":"1s","overlap":"allow","job":{"type":"ui.beat"}}`).want(t, http.StatusCreated)

	b := openBrowser(t, e, exe)
	row := `#schedules tr[data-schedule="default/beat"]`
	b.run("open the schedules page", chromedp.Navigate(e.ts.URL+"/schedules"), chromedp.WaitVisible(row), chromedp.WaitVisible(`#live.on`))
	if timing := b.text(row + ` td.timing`); timing != "every 1s" {
		t.Fatalf("timing %q", timing)
	}
	b.until("see a tick fire, linking to its job", `!!document.querySelector('`+row+` td.runs a.outcome-fired[href^="/jobs/"]')`)
	id := strings.TrimPrefix(b.attr(row+` td.runs a.outcome-fired`, "href"), "/jobs/")
	var job struct {
		Type           string
		IdempotencyKey string `json:"idempotency_key"`
	}
	e.do("GET", "/api/v1/jobs/"+id, nil).want(t, http.StatusOK).json(t, &job)
	if job.Type != "ui.beat" || !strings.HasPrefix(job.IdempotencyKey, "schedule:beat:") {
		t.Fatalf("the linked job %s: %+v", id, job)
	}

	e.do("POST", "/api/v1/schedules?namespace=shop", `{"name":"nightly","cron":"0 3 * * *","timezone":"Europe/Berlin","job":{"type":"ui.report"}}`).
		want(t, http.StatusCreated)
	b.until("see a new schedule without a reload", `(() => { const r = document.querySelector('#schedules tr[data-schedule="shop/nightly"]');
		return !!r && r.querySelector("td.timing").textContent === "0 3 * * * (Europe/Berlin)" && !!r.querySelector("td.next time"); })()`)
	shot(t, b.ctx, "schedules")

	b.clickNow("pause it", row+` button.stoggle`)
	b.until("see it paused", `(() => { const r = document.querySelector('`+row+`');
		return r.dataset.paused === "true" && r.querySelector("td.status").textContent === "paused" && r.querySelector("td.next").textContent === "—" &&
			r.querySelector("button.stoggle").textContent === "Resume"; })()`)
	var s struct{ Paused bool }
	e.do("GET", "/api/v1/schedules/beat", nil).want(t, http.StatusOK).json(t, &s)
	if !s.Paused {
		t.Fatal("the page's Pause did not pause the schedule")
	}
	b.clickNow("resume it", row+` button.stoggle`)
	b.until("see it resumed", `document.querySelector('`+row+`').dataset.paused === "false"`)
	e.do("GET", "/api/v1/schedules/beat", nil).want(t, http.StatusOK).json(t, &s)
	if s.Paused {
		t.Fatal("the page's Resume did not resume the schedule")
	}
}
