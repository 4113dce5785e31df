package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
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
