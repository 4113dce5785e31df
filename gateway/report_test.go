package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
)

// run claims job id for worker and starts it.
func (e *env) run(worker, id string) *projections.JobView {
	e.t.Helper()
	e.claimJob(worker, id)
	return e.patch(id, map[string]any{"worker_id": worker, "state": "running"}).want(e.t, 200).job(e.t)
}

// The claim and the start tell the worker its deadline: claim time (then
// start time) plus the job's timeout.
func TestClaimAndStartTellTheDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["dl"]}`)
	id := e.submit(`{"type":"dl","timeout":"90s"}`).ID
	c := e.claim(wk, 5)
	if c.Job == nil || c.Job.Deadline == nil || c.Job.TimeoutSeconds != 90 {
		t.Fatalf("claim %+v", c.Job)
	}
	if d := c.Job.Deadline.Sub(c.Job.UpdatedAt); d != 90*time.Second {
		t.Fatalf("claim deadline is %s after the claim", d)
	}
	v := e.patch(id, map[string]any{"worker_id": wk, "state": "running"}).want(t, 200).job(t)
	if v.Deadline == nil || !v.Deadline.Equal(v.StartedAt.Add(90*time.Second)) {
		t.Fatalf("running deadline %v, started %v", v.Deadline, v.StartedAt)
	}
	if g := e.get(id); g.Deadline == nil || !g.Deadline.Equal(*v.Deadline) {
		t.Fatalf("get deadline %v", g.Deadline)
	}
	done := e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, 200).job(t)
	if done.Deadline != nil {
		t.Fatalf("a finished job has a deadline: %v", done.Deadline)
	}
}

// retry_later gives the job back for a delay without spending a retry
// (job.retry_later), as Go's RetryLater: scheduled, then due and claimable
// again; with delay 0, queued at once.
func TestPatchRetryLater(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["gpu"],"concurrency":2}`)
	id := e.submit(`{"type":"gpu","max_retries":1}`).ID
	e.run(wk, id)
	before := e.eventCount()
	for _, bad := range []map[string]any{
		{"worker_id": wk, "state": "retry_later"},                // no delay
		{"worker_id": wk, "state": "retry_later", "delay": -1},   // negative
		{"worker_id": wk, "state": "retry_later", "delay": 1e10}, // beyond the bound
		{"worker_id": wk, "state": "succeeded", "delay": 1},      // delay without retry_later
		{"worker_id": wk, "state": "retry_later", "delay": 1, "reason": strings.Repeat("r", 1025)},
	} {
		p := e.patch(id, bad).problem(t, 400, engine.ProblemInvalidInput)
		if p.Field != "delay" && p.Field != "reason" {
			t.Fatalf("%v: field %q", bad, p.Field)
		}
	}
	e.patch(id, `{"worker_id":"`+wk+`","state":"retry_later","delay":"soon"}`).problem(t, 400, problemMalformedRequest)
	if n := e.eventCount() - before; n != 0 {
		t.Fatalf("refused reports wrote %d events", n)
	}
	t0 := time.Now()
	v := e.patch(id, map[string]any{"worker_id": wk, "state": "retry_later", "delay": "1.5s", "reason": "GPU busy"}).want(t, 200).job(t)
	if v.State != domain.StateScheduled || v.Retries != 0 || v.RunAt == nil || v.RunAt.Sub(t0) < time.Second {
		t.Fatalf("retry later: %+v", v)
	}
	var hb heartbeatResponse
	e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", nil).want(t, 200).json(t, &hb)
	if len(hb.Claims) != 0 {
		t.Fatalf("the job given back is still a claim: %+v", hb)
	}
	c := e.claim(wk, 10) // due after the delay, by its schedule
	if c.Job == nil || c.Job.ID != id || time.Since(t0) < 1400*time.Millisecond || c.Job.Retries != 0 {
		t.Fatalf("claimed %+v after %s", c.Job, time.Since(t0))
	}
	e.patch(id, map[string]any{"worker_id": wk, "state": "running"}).want(t, 200)
	v = e.patch(id, map[string]any{"worker_id": wk, "state": "retry_later", "delay": 0}).want(t, 200).job(t)
	if v.State != domain.StateQueued || v.Retries != 0 {
		t.Fatalf("retry later at once: %+v", v)
	}
	e.wantEvents(id, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvRetryLater, domain.EvDue,
		domain.EvClaimed, domain.EvStarted, domain.EvRetryLater)
	var reason string
	_ = e.store.History(e.ctx, id, 0, false, func(ev *domain.Event) error {
		if ev.Type == domain.EvRetryLater && reason == "" {
			reason = ev.Message
		}
		return nil
	})
	if reason != "GPU busy" {
		t.Fatalf("reason %q", reason)
	}
	// Only a running job retries later: a claimed one is refused.
	e.claimJob(wk, id)
	e.patch(id, map[string]any{"worker_id": wk, "state": "retry_later", "delay": 1}).problem(t, 409, engine.ProblemInvalidTransition)
}

// A handler's own event over PATCH: job.event with its name, level,
// message and fields, alone or before a state; a bad one writes nothing.
func TestPatchEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["ev"]}`)
	id := e.submit(`{"type":"ev"}`).ID
	e.run(wk, id)
	before := e.eventCount()
	for field, ev := range map[string]map[string]any{
		"event.name":    {"message": "no name"},
		"event.level":   {"name": "x", "level": "loud"},
		"event.message": {"name": "x", "message": strings.Repeat("m", 4097)},
	} {
		p := e.patch(id, map[string]any{"worker_id": wk, "event": ev}).problem(t, 400, engine.ProblemInvalidInput)
		if p.Field != field {
			t.Fatalf("%v: field %q, want %q", ev, p.Field, field)
		}
	}
	e.patch(id, `{"worker_id":"`+wk+`","event":{"name":"x","fields":[1]}}`).problem(t, 400, problemMalformedRequest)
	e.patch(id, map[string]any{"worker_id": "wk-01ARZ3NDEKTSV4RRFFQ69G5FAV", "event": map[string]any{"name": "x"}}).
		problem(t, 409, engine.ProblemNotClaimant)
	if n := e.eventCount() - before; n != 0 {
		t.Fatalf("refused events wrote %d events", n)
	}
	v := e.patch(id, map[string]any{"worker_id": wk, "event": map[string]any{"name": "page.done", "level": "warning",
		"message": "page 3 was slow", "fields": map[string]any{"page": 3}}}).want(t, 200).job(t)
	if v.State != domain.StateRunning {
		t.Fatalf("after an event: %+v", v)
	}
	e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded", "event": map[string]any{"name": "done"},
		"progress": map[string]any{"current": 1, "total": 1}}).want(t, 200)
	e.wantEvents(id, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvCustom, domain.EvProgress,
		domain.EvCustom, domain.EvSucceeded)
	var got []*projections.EventView
	var out struct{ Events []*projections.EventView }
	e.do("GET", "/api/v1/jobs/"+id+"/events", nil).want(t, 200).json(t, &out)
	for _, ev := range out.Events {
		if ev.Type == domain.EvCustom {
			got = append(got, ev)
		}
	}
	if len(got) != 2 || got[0].Name != "page.done" || got[0].Level != "warning" || got[0].Message != "page 3 was slow" ||
		fmt.Sprint(got[0].Fields["page"]) != "3" || got[0].Actor != wk || got[1].Name != "done" || got[1].Level != "info" {
		t.Fatalf("events %+v %+v", got[0], got[1])
	}
}

// A coordinator over HTTP defers to children as a Go one does: the parent
// waits, its children are jobs linked to it with derived ids, its progress
// counts the pieces, and it completes exactly once by the fan-in counter.
func TestPatchFanOutChildren(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"coord","types":["coord","kid"],"concurrency":4}`)
	parent := e.submit(`{"type":"coord","queue":"default"}`).ID
	e.run(wk, parent)
	children := []map[string]any{
		{"type": "kid", "payload": map[string]any{"n": 1}},
		{"type": "kid", "payload": map[string]any{"n": 2}, "max_retries": 0},
		{"type": "kid", "payload": map[string]any{"n": 3}},
	}
	before := e.eventCount()
	for field, fo := range map[string]map[string]any{
		"fanout.children":                    {"children": children, "batches": map[string]any{"type": "b", "items": []int{1}}},
		"fanout.children[1].namespace":       {"children": []map[string]any{{"type": "kid"}, {"type": "kid", "namespace": "x"}}},
		"fanout.children[0].parent":          {"children": []map[string]any{{"type": "kid", "parent": parent}}},
		"fanout.children[0].max_retries":     {"children": []map[string]any{{"type": "kid", "max_retries": -1}}},
		"fanout.failure_policy":              {"children": children, "failure_policy": "some"},
		"fanout.max_failure_ratio":           {"children": children, "max_failure_ratio": 0.5},
		"fanout.batches.items":               {"batches": map[string]any{"type": "b", "items": []int{}}},
		"fanout.batches.type":                {"batches": map[string]any{"type": "a b", "items": []int{1}}},
		"fanout.children[0].idempotency_key": {"children": []map[string]any{{"type": "kid", "idempotency_key": "k"}}},
	} {
		p := e.patch(parent, map[string]any{"worker_id": wk, "state": "waiting", "fanout": fo}).problem(t, 400, engine.ProblemInvalidInput)
		if p.Field != field {
			t.Fatalf("%s: field %q (%s)", field, p.Field, p.Detail)
		}
	}
	e.patch(parent, map[string]any{"worker_id": wk, "state": "waiting"}).problem(t, 400, engine.ProblemInvalidInput)
	e.patch(parent, map[string]any{"worker_id": wk, "state": "running", "fanout": map[string]any{"children": children}}).
		problem(t, 400, engine.ProblemInvalidInput)
	if n := e.eventCount() - before; n != 0 {
		t.Fatalf("refused fan-outs wrote %d events", n)
	}
	v := e.patch(parent, map[string]any{"worker_id": wk, "state": "waiting", "fanout": map[string]any{"children": children}}).
		want(t, 200).job(t)
	if v.State != domain.StateWaiting || v.Fanout == nil || v.Fanout.Total != 3 || v.Fanout.Kind != "children" ||
		v.Fanout.Policy != "all" || v.Progress == nil || v.Progress.Total != 3 || v.Progress.Current != 0 {
		t.Fatalf("waiting: %+v %+v", v, v.Fanout)
	}
	// Made again (its answer was lost): refused, and no duplicate child.
	e.patch(parent, map[string]any{"worker_id": wk, "state": "waiting", "fanout": map[string]any{"children": children}}).
		problem(t, 409, engine.ProblemNotClaimant)
	var kids jobList
	e.do("GET", "/api/v1/jobs/"+parent+"/children", nil).want(t, 200).json(t, &kids)
	if len(kids.Jobs) != 3 {
		t.Fatalf("%d children", len(kids.Jobs))
	}
	ids := map[string]bool{}
	for _, k := range kids.Jobs {
		if k.ParentID != parent || k.State != domain.StateQueued {
			t.Fatalf("child %+v", k)
		}
		ids[k.ID] = true
	}
	for n := 1; n <= 3; n++ {
		if !ids[engine.ChildID("default", parent, n)] {
			t.Fatalf("child %d is not %s: %v", n, engine.ChildID("default", parent, n), ids)
		}
	}
	for n := 1; n <= 3; n++ {
		id := engine.ChildID("default", parent, n)
		e.run(wk, id)
		e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded", "result": n}).want(t, 200)
		if n == 2 { // the counts are written as the pieces end
			testkit.WaitFor(t, 10*time.Second, func() error {
				if p := e.get(parent); p.Fanout.Succeeded != 2 || p.Progress.Current != 2 {
					return fmt.Errorf("parent counts %+v", p.Fanout)
				}
				return nil
			})
		}
	}
	done := e.waitState(parent, domain.StateSucceeded)
	if done.Fanout.Succeeded != 3 || done.Fanout.Finished != 3 || done.Fanout.Percent != 100 ||
		string(done.Result) != `{"total":3,"succeeded":3,"failed":0,"cancelled":0}` {
		t.Fatalf("parent %+v %+v %s", done, done.Fanout, done.Result)
	}
	types := e.eventTypes(parent)
	if types[0] != domain.EvSubmitted || types[1] != domain.EvClaimed || types[2] != domain.EvStarted ||
		types[3] != domain.EvWaiting || types[len(types)-1] != domain.EvSucceeded {
		t.Fatalf("parent events %v", types)
	}
	succeeded := 0
	for _, typ := range types {
		if typ == domain.EvSucceeded {
			succeeded++
		}
	}
	if succeeded != 1 {
		t.Fatalf("parent succeeded %d times: %v", succeeded, types)
	}
}

// fail_fast over HTTP: the first failed child fails the parent and
// cancels the children still unfinished.
func TestPatchFanOutFailFast(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"coord","types":["ff.coord","ff.kid"],"concurrency":4}`)
	parent := e.submit(`{"type":"ff.coord"}`).ID
	e.run(wk, parent)
	e.patch(parent, map[string]any{"worker_id": wk, "state": "waiting", "fanout": map[string]any{
		"children":       []map[string]any{{"type": "ff.kid", "max_retries": 0}, {"type": "ff.kid"}, {"type": "ff.kid"}},
		"failure_policy": "fail_fast", "stall_timeout": "1h"}}).want(t, 200)
	first := engine.ChildID("default", parent, 1)
	e.run(wk, first)
	e.patch(first, map[string]any{"worker_id": wk, "state": "failed", "error": map[string]any{"code": "BAD", "message": "broken"}}).
		want(t, 200)
	p := e.waitState(parent, domain.StateFailed)
	if p.Error == nil || p.Error.Code != "FANOUT_FAILED" || p.Fanout.Failed != 1 {
		t.Fatalf("parent %+v", p)
	}
	for n := 2; n <= 3; n++ {
		e.waitState(engine.ChildID("default", parent, n), domain.StateCancelled)
	}
}

// A coordinator's children go to their own namespace's rules: a child of
// a type the namespace cannot resolve is refused before anything is made.
func TestPatchFanOutChildRefusedWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"coord","types":["rc.coord"]}`)
	parent := e.submit(`{"type":"rc.coord"}`).ID
	e.run(wk, parent)
	before := e.eventCount()
	p := e.patch(parent, map[string]any{"worker_id": wk, "state": "waiting", "fanout": map[string]any{
		"children": []map[string]any{{"type": "rc.kid"}, {"type": "billing:nothing"}}}}).problem(t, http.StatusNotFound, "unknown-type")
	if !strings.Contains(p.Detail, "fanout.children[1]") {
		t.Fatalf("problem %+v", p)
	}
	if n := e.eventCount() - before; n != 0 {
		t.Fatalf("a refused fan-out wrote %d events", n)
	}
	if v := e.get(parent); v.State != domain.StateRunning {
		t.Fatalf("parent %s", v.State)
	}
}

// An HTTP worker's attempt is ended at its deadline plus the grace, as
// TIMEOUT, under the job's retry policy; the worker's later report is
// refused and its heartbeat lists the job as lost. A claimed job never
// started times out too, from its claim.
func TestHTTPWorkerTimeoutIsEnforced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"slow","types":["slow"],"concurrency":3}`)
	id := e.submit(`{"type":"slow","timeout":"1s","max_retries":0}`).ID
	id2 := e.submit(`{"type":"slow","timeout":"1s","max_retries":1,"backoff":0}`).ID
	id3 := e.submit(`{"type":"slow","timeout":"1s"}`).ID
	deadline := *e.run(wk, id).Deadline
	e.run(wk, id2)
	e.claimJob(wk, id3)

	done := e.waitState(id, domain.StateFailed)
	if done.Error == nil || done.Error.Code != "TIMEOUT" || done.FinishedAt.Before(deadline.Add(2*time.Second)) ||
		done.FinishedAt.After(deadline.Add(2*time.Second+3*time.Second+time.Second)) {
		t.Fatalf("timed out %+v at %v, deadline %v", done.Error, done.FinishedAt, deadline)
	}
	e.patch(id, map[string]any{"worker_id": wk, "state": "succeeded", "result": 1}).problem(t, 409, engine.ProblemInvalidTransition)
	e.wantEvents(id, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvFailed)

	// With a retry left: retried (job.retry_scheduled, TIMEOUT), claimable
	// again; the late report of the first attempt is refused.
	v := e.waitState(id2, domain.StateQueued)
	if v.Retries != 1 || v.Error == nil || v.Error.Code != "TIMEOUT" {
		t.Fatalf("retried %+v", v)
	}
	e.patch(id2, map[string]any{"worker_id": wk, "state": "succeeded"}).problem(t, 409, engine.ProblemNotClaimant)

	if v := e.waitState(id3, domain.StateFailed); v.Error.Code != "TIMEOUT" || v.Attempts != 0 {
		t.Fatalf("claimed and timed out: %+v", v)
	}
	var hb heartbeatResponse
	e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", nil).want(t, 200).json(t, &hb)
	if len(hb.Lost) != 3 || len(hb.Jobs) != 0 || len(hb.Claims) != 0 {
		t.Fatalf("heartbeat %+v", hb)
	}
	e.run(wk, id2)
	e.patch(id2, map[string]any{"worker_id": wk, "state": "succeeded"}).want(t, 200)
	e.wantEvents(id2, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvRetryScheduled,
		domain.EvClaimed, domain.EvStarted, domain.EvSucceeded)
}
