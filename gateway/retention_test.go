package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/testkit"
)

func TestPurgedJobIsGone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.submit(`{"type":"demo.idle"}`)
	e.do("POST", "/api/v1/jobs/"+j.ID+"/cancel", `{}`).want(t, 200)
	before := time.Now().Add(-time.Second)
	if n, err := e.store.Purge(e.ctx, j.ID, "retention"); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	p := e.do("GET", "/api/v1/jobs/"+j.ID, nil).problem(t, 410, engine.ProblemGone)
	if p.PurgedAt == nil || p.PurgedAt.Before(before) || p.JobID != j.ID || !strings.Contains(p.Detail, "purged at") {
		t.Fatalf("gone problem %+v", p)
	}
	// Lists do not show it (once the index has seen the deletion).
	testkit.WaitFor(t, 5*time.Second, func() error {
		r := e.do("GET", "/api/v1/jobs", nil).want(t, 200)
		if strings.Contains(string(r.body), j.ID) {
			return fmt.Errorf("list shows the purged job: %s", r.body)
		}
		return nil
	})
	// An id that never was is still 404.
	e.do("GET", "/api/v1/jobs/01M85MKVAX5K4A16TR1GJCD5RN", nil).problem(t, 404, engine.ProblemNotFound)
}

func TestNamespaceRetentionSetting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("PUT", "/api/v1/namespaces/team", `{"retention":"720h"}`).want(t, 200)
	if !strings.Contains(string(r.body), `"retention":"720h0m0s"`) {
		t.Fatalf("namespace view: %s", r.body)
	}
	before := e.eventCount()
	for _, bad := range []string{`{"retention":"-1h"}`, `{"retention":"0s"}`, `{"retention":"soon"}`, `{"retention":5}`} {
		if r := e.do("PUT", "/api/v1/namespaces/team", bad); r.status != 400 {
			t.Fatalf("%s: %d %s", bad, r.status, r.body)
		}
	}
	if e.eventCount() != before {
		t.Fatal("a refused retention was written")
	}
}

func TestPurgeDeletesFilesAndAnswersGoneEverywhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	j := e.submitFiles(`{"type":"shell.run","idempotency_key":"k1"}`, upFile{"a.txt", "hello"}).want(t, 201).job(t)
	e.do("POST", "/api/v1/jobs/"+j.ID+"/cancel", `{}`).want(t, 200)
	if objs := e.objects(); len(objs) != 1 {
		t.Fatalf("files before the purge: %v", objs)
	}
	if _, err := e.store.Purge(e.ctx, j.ID, "retention"); err != nil {
		t.Fatal(err)
	}
	if objs := e.objects(); len(objs) != 0 {
		t.Fatalf("files after the purge: %v", objs)
	}
	e.do("GET", "/api/v1/jobs/"+j.ID+"/events", nil).problem(t, 410, engine.ProblemGone)
	e.do("POST", "/api/v1/jobs/"+j.ID+"/cancel", `{}`).problem(t, 410, engine.ProblemGone)
	e.do("POST", "/api/v1/jobs", `{"type":"shell.run","idempotency_key":"k1"}`).problem(t, 410, engine.ProblemGone)
}

// A purged job of another namespace answers a namespaced token as a job
// that does not exist (404 not-found, the same detail), not with its purge
// (410, when and why); its own namespace's token, and one of every
// namespace, are told it was purged.
func TestPurgedJobOfAnotherNamespaceIsNotFound(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t)
	r := e.as("prodB", "POST", "/api/v1/jobs", map[string]any{"type": "t.gone", "queue": "q"}).want(t, 201)
	j := r.job(t)
	e.as("admin", "POST", "/api/v1/jobs/"+j.ID+"/cancel", map[string]any{}).want(t, 200)
	if n, err := e.store.Purge(e.ctx, j.ID, "retention"); err != nil || n != 1 {
		t.Fatalf("purge: %d, %v", n, err)
	}
	testkit.WaitFor(t, 5*time.Second, func() error { // until the gateway's index has seen the deletion
		if e.g.index.Get(j.ID) != nil {
			return fmt.Errorf("still in the index")
		}
		return nil
	})
	missing := "01M85MKVAX5K4A16TR1GJCD5RN"
	for _, path := range []string{"", "/events", "/children", "/result", "/files"} {
		got := e.as("readA", "GET", "/api/v1/jobs/"+j.ID+path, nil).problem(t, 404, engine.ProblemNotFound)
		want := e.as("readA", "GET", "/api/v1/jobs/"+missing+path, nil).problem(t, 404, engine.ProblemNotFound)
		if strings.ReplaceAll(got.Detail, j.ID, missing) != want.Detail || got.PurgedAt != nil {
			t.Fatalf("%s: another namespace's purged job: %+v; a missing one: %+v", path, got, want)
		}
	}
	e.as("prodB", "GET", "/api/v1/jobs/"+j.ID, nil).problem(t, 410, engine.ProblemGone)
	e.as("admin", "GET", "/api/v1/jobs/"+j.ID, nil).problem(t, 410, engine.ProblemGone)
}
