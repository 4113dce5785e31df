package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

func (r resp) schedule(t *testing.T) *projections.ScheduleView {
	t.Helper()
	var v projections.ScheduleView
	r.json(t, &v)
	return &v
}

// The schedule routes: create (201 with its Location; the same again 200;
// another spec 409), get, list, change, pause, resume, delete; a method a
// route does not have is 405; a tick fires a job that the schedule's
// last runs name.
func TestSchedulesHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := `{"name":"beat","namespace":"shop","every":"1s","overlap":"allow","jitter":0,"job":{"type":"http.beat","payload":{"n":1},"queue":"beats","max_retries":0}}`
	r := e.do("POST", "/api/v1/schedules", body).want(t, http.StatusCreated)
	if loc := r.header.Get("Location"); loc != "/api/v1/schedules/beat?namespace=shop" {
		t.Fatalf("location %q", loc)
	}
	s := r.schedule(t)
	if s.Name != "beat" || s.Namespace != "shop" || s.Every == nil || time.Duration(*s.Every) != time.Second || s.NextRunAt == nil ||
		s.Overlap != "allow" || s.Misfire != "once" || string(s.Job) != `{"type":"http.beat","payload":{"n":1},"queue":"beats","max_retries":0}` {
		t.Fatalf("%s", r.body)
	}
	e.do("POST", "/api/v1/schedules", body).want(t, http.StatusOK)
	e.do("POST", "/api/v1/schedules", strings.Replace(body, `"1s"`, `"2s"`, 1)).problem(t, http.StatusConflict, "conflict")
	// The namespace from the query, the body's left out; two different ones are refused.
	e.do("POST", "/api/v1/schedules?namespace=shop", `{"name":"nightly","cron":"0 3 * * *","timezone":"Europe/Berlin","job":{"type":"http.report"}}`).
		want(t, http.StatusCreated)
	p := e.do("POST", "/api/v1/schedules?namespace=other", body).problem(t, http.StatusBadRequest, "invalid-input")
	if p.Field != "namespace" {
		t.Fatalf("%+v", p)
	}

	// A tick fires.
	var got *projections.ScheduleView
	testkit.WaitFor(t, 20*time.Second, func() error {
		got = e.do("GET", "/api/v1/schedules/beat?namespace=shop", nil).want(t, http.StatusOK).schedule(t)
		if len(got.LastRuns) == 0 {
			return fmt.Errorf("no tick yet")
		}
		return nil
	})
	run := got.LastRuns[0]
	job := e.get(run.JobID)
	if run.Outcome != "fired" || job.Type != "http.beat" || job.Namespace != "shop" || job.Queue != "beats" || job.MaxRetries != 0 ||
		job.IdempotencyKey != fmt.Sprintf("schedule:beat:%d", run.At.UnixNano()) || got.Counts.Fired < 1 {
		t.Fatalf("run %+v, job %+v", run, job)
	}
	e.do("GET", "/api/v1/schedules/beat", nil).problem(t, http.StatusNotFound, "not-found") // the default namespace has none

	var list struct{ Schedules []*projections.ScheduleView }
	e.do("GET", "/api/v1/schedules?namespace=shop", nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Schedules) != 2 || list.Schedules[0].Name != "beat" || list.Schedules[1].Name != "nightly" {
		t.Fatalf("%+v", list)
	}
	e.do("GET", "/api/v1/schedules?namespace=none", nil).want(t, http.StatusOK).json(t, &list)
	if len(list.Schedules) != 0 {
		t.Fatalf("%+v", list)
	}

	up := e.do("PATCH", "/api/v1/schedules/nightly?namespace=shop", `{"cron":"15 4 * * *","misfire":"skip"}`).want(t, http.StatusOK).schedule(t)
	if up.Cron != "15 4 * * *" || up.Timezone != "Europe/Berlin" || up.Misfire != "skip" || up.NextRunAt.In(mustZone(t, "Europe/Berlin")).Hour() != 4 {
		t.Fatalf("%+v", up)
	}
	e.do("PATCH", "/api/v1/schedules/nightly?namespace=shop", `{"cron":"15 25 * * *"}`).problem(t, http.StatusBadRequest, "invalid-input")
	e.do("PATCH", "/api/v1/schedules/nope?namespace=shop", `{"misfire":"all"}`).problem(t, http.StatusNotFound, "not-found")
	paused := e.do("POST", "/api/v1/schedules/beat/pause?namespace=shop", nil).want(t, http.StatusOK).schedule(t)
	if !paused.Paused || paused.NextRunAt != nil {
		t.Fatalf("%+v", paused)
	}
	resumed := e.do("POST", "/api/v1/schedules/beat/resume?namespace=shop", nil).want(t, http.StatusOK).schedule(t)
	if resumed.Paused || resumed.NextRunAt == nil {
		t.Fatalf("%+v", resumed)
	}
	deleted := e.do("DELETE", "/api/v1/schedules/beat?namespace=shop", nil).want(t, http.StatusOK).schedule(t)
	if !deleted.Deleted {
		t.Fatalf("%+v", deleted)
	}
	e.do("GET", "/api/v1/schedules/beat?namespace=shop", nil).problem(t, http.StatusNotFound, "not-found")
	e.do("DELETE", "/api/v1/schedules/beat?namespace=shop", nil).problem(t, http.StatusNotFound, "not-found")
	e.do("PUT", "/api/v1/schedules/beat", `{}`).problem(t, http.StatusMethodNotAllowed, problemMethodNotAllowed)
	e.do("GET", "/api/v1/schedules/beat/pause", nil).problem(t, http.StatusMethodNotAllowed, problemMethodNotAllowed)
}

func mustZone(t *testing.T, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// GET /schedules with Accept: text/event-stream sends the list at once
// and again at each change (a tick, a pause).
func TestSchedulesStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.do("POST", "/api/v1/schedules", `{"name":"tick","every":"1s","overlap":"allow","job":{"type":"s.x"}}`).want(t, http.StatusCreated)
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", e.ts.URL+"/api/v1/schedules?namespace=default", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	evs := make(chan sseEvent, 100)
	go readSSE(res.Body, evs)
	next := func(what string, ok func(ss []*projections.ScheduleView) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case ev, open := <-evs:
				if !open {
					t.Fatalf("stream ended waiting for %s", what)
				}
				var list struct{ Schedules []*projections.ScheduleView }
				if ev.event != "schedules" || json.Unmarshal([]byte(ev.data), &list) != nil {
					t.Fatalf("event %+v", ev)
				}
				if ok(list.Schedules) {
					return
				}
			case <-deadline:
				t.Fatalf("no %s in 20s", what)
			}
		}
	}
	next("the list", func(ss []*projections.ScheduleView) bool { return len(ss) == 1 && ss[0].Name == "tick" })
	next("a tick", func(ss []*projections.ScheduleView) bool { return len(ss) == 1 && len(ss[0].LastRuns) > 0 })
	e.do("POST", "/api/v1/schedules/tick/pause", nil).want(t, http.StatusOK)
	next("the pause", func(ss []*projections.ScheduleView) bool { return len(ss) == 1 && ss[0].Paused })
}

// Each mistake in a schedule, over HTTP and over the NATS command
// protocol: the same problem slug, naming the same field, and nothing
// written.
func TestScheduleMistakesBothWays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := testkit.Conn(t, e.srv)
	job := `"job":{"type":"voc.x"}`
	for _, tc := range []struct {
		name, body, slug, field string
	}{
		{"bad JSON", `{"name":`, problemMalformedRequest, ""},
		{"empty body", ``, problemMalformedRequest, ""},
		{"unknown field", `{"name":"x","every":"1m","when":"now",` + job + `}`, problemMalformedRequest, ""},
		{"wrong field type", `{"name":"x","every":"1m","overlap":3,` + job + `}`, problemMalformedRequest, "overlap"},
		{"not a duration", `{"name":"x","every":"soon",` + job + `}`, problemMalformedRequest, "every"},
		{"no name", `{"every":"1m",` + job + `}`, engine.ProblemInvalidInput, "name"},
		{"bad name", `{"name":"a.b","every":"1m",` + job + `}`, engine.ProblemInvalidInput, "name"},
		{"bad namespace", `{"name":"x","namespace":"a@b","every":"1m",` + job + `}`, "invalid-namespace", "namespace"},
		{"empty namespace", `{"name":"x","namespace":"","every":"1m",` + job + `}`, "invalid-namespace", "namespace"},
		{"no timing", `{"name":"x",` + job + `}`, engine.ProblemInvalidInput, "cron"},
		{"cron and every", `{"name":"x","cron":"* * * * *","every":"1m",` + job + `}`, engine.ProblemInvalidInput, "every"},
		{"bad cron", `{"name":"x","cron":"* * 32 * *",` + job + `}`, engine.ProblemInvalidInput, "cron"},
		{"cron of seconds", `{"name":"x","cron":"*/5 * * * * *",` + job + `}`, engine.ProblemInvalidInput, "cron"},
		{"unknown zone", `{"name":"x","cron":"0 3 * * *","timezone":"Moon/Base",` + job + `}`, engine.ProblemInvalidInput, "timezone"},
		{"every under a second", `{"name":"x","every":"0.5s",` + job + `}`, engine.ProblemInvalidInput, "every"},
		{"every negative", `{"name":"x","every":-60,` + job + `}`, engine.ProblemInvalidInput, "every"},
		{"every out of range", `{"name":"x","every":1e10,` + job + `}`, engine.ProblemInvalidInput, "every"},
		{"bad overlap", `{"name":"x","every":"1m","overlap":"wait",` + job + `}`, engine.ProblemInvalidInput, "overlap"},
		{"bad misfire", `{"name":"x","every":"1m","misfire":"later",` + job + `}`, engine.ProblemInvalidInput, "misfire"},
		{"jitter too long", `{"name":"x","every":"1m","jitter":"2m",` + job + `}`, engine.ProblemInvalidInput, "jitter"},
		{"no job", `{"name":"x","every":"1m"}`, engine.ProblemInvalidInput, "job"},
		{"job without type", `{"name":"x","every":"1m","job":{}}`, engine.ProblemInvalidInput, "job.type"},
		{"job with a key", `{"name":"x","every":"1m","job":{"type":"voc.x","idempotency_key":"k"}}`, engine.ProblemInvalidInput, "job.idempotency_key"},
		{"job of another namespace", `{"name":"x","every":"1m","job":{"type":"voc.x","namespace":"other"}}`, engine.ProblemInvalidInput, "job.namespace"},
		{"job of an unknown type", `{"name":"x","every":"1m","job":{"type":"billing:nothing"}}`, "unknown-type", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.eventCount()
			hr := e.do("POST", "/api/v1/schedules", tc.body)
			var hp Problem
			if hr.status < 400 || json.Unmarshal(hr.body, &hp) != nil {
				t.Fatalf("HTTP: %d %s", hr.status, hr.body)
			}
			m := nats.NewMsg(streams.CommandPrefix + ".schedule.create")
			m.Header.Set("Content-Type", "application/json")
			m.Data = []byte(tc.body)
			res, err := nc.RequestMsg(m, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var nr struct{ Error *Problem }
			if err := json.Unmarshal(res.Data, &nr); err != nil || nr.Error == nil {
				t.Fatalf("NATS: %s", res.Data)
			}
			np := nr.Error
			if hp.Type != tc.slug || np.Type != tc.slug {
				t.Fatalf("HTTP %s (%s), NATS %s (%s); want %s", hp.Type, hp.Detail, np.Type, np.Detail, tc.slug)
			}
			if hp.Status != np.Status || hp.Status != hr.status {
				t.Fatalf("status HTTP %d, NATS %d", hp.Status, np.Status)
			}
			if hp.Field != tc.field || np.Field != tc.field {
				t.Fatalf("field HTTP %q, NATS %q; want %q", hp.Field, np.Field, tc.field)
			}
			if e.eventCount() != before {
				t.Fatal("a refused request wrote events")
			}
		})
	}
	// The other verbs' mistakes.
	for _, tc := range []struct {
		name, method, path, verb, body, slug, field string
	}{
		{"get, bad name", "GET", "/api/v1/schedules/a.b", "schedule.get", `{"name":"a.b"}`, engine.ProblemInvalidInput, "name"},
		{"get, none", "GET", "/api/v1/schedules/none", "schedule.get", `{"name":"none"}`, engine.ProblemNotFound, ""},
		{"pause, none", "POST", "/api/v1/schedules/none/pause", "schedule.pause", `{"name":"none"}`, engine.ProblemNotFound, ""},
		{"delete, bad namespace", "DELETE", "/api/v1/schedules/x?namespace=a:b", "schedule.delete", `{"name":"x","namespace":"a:b"}`, "invalid-namespace", "namespace"},
		{"update, unknown field", "PATCH", "/api/v1/schedules/x", "schedule.update", `{"name":"x","bogus":true}`, problemMalformedRequest, ""},
		{"list, bad namespace", "GET", "/api/v1/schedules?namespace=a@b", "schedule.list", `{"namespace":"a@b"}`, "invalid-namespace", "namespace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.method == "PATCH" {
				body = tc.body
			}
			hr := e.do(tc.method, tc.path, body)
			var hp Problem
			if hr.status < 400 || json.Unmarshal(hr.body, &hp) != nil {
				t.Fatalf("HTTP: %d %s", hr.status, hr.body)
			}
			m := nats.NewMsg(streams.CommandPrefix + "." + tc.verb)
			m.Header.Set("Content-Type", "application/json")
			m.Data = []byte(tc.body)
			res, err := nc.RequestMsg(m, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var nr struct{ Error *Problem }
			if err := json.Unmarshal(res.Data, &nr); err != nil || nr.Error == nil {
				t.Fatalf("NATS: %s", res.Data)
			}
			if hp.Type != tc.slug || nr.Error.Type != tc.slug || hp.Field != tc.field || nr.Error.Field != tc.field {
				t.Fatalf("HTTP %s %q (%s), NATS %s %q (%s); want %s %q", hp.Type, hp.Field, hp.Detail, nr.Error.Type, nr.Error.Field, nr.Error.Detail, tc.slug, tc.field)
			}
		})
	}
	if n, err := e.store.Schedules.List(e.ctx, ""); err != nil || len(n) != 0 {
		t.Fatalf("schedules after the mistakes: %v %v", n, err)
	}
}

func FuzzDecodeSchedule(f *testing.F) {
	for _, s := range []string{`{"name":"n","every":"1m","job":{"type":"a"}}`,
		`{"name":"n","cron":"*/5 9-17 * * 1-5","timezone":"Europe/Berlin","job":{"type":"a","payload":{"x":1},"delay":"5s"},"overlap":"cancel","misfire":"all","jitter":"10s"}`,
		`{"name":"n","cron":"@every 90s","job":{"type":"a"}}`, `{"name":"n","cron":"@hourly","timezone":"UTC","job":{"type":"a"}}`,
		`{"name":"n","every":0.5,"job":{}}`, `{"name":"n","cron":"TZ=x * * * * *"}`, `{"cron":"* * * * *"}`, `{"name":1}`, `[]`, ``,
		`{"name":"n","every":1e300,"job":{"type":"a"}}`, `{"name":"n","cron":"0 0 30 2 *","job":{"type":"a"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeSchedule(body)
		checkDecodeError(t, err)
		if err == nil {
			if _, _, err := req.Spec(time.Now()); err != nil {
				t.Fatalf("accepted a request whose spec fails: %v", err)
			}
		}
		p, err := decodeSchedulePatch(body)
		checkDecodeError(t, err)
		if err == nil && req != nil {
			_, spec, _ := req.Spec(time.Now())
			if _, err := p.Apply("default", req.Name, spec, time.Now()); err != nil {
				checkDecodeError(t, err)
			}
		}
	})
}
