package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
)

// env is what `jetflow serve` runs, in process: an embedded server, an
// engine with the gateway added as a component, and the gateway served by
// an httptest server. store is a client of its own (another writer).
type env struct {
	t     *testing.T
	srv   *server.Server
	store *engine.Store
	eng   *engine.Engine
	g     *Gateway
	ts    *httptest.Server
	ctx   context.Context
}

func newEnv(t *testing.T, tune ...func(*Config)) *env {
	t.Helper()
	srv := testkit.Server(t)
	e := &env{t: t, srv: srv, ctx: testkit.Ctx(t)}
	e.store = testkit.Store(t, testkit.Conn(t, srv), "client")
	e.eng = engine.NewEngine(testkit.Store(t, testkit.Conn(t, srv), "engine"),
		engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Log: testkit.Logger(t)})
	cfg := Config{Client: testkit.Client(t, testkit.Conn(t, srv), "gateway"), Lease: 3 * time.Second, Log: testkit.Logger(t)}
	for _, f := range tune {
		f(&cfg)
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.g = g
	e.eng.Add(g)
	e.ts = httptest.NewServer(g)
	t.Cleanup(e.ts.Close)
	if err := e.eng.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.eng.Stop(context.Background()) })
	<-g.index.Synced()
	return e
}

type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("%d %s: not JSON: %v", r.status, r.body, err)
	}
}

func (r resp) job(t *testing.T) *projections.JobView {
	t.Helper()
	var v projections.JobView
	r.json(t, &v)
	return &v
}

// do sends a request; body is a string, []byte or a value to encode.
func (e *env) do(method, path string, body any, headers ...string) resp {
	e.t.Helper()
	return e.send(http.DefaultClient, method, path, body, headers...)
}

// noRedirects is a client that answers a redirect as it is.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// doNoRedirect is do without following redirects.
func (e *env) doNoRedirect(method, path string, body any, headers ...string) resp {
	e.t.Helper()
	return e.send(noRedirects, method, path, body, headers...)
}

func (e *env) send(cl *http.Client, method, path string, body any, headers ...string) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(e.ctx, method, e.ts.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := cl.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// want checks a response's status.
func (r resp) want(t *testing.T, status int) resp {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return r
}

// problem checks that a response is a problem of the given status and type.
func (r resp) problem(t *testing.T, status int, slug string) *Problem {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q: %s", ct, r.body)
	}
	var p Problem
	r.json(t, &p)
	if p.Type != slug || p.Status != status || p.Title == "" || p.Detail == "" {
		t.Fatalf("problem %+v, want type %s status %d", p, slug, status)
	}
	return &p
}

func (e *env) submit(body any) *projections.JobView {
	e.t.Helper()
	return e.do("POST", "/api/v1/jobs", body).want(e.t, http.StatusCreated).job(e.t)
}

func (e *env) get(id string) *projections.JobView {
	e.t.Helper()
	return e.do("GET", "/api/v1/jobs/"+id, nil).want(e.t, http.StatusOK).job(e.t)
}

func (e *env) waitState(id string, want domain.State) *projections.JobView {
	e.t.Helper()
	var v *projections.JobView
	testkit.WaitFor(e.t, 20*time.Second, func() error {
		v = e.get(id)
		if v.State != want {
			return fmt.Errorf("job %s is %s, want %s", id, v.State, want)
		}
		return nil
	})
	return v
}

// eventTypes is a job's history by event type, read from the log.
func (e *env) eventTypes(id string) []string {
	e.t.Helper()
	var out []string
	err := e.store.History(e.ctx, id, 0, false, func(ev *domain.Event) error {
		out = append(out, ev.Type)
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

func (e *env) wantEvents(id string, want ...string) {
	e.t.Helper()
	got := e.eventTypes(id)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		e.t.Fatalf("events of %s:\n got %v\nwant %v", id, got, want)
	}
}

// eventCount is the number of messages in the event log.
func (e *env) eventCount() uint64 {
	e.t.Helper()
	info, err := e.store.Events.Info(e.ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// sse reads Server-Sent Events from a response body.
type sseEvent struct {
	event, id, data string
}

func readSSE(body io.Reader, out chan<- sseEvent) {
	defer close(out)
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var cur sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.data != "" {
				if cur.event == "" {
					cur.event = "message"
				}
				out <- cur
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			cur.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// openSSE opens an event stream; cancel ends it.
func (e *env) openSSE(path string, headers ...string) (<-chan sseEvent, context.CancelFunc) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(e.ctx)
	req, err := http.NewRequestWithContext(ctx, "GET", e.ts.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(res.Body)
		e.t.Fatalf("stream %s: %d %s", path, res.StatusCode, b)
	}
	ch := make(chan sseEvent, 256)
	go func() { defer res.Body.Close(); readSSE(res.Body, ch) }()
	e.t.Cleanup(cancel)
	return ch, cancel
}

// next waits for the next SSE event of one of the types.
func next(t *testing.T, ch <-chan sseEvent, types ...string) sseEvent {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("stream ended waiting for %v", types)
			}
			for _, typ := range types {
				if ev.event == typ {
					return ev
				}
			}
		case <-timeout:
			t.Fatalf("no %v event within 20s", types)
		}
	}
}
