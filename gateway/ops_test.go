package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// sdkWorker runs Go handlers in process, as `serve --demo` does.
func (e *env) sdkWorker(queue string, handlers map[string]jetflow.HandlerFunc) *jetflow.Client {
	e.t.Helper()
	cl, err := jetflow.NewClient(e.ctx, testkit.Conn(e.t, e.srv), jetflow.ClientOptions{Name: "sdk", Logger: testkit.Logger(e.t)})
	if err != nil {
		e.t.Fatal(err)
	}
	w := jetflow.NewWorker(cl, jetflow.WorkerConfig{Logger: testkit.Logger(e.t), ShutdownGrace: time.Second})
	for typ, h := range handlers {
		w.Handle(typ, h, jetflow.OnQueue(queue))
	}
	if err := w.Start(e.ctx); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { w.Stop(context.Background()) })
	return cl
}

// metric reads one sample from the gateway's registry: a counter's or
// gauge's value, or a histogram's count.
func (e *env) metric(name string, labels ...string) (float64, bool) {
	fams, err := e.g.metrics.reg.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				return m.GetCounter().GetValue(), true
			case dto.MetricType_GAUGE:
				return m.GetGauge().GetValue(), true
			case dto.MetricType_HISTOGRAM:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	// The remote worker does not beat: a lease longer than the test keeps
	// it live however long the metrics below take to converge.
	e := newEnv(t, func(c *Config) { c.Lease = time.Minute })
	e.do("GET", "/healthz", nil).want(t, 200)
	var ready struct {
		Status string
		Checks map[string]string
	}
	e.do("GET", "/readyz", nil).want(t, 200).json(t, &ready)
	if ready.Status != "ready" || ready.Checks["nats"] != "ok" || ready.Checks["events_stream"] != "ok" || ready.Checks["index"] != "ok" {
		t.Fatalf("readyz %+v", ready)
	}
	e.sdkWorker("mq", map[string]jetflow.HandlerFunc{
		"m.ok": func(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) { return job.Payload, nil },
	})
	e.register(`{"name":"remote","types":["m.remote"],"queues":["mq"]}`)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, e.submit(`{"type":"m.ok","queue":"mq","payload":1}`).ID)
	}
	cancelled := e.submit(`{"type":"m.remote","queue":"mq"}`).ID
	e.do("POST", "/api/v1/jobs/"+cancelled+"/cancel", nil).want(t, 200)
	for _, id := range ids {
		e.waitState(id, domain.StateSucceeded)
	}
	want := []struct {
		name   string
		labels []string
		value  float64
	}{
		{"jetflow_jobs_submitted_total", []string{"queue", "mq"}, 4},
		{"jetflow_jobs_finished_total", []string{"queue", "mq", "state", "succeeded"}, 3},
		{"jetflow_jobs_finished_total", []string{"queue", "mq", "state", "cancelled"}, 1},
		{"jetflow_events_total", []string{"type", "job.submitted"}, 4},
		{"jetflow_events_total", []string{"type", "job.started"}, 3},
		{"jetflow_job_queue_wait_seconds", []string{"queue", "mq"}, 3},
		{"jetflow_job_run_seconds", []string{"queue", "mq", "outcome", "succeeded"}, 3},
		{"jetflow_job_latency_seconds", []string{"queue", "mq", "state", "succeeded"}, 3},
		{"jetflow_job_latency_seconds", []string{"queue", "mq", "state", "cancelled"}, 1},
		{"jetflow_jobs", []string{"state", "succeeded"}, 3},
		{"jetflow_jobs", []string{"state", "cancelled"}, 1},
		{"jetflow_jobs", []string{"state", "running"}, 0},
		{"jetflow_queue_depth", []string{"queue", "mq"}, 0},
		{"jetflow_queue_paused", []string{"queue", "mq"}, 0},
		{"jetflow_jobs_running", []string{"queue", "mq"}, 0},
		{"jetflow_workers", []string{"live", "true"}, 2}, // the SDK worker and the HTTP one
		{"jetflow_workers", []string{"live", "false"}, 0},
		{"jetflow_consumer_lag_events", []string{"consumer", "projector"}, 0},
		{"jetflow_consumer_lag_events", []string{"consumer", "gateway_metrics"}, 0},
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		for _, w := range want {
			got, ok := e.metric(w.name, w.labels...)
			if !ok || got != w.value {
				return fmt.Errorf("%s%v = %v (found %v), want %v", w.name, w.labels, got, ok, w.value)
			}
		}
		return nil
	})
	r := e.do("GET", "/metrics", nil).want(t, 200)
	for _, s := range []string{`jetflow_jobs_submitted_total{queue="mq"} 4`, `jetflow_job_run_seconds_bucket{outcome="succeeded",queue="mq",le="+Inf"} 3`,
		`jetflow_event_log_last_sequence`, "go_goroutines"} {
		if !strings.Contains(string(r.body), s) {
			t.Fatalf("/metrics has no %q", s)
		}
	}
	// A consumer that lags shows it: pause the projector's progress by
	// stopping the engine's projector, then append.
	e.eng.Projector.Stop(e.ctx)
	e.submit(`{"type":"m.remote","queue":"mq"}`)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if lag, _ := e.metric("jetflow_consumer_lag_events", "consumer", "projector"); lag < 1 {
			return fmt.Errorf("projector lag %v", lag)
		}
		return nil
	})
}

func TestDashboardPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	parent := e.submit(`{"type":"dash.parent","payload":{"a":"<b>bold</b>"}}`)
	kid := e.submit(map[string]any{"type": "dash.kid", "parent": parent.ID, "queue": "kids"})
	e.register(`{"name":"dash-worker","types":["dash.kid"],"queues":["kids"]}`)
	page := func(path string, status int, contains ...string) string {
		t.Helper()
		r := e.do("GET", path, nil)
		if r.status != status || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
			t.Fatalf("%s: %d %s", path, r.status, r.header.Get("Content-Type"))
		}
		for _, c := range contains {
			if !strings.Contains(string(r.body), c) {
				t.Fatalf("%s has no %q", path, c)
			}
		}
		return string(r.body)
	}
	page("/", 200, parent.ID, kid.ID, `data-count="queued">2<`, "dash.parent")
	page("/?state=queued&queue=kids", 200, kid.ID)
	if body := page("/?queue=kids", 200); strings.Contains(body, `data-id="`+parent.ID) {
		t.Fatal("queue filter shows a job of another queue")
	}
	page("/?cursor=nonsense", 400, "cursor")
	body := page("/jobs/"+parent.ID, 200, "job.submitted", "Children", kid.ID, `id="cancel-btn"`)
	if strings.Contains(body, "<b>bold</b>") {
		t.Fatal("payload is not escaped")
	}
	page("/queues", 200, "kids", "Pause")
	page("/workers", 200, "dash-worker")
	page("/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", 404, "Not found")
	page("/jobs/nope", 404, "Not found")
	page("/no/such/page", 404, "Not found")
	for _, asset := range []string{"/static/app.js", "/static/app.css"} {
		if r := e.do("GET", asset, nil); r.status != 200 || len(r.body) < 1000 {
			t.Fatalf("%s: %d, %d bytes", asset, r.status, len(r.body))
		}
	}
	e.do("POST", "/", nil).want(t, http.StatusMethodNotAllowed)
}

// Queue depth counts the items of a type no worker ever consumed, and a
// filtered consumer of the log (the fan-in counter) does not lag by the
// events it does not take.
func TestQueueDepthAndConsumerLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.submit(`{"type":"nobody.runs","queue":"lonely"}`).ID
	for i := 0; i < 5; i++ { // events the fan-in consumer does not take
		e.submit(`{"type":"nobody.runs","queue":"other"}`)
	}
	var qs struct{ Queues []QueueInfo }
	e.do("GET", "/api/v1/queues", nil).want(t, 200).json(t, &qs)
	var lonely *QueueInfo
	for i := range qs.Queues {
		if qs.Queues[i].Name == "lonely" {
			lonely = &qs.Queues[i]
		}
	}
	if lonely == nil || lonely.Depth != 1 || lonely.Held != 0 || lonely.Jobs[domain.StateQueued] != 1 {
		t.Fatalf("queues %+v", qs.Queues)
	}
	if pos := e.get(id).QueuePosition; pos == nil || *pos != 0 {
		t.Fatalf("queue position %v", pos)
	}
	testkit.WaitFor(t, 10*time.Second, func() error {
		for _, w := range []struct {
			name   string
			labels []string
			value  float64
		}{
			{"jetflow_queue_depth", []string{"queue", "lonely"}, 1},
			{"jetflow_queue_depth", []string{"queue", "other"}, 5},
			{"jetflow_consumer_lag_events", []string{"consumer", "fanin"}, 0},
			{"jetflow_consumer_lag_events", []string{"consumer", "projector"}, 0},
		} {
			if got, ok := e.metric(w.name, w.labels...); !ok || got != w.value {
				return fmt.Errorf("%s%v = %v (found %v), want %v", w.name, w.labels, got, ok, w.value)
			}
		}
		return nil
	})
}

// The worker registry is read once per sharedTTL for all who poll it (the
// streams of every open workers page, metrics scrapes), not once each.
func TestWorkerRegistryReadShared(t *testing.T) {
	t.Parallel()
	// The worker does not beat: a lease longer than the test keeps it
	// live, so the scrapes below count it the same each time.
	e := newEnv(t, func(c *Config) { c.Lease = time.Minute })
	wk := e.register(`{"name":"w","types":["x"]}`)
	start := e.g.workers.lists.Load()
	t0 := time.Now()
	var chans []<-chan sseEvent
	for i := 0; i < 6; i++ {
		ch, _ := e.openSSE("/api/v1/stream?with=workers")
		chans = append(chans, ch)
	}
	for round := 0; round < 2; round++ {
		for _, ch := range chans {
			var ws []WorkerView
			if err := json.Unmarshal([]byte(next(t, ch, "workers").data), &ws); err != nil || len(ws) != 1 || ws[0].ID != wk {
				t.Fatalf("workers event: %v %+v", err, ws)
			}
		}
		for i := 0; i < 5; i++ {
			live, okLive := e.metric("jetflow_workers", "live", "true")
			stale, okStale := e.metric("jetflow_workers", "live", "false")
			if !okLive || !okStale || live != 1 || stale != 0 {
				t.Fatalf("jetflow_workers live %v (%v), not live %v (%v)", live, okLive, stale, okStale)
			}
		}
	}
	reads, took := e.g.workers.lists.Load()-start, time.Since(t0)
	if limit := int64(took/sharedTTL) + 2; reads > limit {
		t.Fatalf("%d reads of the registry in %s for 6 streams and 10 scrapes; want at most %d", reads, took, limit)
	}
}

// Unsafe requests a browser sends from a page of another origin are
// refused (CSRF); same-origin requests (the dashboard's), clients that are
// not browsers (no Origin) and safe methods are served.
func TestCrossOriginRequestsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.TrustedOrigins = []string{"https://ops.example.com"} })
	id := e.submit(`{"type":"nobody.runs.this"}`).ID
	host := strings.TrimPrefix(e.ts.URL, "http://")
	before := e.eventCount()
	for _, h := range [][]string{
		{"Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "http://evil.example"},
		{"Origin", "null"},
		{"Origin", "http://127.0.0.1:1"},
	} {
		e.do("POST", "/api/v1/jobs/"+id+"/cancel", "", h...).problem(t, 403, problemCrossOrigin)
		e.do("POST", "/api/v1/jobs", `{"type":"x"}`, h...).problem(t, 403, problemCrossOrigin)
		e.do("DELETE", "/api/v1/jobs/"+id, nil, h...).problem(t, 403, problemCrossOrigin)
		e.do("POST", "/api/v1/queues/default/pause", nil, h...).problem(t, 403, problemCrossOrigin)
		e.do("GET", "/api/v1/jobs/"+id, nil, h...).want(t, 200) // safe: served
	}
	if n := e.eventCount() - before; n != 0 || e.get(id).State != domain.StateQueued {
		t.Fatalf("refused requests wrote %d events", n)
	}
	// Same origin (the dashboard's fetch), a trusted origin, and clients
	// that send no Origin (curl, the Python worker) are served.
	e.do("POST", "/api/v1/jobs", `{"type":"x"}`, "Sec-Fetch-Site", "same-origin", "Origin", e.ts.URL).want(t, 201)
	e.do("POST", "/api/v1/jobs", `{"type":"x"}`, "Origin", "http://"+host).want(t, 201)
	e.do("POST", "/api/v1/jobs", `{"type":"x"}`, "Origin", "https://ops.example.com", "Sec-Fetch-Site", "cross-site").want(t, 201)
	e.do("POST", "/api/v1/jobs/"+id+"/cancel", nil).want(t, 200)
	if _, err := New(Config{Client: testkit.Client(t, testkit.Conn(t, e.srv), "gateway-3"), TrustedOrigins: []string{"not an origin"}}); err == nil {
		t.Fatal("a bad trusted origin was accepted")
	}
}

// A progress bar is shown while the job can still move, in the list and
// on the job's page; a finished job's last report (50% of a job that then
// succeeded) is not.
func TestDashboardProgressOnlyWhileLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["dash.progress"]}`)
	id := e.submit(`{"type":"dash.progress"}`).ID
	e.claimJob(wk, id)
	e.patch(id, map[string]any{"worker_id": wk, "state": "running"}).want(t, 200)
	e.patch(id, map[string]any{"worker_id": wk, "progress": map[string]any{"current": 1, "total": 2}}).want(t, 200)
	html := func(path string) string {
		t.Helper()
		r := e.do("GET", path, nil).want(t, 200)
		return string(r.body)
	}
	row := func(body string) string {
		t.Helper()
		i := strings.Index(body, `<tr data-id="`+id)
		if i < 0 {
			t.Fatalf("no row of %s", id)
		}
		end := strings.Index(body[i:], "</tr>")
		return body[i : i+end]
	}
	if !strings.Contains(row(html("/")), `<progress class="small" max="100" value="50"`) {
		t.Fatalf("running job's row has no progress bar: %s", row(html("/")))
	}
	if page := html("/jobs/" + id); !strings.Contains(page, `<div class="progress-wrap" id="progress-wrap" >`) {
		t.Fatal("running job's page hides its progress bar")
	}
	e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, 200)
	if r := row(html("/")); strings.Contains(r, "<progress") {
		t.Fatalf("succeeded job's row keeps its progress bar: %s", r)
	}
	if page := html("/jobs/" + id); !strings.Contains(page, `<div class="progress-wrap" id="progress-wrap" hidden>`) {
		t.Fatal("succeeded job's page shows its stale progress bar")
	}
}

// Consumers made and deleted while a scrape lists the event log's
// consumers (live pages' ordered consumers come and go) make the list
// come in more than one page, where a durable consumer can stand twice; a
// scrape reports it once (a sample twice fails the whole scrape).
func TestScrapeWhileConsumersComeAndGo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	js, err := jetstream.New(testkit.Conn(t, e.srv))
	if err != nil {
		t.Fatal(err)
	}
	events, err := js.Stream(e.ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(e.ctx)
	churned := make(chan int, 1) // not left blocked if the test fails first
	go func() {
		n := 0
		defer func() { churned <- n }()
		for ctx.Err() == nil {
			c, err := events.CreateConsumer(ctx, jetstream.ConsumerConfig{AckPolicy: jetstream.AckNonePolicy, InactiveThreshold: time.Minute})
			if err != nil {
				continue
			}
			if events.DeleteConsumer(ctx, c.CachedInfo().Name) == nil {
				n++
			}
		}
	}()
	for range 200 {
		// e.metric fails the test if the registry cannot gather.
		if _, ok := e.metric("jetflow_consumer_lag_events", "consumer", "projector"); !ok {
			t.Fatal("no lag sample of the projector")
		}
	}
	stop()
	if n := <-churned; n == 0 {
		t.Fatal("no consumer came and went during the scrapes")
	}
}
