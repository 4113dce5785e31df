package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// register registers a worker and returns its id.
func (e *env) register(body string) string {
	e.t.Helper()
	var v WorkerView
	e.do("POST", "/api/v1/workers", body).want(e.t, http.StatusCreated).json(e.t, &v)
	return v.ID
}

// claim claims with a wait and returns the response.
func (e *env) claim(worker string, wait float64) ClaimResponse {
	e.t.Helper()
	var c ClaimResponse
	e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": worker, "wait": wait}).want(e.t, 200).json(e.t, &c)
	return c
}

// claimJob claims and checks that the job claimed is id.
func (e *env) claimJob(worker, id string) {
	e.t.Helper()
	c := e.claim(worker, 10)
	if c.Job == nil || c.Job.ID != id || c.Job.State != domain.StateClaimed || c.Job.Worker != worker {
		e.t.Fatalf("claim: %+v, want job %s", c.Job, id)
	}
}

func (e *env) patch(id string, body any) resp {
	e.t.Helper()
	return e.do("PATCH", "/api/v1/jobs/"+id, body)
}

func TestWorkerProtocol(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var reg WorkerView
	e.do("POST", "/api/v1/workers", `{"name":"py-1","types":["thumb"],"queues":["img"],"concurrency":4}`).
		want(t, 201).json(t, &reg)
	if !strings.HasPrefix(reg.ID, "wk-") || reg.Name != "py-1" || reg.Concurrency != 4 || reg.LeaseSeconds != 3 ||
		reg.HeartbeatIntervalSeconds != 1 || strings.Join(reg.Queues, ",") != "img" || !reg.Live {
		t.Fatalf("register %+v", reg)
	}
	wk := reg.ID
	other := e.register(`{"name":"other","types":["thumb"]}`) // queue "default"
	// Nothing to claim: {"job": null}.
	t0 := time.Now()
	if c := e.claim(wk, 0.3); c.Job != nil || time.Since(t0) < 300*time.Millisecond {
		t.Fatalf("empty claim %+v after %s", c.Job, time.Since(t0))
	}
	r := e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wk})
	if strings.TrimSpace(string(r.body)) != `{"job":null}` {
		t.Fatalf("empty claim body %s", r.body)
	}
	// A claim waiting when the job arrives gets it at once.
	got := make(chan ClaimResponse, 1)
	go func() { got <- e.claim(wk, 20) }()
	time.Sleep(200 * time.Millisecond) // let the claim wait (either order is correct)
	id := e.submit(`{"type":"thumb","queue":"img","payload":{"src":"a.png"}}`).ID
	var c ClaimResponse
	select {
	case c = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting claim did not get the job")
	}
	if c.Job == nil || c.Job.ID != id || c.Job.State != domain.StateClaimed || string(c.Job.Payload) != `{"src":"a.png"}` {
		t.Fatalf("claimed %+v", c.Job)
	}
	// Reports: by another worker, not-claimant; succeeded before running, invalid-transition.
	before := e.eventCount()
	e.patch(id, map[string]any{"worker_id": other, "state": "running"}).problem(t, 409, engine.ProblemNotClaimant)
	e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded"}).problem(t, 409, engine.ProblemInvalidTransition)
	e.patch(id, map[string]any{"worker_id": wk, "state": "cancelled"}).problem(t, 409, engine.ProblemInvalidTransition)
	e.patch(id, map[string]any{"worker_id": wk, "state": "exploded"}).problem(t, 400, engine.ProblemInvalidInput)
	e.patch(id, map[string]any{"state": "running"}).problem(t, 400, engine.ProblemInvalidInput)
	e.patch(id, map[string]any{"worker_id": wk, "state": "running", "result": 1}).problem(t, 400, engine.ProblemInvalidInput)
	e.patch(id, map[string]any{"worker_id": wk, "state": "failed"}).problem(t, 400, engine.ProblemInvalidInput)
	e.patch(id, `{"worker_id":"`+wk+`","state":"running","extra":true}`).problem(t, 400, problemMalformedRequest)
	e.patch(id, `{"worker_id":"`+wk+`","progress":{"current":"one"}}`).problem(t, 400, problemMalformedRequest)
	if e.eventCount() != before {
		t.Fatalf("refused reports wrote %d events", e.eventCount()-before)
	}
	if v := e.patch(id, map[string]any{"worker_id": wk, "state": "running"}).want(t, 200).job(t); v.State != domain.StateRunning {
		t.Fatalf("running: %s", v.State)
	}
	v := e.patch(id, map[string]any{"worker_id": wk, "progress": map[string]any{"current": 3, "total": 4, "message": "resizing"}}).want(t, 200).job(t)
	if v.Progress == nil || v.Progress.Current != 3 || v.Progress.Total != 4 || *v.Progress.Percent != 75 {
		t.Fatalf("progress %+v", v.Progress)
	}
	var hb heartbeatResponse
	e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", nil).want(t, 200).json(t, &hb)
	if strings.Join(hb.Jobs, ",") != id || len(hb.Lost) != 0 || strings.Join(hb.Claims, ",") != id {
		t.Fatalf("heartbeat %+v", hb)
	}
	done := e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded", "result": map[string]any{"thumb": "a-small.png"}}).want(t, 200).job(t)
	if done.State != domain.StateSucceeded || string(done.Result) != `{"thumb":"a-small.png"}` || done.Worker != wk {
		t.Fatalf("succeeded %+v", done)
	}
	e.wantEvents(id, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvProgress, domain.EvSucceeded)
	// After the end: the claim is gone from the record; later reports are refused.
	var w WorkerView
	e.do("GET", "/api/v1/workers/"+wk, nil).want(t, 200).json(t, &w)
	if len(w.Claims) != 0 {
		t.Fatalf("claims after success: %v", w.Claims)
	}
	// A report on a terminal job is refused for the job's state, whoever
	// sends it: the worker that held it, another, with or without progress.
	for _, p := range []map[string]any{
		{"worker_id": wk, "state": "failed", "error": map[string]string{"message": "late"}},
		{"worker_id": wk, "state": "running"},
		{"worker_id": wk, "progress": map[string]any{"current": 1, "total": 2}},
		{"worker_id": "wk-01ARZ3NDEKTSV4RRFFQ69G5FAV", "state": "succeeded"},
	} {
		pr := e.patch(id, p).problem(t, 409, engine.ProblemInvalidTransition)
		if pr.State != "succeeded" || !strings.Contains(pr.Detail, "succeeded") {
			t.Fatalf("report %v on a succeeded job: %+v", p, pr)
		}
	}
	e.wantEvents(id, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvProgress, domain.EvSucceeded)

	// A failed report with retryable false fails the job for good; with
	// retries left and retryable, it is scheduled for a retry.
	id2 := e.submit(`{"type":"thumb","queue":"img","max_retries":2,"backoff":3600}`).ID
	e.claimJob(wk, id2)
	e.patch(id2, map[string]any{"worker_id": wk, "state": "running"}).want(t, 200)
	v = e.patch(id2, map[string]any{"worker_id": wk, "state": "failed", "error": map[string]string{"code": "IO", "message": "disk"}}).want(t, 200).job(t)
	if v.State != domain.StateScheduled || v.Error == nil || v.Error.Code != "IO" {
		t.Fatalf("retryable failure: %+v", v)
	}
	id3 := e.submit(`{"type":"thumb","queue":"img"}`).ID
	e.claimJob(wk, id3)
	v = e.patch(id3, map[string]any{"worker_id": wk, "state": "failed", "retryable": false, "error": map[string]string{"message": "bad input"}}).want(t, 200).job(t)
	if v.State != domain.StateFailed {
		t.Fatalf("permanent failure from claimed: %s", v.State)
	}
	// A job given back (state queued) is claimable again at once.
	id4 := e.submit(`{"type":"thumb","queue":"img"}`).ID
	e.claimJob(wk, id4)
	e.patch(id4, map[string]any{"worker_id": wk, "state": "queued", "reason": "busy"}).want(t, 200)
	e.claimJob(wk, id4)
	// Unregistering gives its claims back at once (job.requeued).
	var out struct{ Released []string }
	e.do("DELETE", "/api/v1/workers/"+wk, nil).want(t, 200).json(t, &out)
	if strings.Join(out.Released, ",") != id4 {
		t.Fatalf("released %v", out.Released)
	}
	e.waitState(id4, domain.StateQueued)
	e.wantEvents(id4, domain.EvSubmitted, domain.EvClaimed, domain.EvRequeued, domain.EvClaimed, domain.EvRequeued)
	e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", nil).problem(t, 404, engine.ProblemNotFound)
	e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wk}).problem(t, 404, engine.ProblemNotFound)
	var list struct{ Workers []WorkerView }
	e.do("GET", "/api/v1/workers", nil).want(t, 200).json(t, &list)
	if len(list.Workers) != 1 || list.Workers[0].ID != other {
		t.Fatalf("workers %+v", list.Workers)
	}
	// Bad registrations and claims.
	e.do("POST", "/api/v1/workers", `{"name":"x"}`).problem(t, 400, engine.ProblemInvalidInput)
	e.do("POST", "/api/v1/workers", `{"types":["a b"]}`).problem(t, 400, engine.ProblemInvalidInput)
	e.do("POST", "/api/v1/workers", `{"types":["a"],"queues":["x.y"]}`).problem(t, 400, engine.ProblemInvalidInput)
	e.do("POST", "/api/v1/workers", `{"types":"a"}`).problem(t, 400, problemMalformedRequest)
	e.do("POST", "/api/v1/tasks/claim", `{"worker_id":"`+other+`","wait":"forever"}`).problem(t, 400, problemMalformedRequest)
	e.do("POST", "/api/v1/tasks/claim", `{"wait":1}`).problem(t, 400, engine.ProblemInvalidInput)
}

func TestTenWorkersClaimOneJob(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var workers []string
	for i := 0; i < 10; i++ {
		workers = append(workers, e.register(fmt.Sprintf(`{"name":"w%d","types":["contested"]}`, i)))
	}
	id := e.submit(`{"type":"contested"}`).ID
	var mu sync.Mutex
	var winners []string
	var wg sync.WaitGroup
	for _, wk := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if c := e.claim(wk, 1); c.Job != nil {
				mu.Lock()
				winners = append(winners, wk)
				mu.Unlock()
				if c.Job.ID != id {
					t.Errorf("claimed %s", c.Job.ID)
				}
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 {
		t.Fatalf("%d workers got the job: %v", len(winners), winners)
	}
	if j := e.get(id); j.Worker != winners[0] || j.State != domain.StateClaimed {
		t.Fatalf("job %+v", j)
	}
	e.wantEvents(id, domain.EvSubmitted, domain.EvClaimed)
}

func TestSilentWorkerLosesItsClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.Lease = 2 * time.Second })
	a := e.register(`{"name":"a","types":["leased"]}`)
	b := e.register(`{"name":"b","types":["leased"]}`)
	id := e.submit(`{"type":"leased"}`).ID
	e.claimJob(a, id)
	// Heartbeats keep the claim past several leases.
	for i := 0; i < 6; i++ {
		time.Sleep(600 * time.Millisecond) // the heartbeat cadence (lease/3), not a wait for a condition
		var hb heartbeatResponse
		e.do("POST", "/api/v1/workers/"+a+"/heartbeat", nil).want(t, 200).json(t, &hb)
		if strings.Join(hb.Jobs, ",") != id {
			t.Fatalf("heartbeat %d: %+v", i, hb)
		}
	}
	e.patch(id, map[string]any{"worker_id": a, "state": "running"}).want(t, 200)
	// a goes silent: after the lease, b's claim gets the job.
	c := e.claim(b, 15)
	if c.Job == nil || c.Job.ID != id || c.Job.Worker != b {
		t.Fatalf("b claimed %+v", c.Job)
	}
	e.wantEvents(id, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvLeaseExpiredRequeue, domain.EvClaimed)
	// The zombie's reports are refused, and its heartbeat says it lost the job.
	e.patch(id, map[string]any{"worker_id": a, "state": "succeeded"}).problem(t, 409, engine.ProblemNotClaimant)
	var hb heartbeatResponse
	e.do("POST", "/api/v1/workers/"+a+"/heartbeat", nil).want(t, 200).json(t, &hb)
	if len(hb.Jobs) != 0 || strings.Join(hb.Lost, ",") != id || len(hb.Claims) != 0 {
		t.Fatalf("zombie heartbeat %+v", hb)
	}
	var list struct{ Workers []WorkerView }
	testkit.WaitFor(t, 10*time.Second, func() error {
		e.do("GET", "/api/v1/workers", nil).want(t, 200).json(t, &list)
		for _, w := range list.Workers {
			if w.ID == b && w.Live {
				return fmt.Errorf("b beats no more but is live")
			}
		}
		return nil
	})
}

func TestQueuePauseResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["p.job"],"queues":["pq"],"concurrency":2}`)
	first := e.submit(`{"type":"p.job","queue":"pq"}`).ID
	e.claimJob(wk, first)
	var q QueueInfo
	e.do("POST", "/api/v1/queues/pq/pause", nil).want(t, 200).json(t, &q)
	if !q.Paused || q.Name != "pq" || q.Running != 1 {
		t.Fatalf("paused %+v", q)
	}
	// A paused queue accepts jobs and dispatches none.
	id := e.submit(`{"type":"p.job","queue":"pq"}`).ID
	if c := e.claim(wk, 1); c.Job != nil {
		t.Fatalf("claimed %s from a paused queue", c.Job.ID)
	}
	var qs struct{ Queues []QueueInfo }
	e.do("GET", "/api/v1/queues", nil).want(t, 200).json(t, &qs)
	var found *QueueInfo
	for i := range qs.Queues {
		if qs.Queues[i].Name == "pq" {
			found = &qs.Queues[i]
		}
	}
	if found == nil || !found.Paused || found.Depth != 1 || found.Held != 1 || found.Jobs[domain.StateQueued] != 1 ||
		found.Jobs[domain.StateClaimed] != 1 {
		t.Fatalf("queues %+v", qs.Queues)
	}
	e.do("POST", "/api/v1/queues/pq/resume", nil).want(t, 200).json(t, &q)
	if q.Paused {
		t.Fatalf("resumed %+v", q)
	}
	e.claimJob(wk, id)
}

func TestRemoteProgressIsCoalesced(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.ProgressInterval = time.Second })
	wk := e.register(`{"name":"chatty","types":["chatty"]}`)
	id := e.submit(`{"type":"chatty"}`).ID
	e.claimJob(wk, id)
	e.patch(id, map[string]any{"worker_id": wk, "state": "running"}).want(t, 200)
	accepted := 0
	for i := 1; i <= 50; i++ {
		r := e.patch(id, map[string]any{"worker_id": wk, "progress": map[string]any{"current": i, "total": 50}})
		switch r.status {
		case 200:
		case 202:
			accepted++
		default:
			t.Fatalf("progress %d: %d %s", i, r.status, r.body)
		}
	}
	// Not the holder: refused at once, not coalesced.
	e.patch(id, map[string]any{"worker_id": "wk-01ARZ3NDEKTSV4RRFFQ69G5FAV", "progress": map[string]any{"current": 1}}).
		problem(t, 409, engine.ProblemNotClaimant)
	e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, 200)
	var progress []int64
	err := e.store.History(e.ctx, id, 0, false, func(ev *domain.Event) error {
		if ev.Type == domain.EvProgress {
			progress = append(progress, ev.Progress.Current)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if accepted == 0 || len(progress) < 2 || len(progress) > 10 || progress[len(progress)-1] != 50 {
		t.Fatalf("%d reports coalesced into %d events %v (%d accepted for later)", 50, len(progress), progress, accepted)
	}
	types := e.eventTypes(id)
	if types[len(types)-1] != domain.EvSucceeded || types[len(types)-2] != domain.EvProgress {
		t.Fatalf("the last progress is not written before the outcome: %v", types)
	}
}

// A report refused as a whole writes nothing of itself: the progress that
// came with a state move the lifecycle refuses is not written either.
func TestRefusedReportWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["refused"]}`)
	other := e.register(`{"name":"o","types":["refused"]}`)
	id := e.submit(`{"type":"refused"}`).ID
	e.claimJob(wk, id)
	before := e.eventCount()
	progress := map[string]any{"current": 1, "total": 2}
	e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded", "progress": progress}).problem(t, 409, engine.ProblemInvalidTransition)
	e.patch(id, map[string]any{"worker_id": wk, "state": "cancelled", "progress": progress}).problem(t, 409, engine.ProblemInvalidTransition)
	e.patch(id, map[string]any{"worker_id": other, "state": "running", "progress": progress}).problem(t, 409, engine.ProblemNotClaimant)
	if n := e.eventCount() - before; n != 0 {
		t.Fatalf("refused reports wrote %d events", n)
	}
	e.wantEvents(id, domain.EvSubmitted, domain.EvClaimed)
	// The same progress with an allowed move is written, before the move.
	v := e.patch(id, map[string]any{"worker_id": wk, "state": "running", "progress": progress}).want(t, 200).job(t)
	if v.State != domain.StateRunning {
		t.Fatalf("running with progress: %+v", v)
	}
	e.wantEvents(id, domain.EvSubmitted, domain.EvClaimed, domain.EvProgress, domain.EvStarted)
}

// POST /tasks/claim takes the oldest queued job of the worker's types.
func TestClaimTakesOldestOfAnyType(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["ta","tb"]}`)
	var want []string
	for _, typ := range []string{"tb", "tb", "ta"} {
		want = append(want, e.submit(`{"type":"`+typ+`"}`).ID)
	}
	for _, id := range want {
		e.claimJob(wk, id)
		e.patch(id, map[string]any{"worker_id": wk, "state": "queued"}).want(t, 200)
		e.patch(id, map[string]any{"worker_id": wk, "state": "queued"}).problem(t, 409, engine.ProblemNotClaimant)
	}
}

// A registration is bounded: every (queue, type) pair is a consumer on
// the server.
func TestRegistrationLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := func(prefix string, n int) string {
		var s []string
		for i := 0; i < n; i++ {
			s = append(s, fmt.Sprintf(`"%s%d"`, prefix, i))
		}
		return "[" + strings.Join(s, ",") + "]"
	}
	before := e.eventCount()
	p := e.do("POST", "/api/v1/workers", `{"types":`+names("t", engine.MaxRemoteTypes+1)+`}`).
		problem(t, 422, problemRegistrationTooLarge)
	if p.Field != "types" {
		t.Fatalf("problem %+v", p)
	}
	p = e.do("POST", "/api/v1/workers", `{"types":["a"],"queues":`+names("q", engine.MaxRemoteQueues+1)+`}`).
		problem(t, 422, problemRegistrationTooLarge)
	if p.Field != "queues" {
		t.Fatalf("problem %+v", p)
	}
	e.do("POST", "/api/v1/workers", `{"types":`+names("t", 32)+`,"queues":`+names("q", 16)+`}`).
		problem(t, 422, problemRegistrationTooLarge)
	var list struct{ Workers []WorkerView }
	e.do("GET", "/api/v1/workers", nil).want(t, 200).json(t, &list)
	if len(list.Workers) != 0 || e.eventCount() != before {
		t.Fatalf("refused registrations left %d workers", len(list.Workers))
	}
	// At the limits, and repeated names count once.
	var v WorkerView
	e.do("POST", "/api/v1/workers", `{"types":`+names("t", 16)+`,"queues":`+names("q", 16)+`}`).want(t, 201)
	e.do("POST", "/api/v1/workers", `{"types":["a","a","b"],"queues":["x","x"]}`).want(t, 201).json(t, &v)
	if strings.Join(v.Types, ",") != "a,b" || strings.Join(v.Queues, ",") != "x" {
		t.Fatalf("deduplicated %v %v", v.Types, v.Queues)
	}
	// A claim on queues that do not exist creates none of them.
	if c := e.claim(v.ID, 0); c.Job != nil {
		t.Fatalf("claimed %+v", c.Job)
	}
	var qs struct{ Queues []QueueInfo }
	e.do("GET", "/api/v1/queues", nil).want(t, 200).json(t, &qs)
	for _, q := range qs.Queues {
		if q.Name == "x" {
			t.Fatalf("a claim created queue x: %+v", qs.Queues)
		}
	}
}

// A worker holding as many live claims as its concurrency is refused
// more (409 concurrency-limit) at once, and nothing is written; a claim
// that ends (or is lost) frees its slot.
func TestClaimConcurrencyLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"one","types":["limited"],"concurrency":1}`)
	two := e.register(`{"name":"two","types":["limited"],"concurrency":2}`)
	var ids []string
	for i := 0; i < 4; i++ {
		ids = append(ids, e.submit(`{"type":"limited"}`).ID)
	}
	e.claimJob(wk, ids[0])
	before := e.eventCount()
	t0 := time.Now()
	p := e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wk, "wait": 5}).problem(t, 409, problemConcurrencyLimit)
	if p.WorkerID != wk || time.Since(t0) > 3*time.Second {
		t.Fatalf("problem %+v after %s", p, time.Since(t0))
	}
	if n := e.eventCount() - before; n != 0 {
		t.Fatalf("a refused claim wrote %d events", n)
	}
	e.claimJob(two, ids[1])
	e.claimJob(two, ids[2])
	e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": two}).problem(t, 409, problemConcurrencyLimit)
	// The end of a claim frees its slot; so does a cancel (the claim is no
	// longer live, though the worker has not heard of it yet).
	e.patch(ids[0], map[string]any{"worker_id": wk, "state": "failed", "retryable": false, "error": map[string]string{"message": "x"}}).want(t, 200)
	e.claimJob(wk, ids[3])
	e.do("POST", "/api/v1/jobs/"+ids[1]+"/cancel", nil).want(t, 200)
	id := e.submit(`{"type":"limited"}`).ID
	e.claimJob(two, id)
	e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": two}).problem(t, 409, problemConcurrencyLimit)
}

// A namespaced token sees a worker of its namespace without the claims of
// other namespaces' jobs it runs (a free-form type runs every namespace's
// jobs): their ids are not shown, in the list or the dashboard's page (the
// event stream and an HTTP worker's view take the same view). A token of every namespace sees
// them.
func TestWorkerClaimsOfOtherNamespacesHidden(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	testkit.HoldingWorker(t, e.srv, "w-acme", "acme", "t.free")
	theirs := e.as("prodB", "POST", "/api/v1/jobs", map[string]any{"type": "t.free"}).want(t, 201).job(t)
	ours := e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "t.free"}).want(t, 201).job(t)
	claimsOf := func(who, path string) []string {
		t.Helper()
		var one WorkerView
		var list struct{ Workers []WorkerView }
		r := e.as(who, "GET", path, nil).want(t, 200)
		if strings.HasSuffix(path, "/workers") {
			r.json(t, &list)
			for _, w := range list.Workers {
				if w.ID == "w-acme" {
					return w.Claims
				}
			}
			t.Fatalf("%s: no worker w-acme in %s", who, r.body)
		}
		r.json(t, &one)
		return one.Claims
	}
	testkit.WaitFor(t, 10*time.Second, func() error { // both claimed, and the worker's record says so
		if got := claimsOf("admin", "/api/v1/workers"); len(got) != 2 {
			return fmt.Errorf("claims %v", got)
		}
		return nil
	})
	for _, path := range []string{"/api/v1/workers"} { // (GET /workers/{id} is an HTTP worker's)
		if got := claimsOf("readA", path); len(got) != 1 || got[0] != ours.ID {
			t.Errorf("%s as a reader of acme: claims %v, want only %s (not %s)", path, got, ours.ID, theirs.ID)
		}
		if got := claimsOf("admin", path); len(got) != 2 {
			t.Errorf("%s as admin: claims %v, want both", path, got)
		}
	}
	if r := e.as("readA", "GET", "/workers", nil).want(t, 200); strings.Contains(string(r.body), theirs.ID) || !strings.Contains(string(r.body), ours.ID) {
		t.Errorf("the workers page shows a reader of acme the other namespace's claim, or not its own")
	}
}
