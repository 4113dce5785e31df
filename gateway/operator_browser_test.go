package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
)

// TestOperatorPagesInBrowser drives the operator's pages in headless
// Chromium: the overview's charts (drawn from the engine's statistics),
// a queue's page, the failures page filtered by code with a bulk retry
// confirmed by its count, a failed job's attempts, a fan-out's batches one
// by one with the same counts in its header and its progress, the search
// box, and the live pause. Screenshots go to the artifacts directory.
func TestOperatorPagesInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := newEnv(t)
	e.failingWorker()
	var bad []string
	for i := 0; i < 4; i++ {
		bad = append(bad, e.submit(`{"type":"op.fail"}`).ID)
		e.submit(fmt.Sprintf(`{"type":"op.ok","payload":{"customer":%d}}`, i))
	}
	parent := e.submit(`{"type":"op.fanout"}`)
	for _, id := range bad {
		e.waitState(id, domain.StateFailed)
	}
	e.waitState(parent.ID, domain.StateFailed)
	// The statistics have the failures.
	testkit.WaitFor(t, 20*time.Second, func() error {
		var s struct{ Failed []int }
		e.do("GET", "/api/v1/stats/series?range=hour", nil).want(t, 200).json(t, &s)
		n := 0
		for _, f := range s.Failed {
			n += f
		}
		if n != 5 {
			return fmt.Errorf("%d failed in the statistics", n)
		}
		return nil
	})

	b := openBrowser(t, e, exe)
	b.run("open the overview", chromedp.Navigate(e.ts.URL+"/overview"), chromedp.WaitVisible(`#chart-throughput canvas`),
		chromedp.WaitVisible(`#chart-depth canvas`), chromedp.WaitVisible(`#chart-wait canvas`), chromedp.WaitVisible(`#chart-latency canvas`))
	b.until("see the totals", `document.querySelector("#chart-throughput .total").dataset.failed === "5" &&
		document.querySelector("#chart-throughput .total").dataset.started === "9"`)
	if pts := b.text(`#chart-throughput .total`); pts != "9 started · 4 succeeded · 5 failed" {
		t.Fatalf("totals %q", pts)
	}
	// The y axis starts at 0 and holds the 9 started.
	b.until("the y range", `/^0\.\.[0-9.]+$/.test(document.getElementById("chart-throughput").dataset.y) &&
		+document.getElementById("chart-throughput").dataset.y.split("..")[1] >= 9`)
	shot(t, b.ctx, "overview")
	b.run("a week", chromedp.Click(`#ranges a[data-range="week"]`), chromedp.WaitVisible(`#charts[data-range="week"] #chart-throughput canvas`))
	b.until("a week of hours", `document.getElementById("chart-throughput").dataset.points === "168"`)
	b.run("the queue's page", chromedp.Click(`#overview-queues tr[data-queue="default"] a`), chromedp.WaitVisible(`#queue-facts`),
		chromedp.WaitVisible(`#chart-throughput canvas`))
	b.until("its totals", `document.querySelector("#chart-throughput .total").dataset.failed === "5"`)
	shot(t, b.ctx, "queue")

	// Failures first.
	b.run("the failures", chromedp.Click(`header nav a[href^="/failures"]`), chromedp.WaitVisible(`#jobs tr[data-id="`+bad[0]+`"]`))
	if total := b.text(`#fail-total`); total != "5 failed jobs match" {
		t.Fatalf("total %q", total)
	}
	b.run("filter by code", chromedp.SetValue(`select[name="error_code"]`, "BROKEN"), chromedp.Click(`#fail-filters button[type="submit"]`),
		chromedp.WaitVisible(`#fail-total`))
	b.until("only the BROKEN ones", `document.getElementById("fail-total").textContent === "4 failed jobs match" &&
		!document.querySelector('#jobs tr[data-id="`+parent.ID+`"]')`)
	if msg := b.text(`#jobs tr[data-id="` + bad[0] + `"] td.emsg`); msg != "permanent: the printer is on fire" {
		t.Fatalf("message %q", msg)
	}
	shot(t, b.ctx, "failures")
	b.run("retry them all", chromedp.Click(`#bulk-retry`))
	// The page reloads a moment after the operation ended: its progress is
	// read in the same poll that sees it done.
	b.until("see it done", `document.getElementById("bulk-progress").dataset.state === "done" &&
		document.querySelector("#bulk-progress .bulk-text").textContent === "4 retried, 0 skipped, 0 failed of 4 (done)"`)
	shot(t, b.ctx, "bulk-retried")
	if d := b.dialogsSeen(); len(d) != 1 || d[0] != "Retry 4 jobs that this filter selects?" {
		t.Fatalf("the confirmation said %q", d)
	}
	// Each failed job was retried once: a new job with retry_of.
	var l jobList
	e.do("GET", "/api/v1/jobs?type=op.fail&limit=100", nil).want(t, 200).json(t, &l)
	retries := map[string]int{}
	for _, j := range l.Jobs {
		retries[j.RetryOf]++
	}
	for _, id := range bad {
		if retries[id] != 1 {
			t.Fatalf("job %s retried %d times (%d op.fail jobs)", id, retries[id], len(l.Jobs))
		}
	}

	// A failed job's attempts, a fan-out's batches.
	b.run("a failed job", chromedp.Navigate(e.ts.URL+"/jobs/"+bad[0]), chromedp.WaitVisible(`#attempts tr[data-attempt="1"]`))
	b.run("the fan-out", chromedp.Navigate(e.ts.URL+"/jobs/"+parent.ID), chromedp.WaitVisible(`#pieces-table tr[data-piece="6"]`))
	if c := b.text(`#fanout-counts`); c != "6/6 batches finished · 4 succeeded · 2 failed · 0 cancelled" {
		t.Fatalf("counts %q", c)
	}
	b.clickNow("only the failed batches", `#pieces .piece-filter a[data-state="failed"]`) // the pieces re-render live
	b.run("only the failed batches",
		chromedp.WaitNotPresent(`#pieces-table tr[data-piece="1"]`), chromedp.WaitVisible(`#pieces-table tr[data-piece="5"]`))
	if msg := b.text(`#pieces-table tr[data-piece="2"] td.emsg`); !strings.Contains(msg, "batch 2 is broken") {
		t.Fatalf("batch 2: %q", msg)
	}
	shot(t, b.ctx, "fanout-pieces")
	// Retry only its failed batches: the broken two fail again, the four
	// others are carried over.
	b.run("retry the failed batches", chromedp.Click(`#retry-failed-btn`),
		chromedp.WaitVisible(`#job[data-state="failed"]:not([data-id="`+parent.ID+`"])`))
	again := b.attr(`#job`, "data-id")
	var rj struct {
		RetryOf      string `json:"retry_of"`
		FailedPieces bool   `json:"failed_pieces"`
	}
	e.do("GET", "/api/v1/jobs/"+again, nil).want(t, 200).json(t, &rj)
	if rj.RetryOf != parent.ID || !rj.FailedPieces {
		t.Fatalf("the retry %s: %+v", again, rj)
	}
	b.run("its batches", chromedp.WaitVisible(`#pieces-table tr[data-piece="6"]`))
	if c := b.text(`#fanout-counts`); c != "6/6 batches finished · 4 succeeded · 2 failed · 0 cancelled" {
		t.Fatalf("counts of the retry %q", c)
	}
	if f := b.text(`#f-failed-pieces`); f != "(its failed pieces only)" {
		t.Fatalf("retry of: %q", f)
	}
	if msg := b.text(`#pieces-table tr[data-piece="1"] td.emsg`); msg != "carried over from "+parent.ID {
		t.Fatalf("batch 1 of the retry: %q", msg)
	}
	if msg := b.text(`#pieces-table tr[data-piece="5"] td.emsg`); !strings.Contains(msg, "batch 5 is broken") {
		t.Fatalf("batch 5 of the retry: %q", msg)
	}
	shot(t, b.ctx, "fanout-retried")

	// Search, and the live pause.
	b.run("search a payload", chromedp.Navigate(e.ts.URL+"/?q=customer%3D2"), chromedp.WaitVisible(`#jobs tbody tr`))
	if n := b.text(`#jobs tbody`); strings.Count(n, "op.ok") != 1 {
		t.Fatalf("search rows %q", n)
	}
	b.run("the jobs", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(`#live.on`))
	b.run("pause", chromedp.Click(`#live-pause`), chromedp.WaitVisible(`#live.held`))
	held := e.submit(`{"type":"op.none","queue":"held"}`)
	b.until("hold it", `document.getElementById("live-pause").textContent.startsWith("Resume (")`)
	b.run("not shown while paused", chromedp.WaitNotPresent(`#jobs tr[data-id="`+held.ID+`"]`))
	shot(t, b.ctx, "paused")
	b.run("resume", chromedp.Click(`#live-pause`), chromedp.WaitVisible(`#jobs tr[data-id="`+held.ID+`"]`), chromedp.WaitVisible(`#live.on`))
}

// A workflow's page draws its steps as a graph, a column per layer, a line
// per dependency, each step in its status and linking to its job, and
// follows them live until the workflow ends.
func TestWorkflowGraphInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := newEnv(t)
	e.failingWorker()
	body := `{"name":"graph","steps":[
		{"name":"a","type":"op.later"},
		{"name":"b","type":"op.ok","depends_on":["a"]},
		{"name":"c","type":"op.ok","depends_on":["a"]},
		{"name":"d","type":"op.fail","depends_on":["b","c"],"max_retries":0}]}`
	var c projections.WorkflowCreated
	e.do("POST", "/api/v1/workflows", body).want(t, http.StatusCreated).json(t, &c)

	b := openBrowser(t, e, exe)
	b.run("the workflow's page", chromedp.Navigate(e.ts.URL+"/jobs/"+c.ID),
		chromedp.WaitVisible(`#wf-graph .wf-step[data-step="a"][data-status="queued"]`))
	if n := b.text(`#wf-graph .wf-step[data-step="d"] .wf-status`); n != "pending" {
		t.Fatalf("d is %q", n)
	}
	// a's worker comes: the page follows the steps to the workflow's end.
	cl, err := jetflow.NewClient(e.ctx, testkit.Conn(t, e.srv), jetflow.ClientOptions{Name: "later", Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	w := jetflow.NewWorker(cl, jetflow.WorkerConfig{Logger: testkit.Logger(t), ShutdownGrace: time.Second})
	w.Handle("op.later", jetflow.HandlerFunc(func(context.Context, *jetflow.RawJob) (json.RawMessage, error) { return json.RawMessage(`1`), nil }))
	if err := w.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	b.run("live to the end", chromedp.WaitVisible(`#workflow[data-state="failed"]`),
		chromedp.WaitVisible(`#wf-graph .wf-step[data-step="d"][data-status="failed"]`))
	for _, s := range []string{"a", "b", "c"} {
		if st := b.text(`#wf-graph .wf-step[data-step="` + s + `"] .wf-status`); st != "succeeded" {
			t.Fatalf("step %s is %q", s, st)
		}
	}
	b.until("four lines, one per dependency", `document.querySelectorAll("#wf-graph svg path").length === 4 &&
		!!document.querySelector('#wf-graph path[data-from="b"][data-to="d"]') && !!document.querySelector('#wf-graph path[data-from="a"][data-to="c"]')`)
	// b and c side by side in the second column, d in the third.
	b.until("the layers", `(() => { const x = n => document.querySelector('#wf-graph .wf-step[data-step="'+n+'"]').offsetLeft;
		return x("a") < x("b") && x("b") === x("c") && x("c") < x("d"); })()`)
	if got := b.text(`#wf-counts`); !strings.HasPrefix(got, "4 steps") || !strings.Contains(got, "3 succeeded") || !strings.Contains(got, "1 failed") {
		t.Fatalf("counts %q", got)
	}
	shot(t, b.ctx, "workflow-graph")
	// A workflow's page has no batches table and no retry of failed
	// pieces: its Retry resumes it from the failed step.
	b.until("no pieces table, no retry of pieces", `!document.getElementById("pieces") && document.getElementById("retry-failed-btn").hidden &&
		!document.getElementById("progress-wrap").offsetParent`)
	b.run("resume it", chromedp.Click(`#retry-btn`), chromedp.WaitVisible(`#job:not([data-id="`+c.ID+`"]) #wf-graph`),
		chromedp.WaitVisible(`#workflow[data-state="failed"] #wf-graph .wf-step[data-step="d"][data-status="failed"]`))
	if st := b.text(`#wf-graph .wf-step[data-step="a"] .wf-status`); st != "succeeded (carried)" {
		t.Fatalf("a in the resumed run is %q", st)
	}
	b.clickNow("a step's job", `#wf-graph .wf-step[data-step="d"]`) // the graph re-renders live
	b.run("a step's job", chromedp.WaitVisible(`#job[data-state="failed"] #f-attempts`))
}

// TestLiveRowsStillAndOlderInBrowser: while the pointer is on the list of
// jobs its rows do not move or change (a new job and a cancel are held,
// counted in the page), they are applied the moment the pointer leaves; a
// list longer than a page links to the older jobs, whose page holds the
// rest exactly once.
func TestLiveRowsStillAndOlderInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := newEnv(t)
	b := openBrowser(t, e, exe)
	// Before any job: every chart from 0 to 1 (not a crowd of labels over
	// a range of zero height).
	b.run("the empty overview", chromedp.Navigate(e.ts.URL+"/overview"), chromedp.WaitVisible(`#chart-wait canvas`))
	b.until("empty charts from 0 to 1", `["throughput", "depth", "wait", "latency"].every(function (n) {
		return document.getElementById("chart-" + n).dataset.y === "0..1"; })`)
	shot(t, b.ctx, "empty-overview")
	var all []string
	for i := 0; i < defaultPageSize+10; i++ {
		all = append(all, e.submit(`{"type":"op.idle","queue":"still"}`).ID)
	}
	b.run("open the jobs", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(`#live.on`), chromedp.WaitVisible(`#older`))
	first := b.rowIDs()
	if len(first) != defaultPageSize || first[0] != all[len(all)-1] {
		t.Fatalf("first page: %d rows, first %v (newest %s)", len(first), first[:1], all[len(all)-1])
	}

	// The pointer on a row: nothing moves.
	box, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]float64](`(function(){var r=document.querySelector("#jobs tbody tr:nth-child(3)").getBoundingClientRect();return [r.x+r.width/2,r.y+r.height/2]})()`))
	if err != nil {
		t.Fatal(err)
	}
	b.run("point at a row", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, box[0], box[1]), chromedp.WaitVisible(`#live.held`))
	fresh := e.submit(`{"type":"op.idle","queue":"still"}`)
	victim := first[2]
	e.do("POST", "/api/v1/jobs/"+victim+"/cancel", map[string]any{"reason": "r"}).want(t, 200)
	b.until("both held", `jetflowHeld().indexOf("job:`+victim+`:cancelled") >= 0 &&
		jetflowHeld().some(function (h) { return h.indexOf("job:`+fresh.ID+`:") === 0; })`)
	if ids := b.rowIDs(); strings.Join(ids, ",") != strings.Join(first, ",") {
		t.Fatalf("rows moved under the pointer: %v", ids[:3])
	}
	if st := b.attr(`#jobs tr[data-id="`+victim+`"]`, "data-state"); st != "queued" {
		t.Fatalf("the row under the pointer changed to %q", st)
	}
	shotView(t, b.ctx, "held-under-pointer")
	b.until("still held after the screenshot", `jetflowHeld().indexOf("job:`+victim+`:cancelled") >= 0`)

	// The pointer leaves: both are applied at once.
	b.run("leave the list", chromedp.MouseEvent(input.DispatchMouseEventTypeMouseMoved, 5, 5), chromedp.WaitVisible(`#live.on`),
		chromedp.WaitVisible(`#jobs tr[data-id="`+fresh.ID+`"]`), chromedp.WaitVisible(`#jobs tr[data-id="`+victim+`"][data-state="cancelled"]`))
	if ids := b.rowIDs(); ids[0] != fresh.ID {
		t.Fatalf("the new job is not first: %v", ids[:2])
	}
	if h := b.attr(`body`, "data-held"); h != "0" {
		t.Fatalf("held after leaving: %q", h)
	}

	// Older: the rest, once each.
	all = append(all, fresh.ID)
	b.run("the newest page again", chromedp.Navigate(e.ts.URL+"/"), chromedp.WaitVisible(`#older`))
	first = b.rowIDs()
	b.run("older", chromedp.Click(`#older`), chromedp.WaitVisible(`nav.pager a[href="/"]`))
	older := b.rowIDs()
	if len(first) != defaultPageSize || len(older) != len(all)-defaultPageSize {
		t.Fatalf("pages of %d and %d rows for %d jobs", len(first), len(older), len(all))
	}
	seen := map[string]int{}
	for _, id := range append(first, older...) {
		seen[id]++
	}
	for _, id := range all {
		if seen[id] != 1 {
			t.Fatalf("job %s is on %d pages", id, seen[id])
		}
	}
	if n, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll("#older").length`)); err != nil || n != 0 {
		t.Fatalf("an Older link on the last page (%d, %v)", n, err)
	}
}

// rowIDs returns the ids of the jobs list's rows, top to bottom.
func (b *browser) rowIDs() []string {
	b.t.Helper()
	ids, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll("#jobs tbody tr")).map(function(r){return r.dataset.id})`))
	if err != nil {
		b.t.Fatal(err)
	}
	return ids
}

// The failures page's "Retry failed pieces" retries, for every fan-out the
// filter selects, only its failed batches, after a confirmation that says
// so, and skips the failed jobs that did not fan out.
func TestBulkRetryFailedPiecesInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := newEnv(t)
	fan := e.failedFanOutAndJob()
	b := openBrowser(t, e, exe)
	b.run("the failures", chromedp.Navigate(e.ts.URL+"/failures"), chromedp.WaitVisible(`#jobs tr[data-id="`+fan+`"]`))
	b.run("retry the failed pieces", chromedp.Click(`#bulk-retry-pieces`))
	b.until("see it done", `document.getElementById("bulk-progress").dataset.state === "done" &&
		document.querySelector("#bulk-progress .bulk-text").textContent === "1 retried, 1 skipped, 0 failed of 2 (done)"`)
	shot(t, b.ctx, "bulk-retried-pieces")
	if d := b.dialogsSeen(); len(d) != 1 || d[0] != "Retry the failed pieces of the fan-outs among 2 jobs that this filter selects? The other jobs are skipped." {
		t.Fatalf("the confirmation said %q", d)
	}
	e.failedPiecesRetryOf(fan)
}
