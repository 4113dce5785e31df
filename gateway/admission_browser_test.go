package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/jetflow/jetflow/internal/domain"
)

// TestDashboardKeyAndRateInBrowser: the queues page shows a queue's limit
// per key and its rate limit, kept current without a reload; a job
// waiting for its key's slot says so (reason key), and stops saying so,
// without a reload, once a larger limit admits it.
func TestDashboardKeyAndRateInBrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	e := newEnv(t)
	e.do("PUT", "/api/v1/queues/kr", `{"max_running_per_key": 1}`).want(t, http.StatusOK)
	first := e.submit(`{"type": "ui.key", "queue": "kr", "concurrency_key": "cust-7"}`)
	e.waitState(first.ID, domain.StateQueued) // holds the key's slot: no worker takes it
	held := e.submit(`{"type": "ui.key", "queue": "kr", "concurrency_key": "cust-7"}`)

	b := openBrowser(t, e, exe)
	row := `#queues tr[data-queue="kr"]`
	b.run("open the queues page", chromedp.Navigate(e.ts.URL+"/queues"), chromedp.WaitVisible(row), chromedp.WaitVisible(`#live.on`))
	b.until("see the limit per key", `document.querySelector('`+row+` td.maxkey').textContent === "1" &&
		document.querySelector('`+row+` td.rate').textContent === "—"`)
	e.do("PUT", "/api/v1/queues/kr", `{"rate_limit": 100, "rate_period": "90s", "rate_key": "concurrency_key"}`).want(t, http.StatusOK)
	b.until("see the rate limit without a reload", `document.querySelector('`+row+` td.rate').textContent === "100 / 1m30s per concurrency_key"`)
	b.until("see no priorities", `document.querySelector('`+row+` td.prio').textContent === "—"`)
	e.do("PUT", "/api/v1/queues/kr", `{"priorities": true, "max_queued": 50}`).want(t, http.StatusOK)
	b.until("see the priorities without a reload", `document.querySelector('`+row+` td.prio').textContent === "yes, max_queued 50"`)
	shot(t, b.ctx, "queues-key-rate")

	b.run("open the held job's page", chromedp.Navigate(e.ts.URL+"/jobs/"+held.ID),
		chromedp.WaitVisible(`#job[data-state="pending"]`), chromedp.WaitVisible(`#f-hold`))
	if r := b.text(`#f-hold-reason`); r != "key" {
		t.Fatalf("reason %q", r)
	}
	if msg := b.text(`#f-hold-msg`); !strings.Contains(msg, `key "cust-7"`) {
		t.Fatalf("hold %q", msg)
	}
	if k := b.text(`#f-ckey`); k != "cust-7" {
		t.Fatalf("concurrency key %q", k)
	}
	shot(t, b.ctx, "pending-key")
	e.do("PUT", "/api/v1/queues/kr", `{"max_running_per_key": 2}`).want(t, http.StatusOK)
	b.run("see it admitted without a reload", chromedp.WaitVisible(`#job[data-state="queued"]`))
	b.until("see the reason gone", `!document.getElementById("f-hold")`)
}
