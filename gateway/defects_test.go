package gateway

import (
	"net/http"
	"testing"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// A namespace given as "" is no namespace: refused (400 invalid-namespace)
// and nothing is written, on submit (JSON and multipart) and on a worker's
// registration; left out, it is the default.
func TestEmptyNamespaceIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	before := e.eventCount()
	for _, r := range []resp{
		e.do("POST", "/api/v1/jobs", `{"type":"en.x","namespace":""}`),
		e.do("POST", "/api/v1/workers", `{"name":"w","types":["en.x"],"namespace":""}`),
		e.submitFiles(`{"type":"en.x","namespace":""}`, upFile{"a.txt", "a"}),
	} {
		if p := r.problem(t, 400, "invalid-namespace"); p.Field != "namespace" {
			t.Fatalf("problem %+v", p)
		}
	}
	var list struct{ Workers []WorkerView }
	e.do("GET", "/api/v1/workers", nil).want(t, 200).json(t, &list)
	if e.eventCount() != before || len(list.Workers) != 0 {
		t.Fatalf("refused requests wrote %d events, %d workers", e.eventCount()-before, len(list.Workers))
	}
	if v := e.submit(`{"type":"en.x"}`); v.Namespace != "default" {
		t.Fatalf("left out: %s", v.Namespace)
	}
	if v := e.submit(`{"type":"en.x","namespace":null}`); v.Namespace != "default" {
		t.Fatalf("null: %s", v.Namespace)
	}
	var w WorkerView
	e.do("POST", "/api/v1/workers", `{"name":"w","types":["en.x"]}`).want(t, 201).json(t, &w)
	if w.Namespace != "default" {
		t.Fatalf("worker namespace %q", w.Namespace)
	}
}

// Every event names the token that caused it: a worker's events (its
// claim, start, progress, outcome) name the worker as actor and its token
// as token; a worker says which token registered it.
func TestWorkerEventsNameTheirToken(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	var w WorkerView
	e.as("workA", "POST", "/api/v1/workers", map[string]any{"name": "wa", "types": []string{"tk.job"}}).want(t, 201).json(t, &w)
	token := "token:work-a/" + e.ids["workA"]
	if w.Token != token {
		t.Fatalf("registered %+v", w)
	}
	var got WorkerView
	e.as("readA", "GET", "/api/v1/workers/"+w.ID, nil).want(t, 200).json(t, &got)
	if got.Token != token {
		t.Fatalf("GET /workers/{id}: token %q", got.Token)
	}
	job := e.as("prodA", "POST", "/api/v1/jobs", map[string]any{"type": "tk.job"}).want(t, 201).job(t)
	var c ClaimResponse
	e.as("workA", "POST", "/api/v1/tasks/claim", map[string]any{"worker_id": w.ID, "wait": 5}).want(t, 200).json(t, &c)
	if c.Job == nil || c.Job.ID != job.ID {
		t.Fatalf("claim %+v", c.Job)
	}
	for _, body := range []map[string]any{
		{"worker_id": w.ID, "state": "running"},
		{"worker_id": w.ID, "event": map[string]any{"name": "step"}},
		{"worker_id": w.ID, "state": "succeeded"},
	} {
		e.as("workA", "PATCH", "/api/v1/jobs/"+job.ID, body).want(t, http.StatusOK)
	}
	var out struct{ Events []*projections.EventView }
	e.as("readA", "GET", "/api/v1/jobs/"+job.ID+"/events", nil).want(t, 200).json(t, &out)
	want := []string{domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvCustom, domain.EvSucceeded}
	if len(out.Events) != len(want) {
		t.Fatalf("events %+v", out.Events)
	}
	for i, ev := range out.Events {
		switch {
		case ev.Type != want[i]:
			t.Fatalf("event %d is %s, want %s", i, ev.Type, want[i])
		case i == 0 && (ev.Actor != "token:prod-a/"+e.ids["prodA"] || ev.Token != ""):
			t.Fatalf("submitted by %q (token %q)", ev.Actor, ev.Token)
		case i > 0 && (ev.Actor != w.ID || ev.Token != token):
			t.Fatalf("%s by %q, token %q; want %s, %s", ev.Type, ev.Actor, ev.Token, w.ID, token)
		}
	}
}
