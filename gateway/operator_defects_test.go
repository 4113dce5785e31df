package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
)

// Under access control, a visitor without a token learns nothing of the
// system from the pages it may see (the sign-in page, a page not found):
// no namespace name, as GET /api/v1/namespaces answers it 401 (issue 25).
func TestSignInPageRevealsNoNamespace(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	ctx := engine.WithPrincipal(e.ctx, &engine.Principal{TokenID: "setup", Name: "setup", Namespace: "*", Role: commands.RoleAdmin})
	if _, err := e.store.Submit(ctx, &commands.SubmitRequest{Type: "t.secret", Namespace: "acme-secret-customer"}); err != nil {
		t.Fatal(err)
	}
	e.as("admin", "PUT", "/api/v1/types/hidden-scope/x/y", `{}`).want(t, http.StatusCreated)
	// Signed in as an admin, the selector lists them (the index has it).
	if page := e.as("admin", "GET", "/", nil).want(t, http.StatusOK); !strings.Contains(string(page.body), "acme-secret-customer") ||
		!strings.Contains(string(page.body), "hidden-scope") {
		t.Fatalf("an admin's page lists no namespaces:\n%s", page.body)
	}
	e.as("none", "GET", "/api/v1/namespaces", nil).problem(t, http.StatusUnauthorized, "unauthenticated")
	for _, path := range []string{"/login", "/login?namespace=acme", "/no/such/page"} {
		r := e.as("none", "GET", path, nil)
		if r.status != http.StatusOK && r.status != http.StatusNotFound {
			t.Fatalf("%s: %d", path, r.status)
		}
		body := string(r.body)
		for _, name := range []string{"acme-secret-customer", "hidden-scope", "acme", "other", "ns-select", "/queues"} {
			if strings.Contains(body, name) {
				t.Fatalf("%s shows %q to a visitor without a token:\n%s", path, name, body)
			}
		}
	}
}

// A Go worker's concurrency is per queue: --concurrency 40 on three
// queues shows as 40 on each, not 120; a worker of shell jobs says so
// (kind shell), in the API and on the Workers page (issue 25).
func TestWorkersShowConcurrencyPerQueueAndKind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cl, err := jetflow.NewClient(e.ctx, testkit.Conn(t, e.srv), jetflow.ClientOptions{Name: "sdk", Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	w := jetflow.NewWorker(cl, jetflow.WorkerConfig{ID: "shell-worker", Logger: testkit.Logger(t), Concurrency: 40, Kind: domain.WorkerShell,
		Queues: map[string]jetflow.QueueConfig{"c": {Concurrency: 40}}})
	h := jetflow.HandlerFunc(func(context.Context, *jetflow.RawJob) (json.RawMessage, error) { return nil, nil })
	for _, q := range []string{"a", "b", "c"} {
		w.Handle("wv.job", h, jetflow.OnQueue(q))
	}
	if err := w.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	var list struct{ Workers []WorkerView }
	e.do("GET", "/api/v1/workers", nil).want(t, 200).json(t, &list)
	if len(list.Workers) != 1 {
		t.Fatalf("workers %+v", list.Workers)
	}
	v := list.Workers[0]
	if v.Kind != "shell" || v.Concurrency != 120 || len(v.QueueConcurrency) != 3 || v.QueueConcurrency["a"] != 40 ||
		v.QueueConcurrency["b"] != 40 || v.QueueConcurrency["c"] != 40 {
		t.Fatalf("worker %+v", v)
	}
	page := string(e.do("GET", "/workers", nil).want(t, 200).body)
	if !strings.Contains(page, `<td class="num concurrency">40 on each of 3 queues</td>`) || !strings.Contains(page, "<td>shell</td>") {
		t.Fatalf("workers page:\n%s", page)
	}
	for _, c := range []struct {
		qc   map[string]int
		n    int
		want string
	}{
		{nil, 7, "7"}, {map[string]int{"a": 5}, 5, "5"}, {map[string]int{"b": 2, "a": 5}, 7, "a: 5, b: 2"},
	} {
		if got := concurrencyText(&WorkerView{WorkerRecord: domain.WorkerRecord{Concurrency: c.n, QueueConcurrency: c.qc}}); got != c.want {
			t.Errorf("%v: %q, want %q", c.qc, got, c.want)
		}
	}
}

// A submit of a type that no live worker serves in its queue is accepted
// with a warning (no-worker), and the job's page says it; a served type
// gets none; the Types page lists free-form types with their live
// workers (issue 25).
func TestUnservedTypeIsSaid(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	e.sdkWorker("default", map[string]jetflow.HandlerFunc{
		"demo.echo": func(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return job.Payload, nil
		},
	})
	defer close(release)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if e.g.unserved(e.ctx, &projections.JobView{Type: "demo.echo", Queue: "default", Namespace: "default", State: domain.StateQueued}) != "" {
			return fmt.Errorf("the worker is not seen yet")
		}
		return nil
	})
	var typo submitAnswer
	e.do("POST", "/api/v1/jobs", `{"type":"demo.ecko"}`).want(t, http.StatusCreated).json(t, &typo)
	want := []warning{{Type: "no-worker", Detail: "no live worker serves demo.ecko in queue default: the job waits until one does (is the type spelt right? is a worker started?)"}}
	if typo.JobView == nil || typo.State != domain.StateQueued || !reflect.DeepEqual(typo.Warnings, want) {
		t.Fatalf("answer %+v %+v", typo.JobView, typo.Warnings)
	}
	var other submitAnswer
	e.do("POST", "/api/v1/jobs", `{"type":"demo.echo","queue":"elsewhere"}`).want(t, http.StatusCreated).json(t, &other)
	if len(other.Warnings) != 1 || !strings.Contains(other.Warnings[0].Detail, "demo.echo in queue elsewhere") {
		t.Fatalf("another queue: %+v", other.Warnings)
	}
	r := e.do("POST", "/api/v1/jobs", `{"type":"demo.echo"}`).want(t, http.StatusCreated)
	if strings.Contains(string(r.body), "warnings") {
		t.Fatalf("a served type: %s", r.body)
	}
	page := string(e.do("GET", "/jobs/"+typo.ID, nil).want(t, 200).body)
	if !strings.Contains(page, `<p class="warn" id="unserved">no live worker serves demo.ecko in queue default`) {
		t.Fatalf("job page:\n%s", page)
	}
	var served projections.JobView
	r.json(t, &served)
	e.waitState(served.ID, domain.StateRunning)
	if page := string(e.do("GET", "/jobs/"+served.ID, nil).want(t, 200).body); strings.Contains(page, `id="unserved"`) {
		t.Fatalf("a served job's page warns")
	}
	// Types: the free-form types, with their live workers and jobs. The
	// counts are the records'; a claim's record is written up to
	// ClaimRecordAfter (100 ms) after the log has it.
	row := func(typ string) string {
		i := strings.Index(page, `<tr data-type="`+typ+`"`)
		return page[i : i+strings.Index(page[i:], "</tr>")]
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		page = string(e.do("GET", "/types", nil).want(t, 200).body)
		if !strings.Contains(page, `<tr data-type="demo.echo"`) || !strings.Contains(row("demo.echo"), `<td class="num running">1</td>`) {
			return fmt.Errorf("demo.echo not counted running yet")
		}
		return nil
	})
	for _, want := range []string{
		`<tr data-type="demo.echo" data-deleted="false">`, `<tr data-type="demo.ecko" data-deleted="false">`,
		`>free-form</span></td>`, `<span class="badge st-paused">no worker</span>`,
	} {
		if !strings.Contains(page, want) {
			t.Fatalf("types page lacks %s:\n%s", want, page)
		}
	}
	if echo := row("demo.echo"); !strings.Contains(echo, `<td class="num live-workers" title="`) ||
		!strings.Contains(echo, `">1</td>`) || !strings.Contains(echo, `<td class="num running">1</td>`) {
		t.Fatalf("demo.echo row: %s", echo)
	}
	if ecko := row("demo.ecko"); !strings.Contains(ecko, `<td class="num live-workers" title="">0</td>`) ||
		!strings.Contains(ecko, `<td class="num queued">1</td>`) {
		t.Fatalf("demo.ecko row: %s", ecko)
	}
}

// TestQueuePageIsUnderQueues: a queue's page (drawn by the overview's
// template) marks Queues in the navigation, not Overview; the overview
// marks Overview.
func TestQueuePageIsUnderQueues(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	for path, want := range map[string]string{"/queues/default": "Queues", "/overview": "Overview"} {
		body := string(e.as("admin", "GET", path, nil).want(t, http.StatusOK).body)
		marked := regexp.MustCompile(`class="active">([A-Za-z]+)</a>`).FindAllStringSubmatch(body, -1)
		if len(marked) != 1 || marked[0][1] != want {
			t.Fatalf("%s marks %v in the navigation, want %s only", path, marked, want)
		}
	}
}
