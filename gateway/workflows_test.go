package gateway

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// A workflow over HTTP: POST /workflows answers 201 with its id and its
// steps' ids by name; an HTTP worker claims its steps in the graph's order,
// each seeing its dependencies' results by name in the claimed job
// ("inputs"); GET /workflows/{id} shows each step's state; a repeat with
// the same idempotency key is 200 and the same ids.
func TestWorkflowOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	body := `{"name":"etl","idempotency_key":"nightly-1","steps":[
		{"name":"fetch","type":"wf.http","payload":{"src":"s3"}},
		{"name":"parse","type":"wf.http","depends_on":["fetch"],"max_retries":0},
		{"name":"report","type":"wf.http","depends_on":["parse","fetch"]}]}`
	r := e.do("POST", "/api/v1/workflows", body).want(t, http.StatusCreated)
	var c projections.WorkflowCreated
	r.json(t, &c)
	if c.ID == "" || !c.Created || c.Name != "etl" || c.State != domain.StateWaiting || len(c.Steps) != 3 || c.Job == nil || c.Job.Workflow == nil {
		t.Fatalf("created %s", r.body)
	}
	if loc := r.header.Get("Location"); loc != "/api/v1/workflows/"+c.ID {
		t.Fatalf("Location %q", loc)
	}
	var again projections.WorkflowCreated
	e.do("POST", "/api/v1/workflows", body).want(t, http.StatusOK).json(t, &again)
	if again.ID != c.ID || again.Created || again.Steps["report"] != c.Steps["report"] {
		t.Fatalf("repeat %+v, first %+v", again, c)
	}
	var v projections.WorkflowView
	e.do("GET", "/api/v1/workflows/"+c.ID, nil).want(t, http.StatusOK).json(t, &v)
	if len(v.Steps) != 3 || v.Steps[0].Status != "queued" || v.Steps[1].Status != "pending" || v.Steps[2].Status != "pending" ||
		strings.Join(v.Steps[2].DependsOn, ",") != "parse,fetch" || len(v.Layers) != 3 {
		t.Fatalf("view %+v", v)
	}
	if p := e.get(c.Steps["parse"]); p.Hold == nil || p.Hold.Limit != domain.LimitDeps || strings.Join(p.Hold.Steps, ",") != "fetch" || p.Step == nil || p.Step.Workflow != c.ID {
		t.Fatalf("parse's view: hold %+v, step %+v", p.Hold, p.Step)
	}

	wk := e.register(`{"name":"wf","types":["wf.http"]}`)
	results := map[string]string{"fetch": `{"rows":3}`, "parse": `{"parsed":true}`, "report": `"done"`}
	for _, name := range []string{"fetch", "parse", "report"} {
		got := e.claim(wk, 10)
		if got.Job == nil || got.Job.ID != c.Steps[name] {
			t.Fatalf("claimed %+v, want step %s (%s)", got.Job, name, c.Steps[name])
		}
		switch name {
		case "fetch":
			if got.Job.Inputs != nil {
				t.Fatalf("fetch's inputs %s", got.Job.Inputs)
			}
		case "parse":
			if len(got.Job.Inputs) != 1 || string(got.Job.Inputs["fetch"]) != results["fetch"] {
				t.Fatalf("parse's inputs %s", got.Job.Inputs)
			}
		case "report":
			if len(got.Job.Inputs) != 2 || string(got.Job.Inputs["fetch"]) != results["fetch"] || string(got.Job.Inputs["parse"]) != results["parse"] {
				t.Fatalf("report's inputs %s", got.Job.Inputs)
			}
			in := e.do("GET", "/api/v1/jobs/"+got.Job.ID+"/step-inputs/parse?worker_id="+wk, nil).want(t, http.StatusOK)
			if string(in.body) != results["parse"] {
				t.Fatalf("step-inputs/parse: %s", in.body)
			}
			e.do("GET", "/api/v1/jobs/"+got.Job.ID+"/step-inputs/nope?worker_id="+wk, nil).problem(t, http.StatusNotFound, engine.ProblemNotFound)
		}
		e.patch(got.Job.ID, map[string]any{"worker_id": wk, "state": "running"}).want(t, http.StatusOK)
		e.patch(got.Job.ID, map[string]any{"worker_id": wk, "state": "succeeded", "result": json.RawMessage(results[name])}).want(t, http.StatusOK)
	}
	wf := e.waitState(c.ID, domain.StateSucceeded)
	if wf.Workflow == nil || wf.Workflow.Steps != 3 || wf.Fanout == nil {
		t.Fatalf("workflow's job %+v", wf)
	}
	e.do("GET", "/api/v1/workflows/"+c.ID, nil).want(t, http.StatusOK).json(t, &v)
	if v.State != domain.StateSucceeded || v.Counts["succeeded"] != 3 || string(v.Steps[2].Result) != `"done"` {
		t.Fatalf("view after %+v", v)
	}
	// A job that is not a workflow, a workflow that succeeded.
	e.do("GET", "/api/v1/workflows/"+c.Steps["fetch"], nil).problem(t, http.StatusNotFound, engine.ProblemNotFound)
	e.do("POST", "/api/v1/workflows/"+c.ID+"/retry", nil).problem(t, http.StatusConflict, engine.ProblemInvalidTransition)
}

// A refused workflow is the same problem over HTTP and over the NATS
// command protocol (submit_workflow), names what is wrong, and writes
// nothing.
func TestWorkflowRefusedBothWays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := testkit.Conn(t, e.srv)
	for _, tc := range []struct {
		name, body, slug, field, detail string
	}{
		{"cycle", `{"steps":[{"name":"a","type":"x.y","depends_on":["c"]},{"name":"b","type":"x.y","depends_on":["a"]},{"name":"c","type":"x.y","depends_on":["b"]}]}`,
			"invalid-workflow", "steps", "cycle a -> b -> c -> a"},
		{"unknown step", `{"steps":[{"name":"a","type":"x.y","depends_on":["zz"]}]}`,
			"invalid-workflow", "steps[0].depends_on", `depends on "zz"`},
		{"named twice", `{"steps":[{"name":"a","type":"x.y"},{"name":"a","type":"x.y"}]}`,
			"invalid-workflow", "steps[1].name", "named twice"},
		{"self", `{"steps":[{"name":"a","type":"x.y","depends_on":["a"]}]}`,
			"invalid-workflow", "steps[0].depends_on", "depends on itself"},
		{"bad policy", `{"on_failure":"maybe","steps":[{"name":"a","type":"x.y"}]}`,
			"invalid-workflow", "on_failure", "fail, skip or always"},
		{"no steps", `{"steps":[]}`, "invalid-workflow", "steps", "at least one step"},
		{"bad step field", `{"steps":[{"name":"a","type":"x.y","max_retries":-1}]}`,
			engine.ProblemInvalidInput, "steps[0].max_retries", ""},
		{"unknown step field", `{"steps":[{"name":"a","type":"x.y","bogus":1}]}`,
			problemMalformedRequest, "steps", "bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.eventCount()
			hp := e.do("POST", "/api/v1/workflows", tc.body).problem(t, http.StatusBadRequest, tc.slug)
			m := nats.NewMsg(streams.CommandPrefix + ".submit_workflow")
			m.Header.Set("Content-Type", "application/json")
			m.Data = []byte(tc.body)
			resp, err := nc.RequestMsg(m, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var nr struct{ Error *Problem }
			if err := json.Unmarshal(resp.Data, &nr); err != nil || nr.Error == nil {
				t.Fatalf("NATS: %s", resp.Data)
			}
			np := nr.Error
			if np.Type != tc.slug || np.Status != hp.Status {
				t.Fatalf("NATS %s %d (%s), HTTP %s %d", np.Type, np.Status, np.Detail, hp.Type, hp.Status)
			}
			if hp.Field != tc.field || np.Field != tc.field {
				t.Fatalf("field HTTP %q, NATS %q; want %q", hp.Field, np.Field, tc.field)
			}
			if !strings.Contains(hp.Detail, tc.detail) || !strings.Contains(np.Detail, tc.detail) {
				t.Fatalf("detail HTTP %q, NATS %q; want %q", hp.Detail, np.Detail, tc.detail)
			}
			if e.eventCount() != before {
				t.Fatal("a refused workflow wrote events")
			}
		})
	}
}

// The NATS verbs: submit_workflow, get_workflow answer what HTTP does.
func TestWorkflowOverNATS(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := testkit.Conn(t, e.srv)
	req := func(verb, body string, v any) {
		t.Helper()
		m := nats.NewMsg(streams.CommandPrefix + "." + verb)
		m.Header.Set("Content-Type", "application/json")
		m.Data = []byte(body)
		resp, err := nc.RequestMsg(m, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Workflow json.RawMessage
			Error    *Problem
		}
		if err := json.Unmarshal(resp.Data, &r); err != nil || r.Error != nil {
			t.Fatalf("%s: %s", verb, resp.Data)
		}
		if err := json.Unmarshal(r.Workflow, v); err != nil {
			t.Fatalf("%s: %s: %v", verb, resp.Data, err)
		}
	}
	var c projections.WorkflowCreated
	req("submit_workflow", `{"steps":[{"name":"a","type":"wf.nats"},{"name":"b","type":"wf.nats","depends_on":["a"]}]}`, &c)
	if !c.Created || len(c.Steps) != 2 {
		t.Fatalf("submit_workflow %+v", c)
	}
	var v projections.WorkflowView
	req("get_workflow", `{"id":"`+c.ID+`"}`, &v)
	if v.ID != c.ID || len(v.Steps) != 2 || v.Steps[0].Status != "queued" || v.Steps[1].Status != "pending" {
		t.Fatalf("get_workflow %+v", v)
	}
}

// resultJSONOf1 is the name of attempt 1's result kept as a file.
var resultJSONOf1 = regexp.MustCompile(`^out/result-1-[0-9a-f]{16}\.json$`)

// Results over 256 KiB over HTTP: a worker reports one larger than the
// gateway's 1 MiB body limit; the job's view names it (result_ref, result
// null) and GET /jobs/{id}/result gives it whole, with its digest; a
// dependent step's claim carries a result kept as a file inline while it
// fits the claim's 1 MiB, and names the rest in input_refs, read by
// step-inputs. A report over the result limit is 413.
func TestLargeResultsOverHTTP(t *testing.T) {
	t.Parallel()
	// Bodies of 16 MiB under -race take seconds: a lease that outlasts them.
	e := newEnv(t, func(c *Config) { c.Lease = time.Minute })
	body := `{"name":"big","steps":[
		{"name":"big","type":"wf.big"},
		{"name":"mid","type":"wf.big"},
		{"name":"use","type":"wf.big","depends_on":["big","mid"]}]}`
	var c projections.WorkflowCreated
	e.do("POST", "/api/v1/workflows", body).want(t, http.StatusCreated).json(t, &c)
	results := map[string]string{
		"big": `{"data":"` + strings.Repeat("b", 3<<19) + `"}`, // 1.5 MiB
		"mid": `{"data":"` + strings.Repeat("m", 300<<10) + `"}`,
	}
	wk := e.register(`{"name":"big","types":["wf.big"]}`)
	for range 2 {
		got := e.claim(wk, 10)
		name := ""
		for n, id := range c.Steps {
			if got.Job != nil && id == got.Job.ID {
				name = n
			}
		}
		if results[name] == "" {
			t.Fatalf("claimed %+v, want big or mid", got.Job)
		}
		e.do("GET", "/api/v1/jobs/"+got.Job.ID+"/result", nil).want(t, http.StatusAccepted)
		e.patch(got.Job.ID, map[string]any{"worker_id": wk, "state": "running"}).want(t, http.StatusOK)
		e.patch(got.Job.ID, map[string]any{"worker_id": wk, "state": "succeeded", "result": json.RawMessage(results[name])}).want(t, http.StatusOK)
	}
	for _, name := range []string{"big", "mid"} {
		v := e.get(c.Steps[name])
		if v.State != domain.StateSucceeded || string(v.Result) != "null" || v.ResultRef == nil ||
			!resultJSONOf1.MatchString(v.ResultRef.Name) || v.ResultRef.Size != int64(len(results[name])) {
			t.Fatalf("%s: %s, result_ref %+v", name, v.State, v.ResultRef)
		}
		r := e.do("GET", "/api/v1/jobs/"+c.Steps[name]+"/result", nil).want(t, http.StatusOK)
		if string(r.body) != results[name] || r.header.Get("Digest") != v.ResultRef.Digest || r.header.Get("Content-Type") != "application/json" {
			t.Fatalf("GET %s's result: %d bytes, digest %q", name, len(r.body), r.header.Get("Digest"))
		}
	}
	page := string(e.do("GET", "/jobs/"+c.Steps["big"], nil).want(t, http.StatusOK).body)
	if !strings.Contains(page, `<a id="result-ref" href="/api/v1/jobs/`+c.Steps["big"]+`/result">`+e.get(c.Steps["big"]).ResultRef.Name+`</a>`) {
		t.Fatalf("the job's page names no result file")
	}
	got := e.claim(wk, 10)
	if got.Job == nil || got.Job.ID != c.Steps["use"] {
		t.Fatalf("claimed %+v, want use", got.Job)
	}
	if len(got.Job.Inputs) != 1 || string(got.Job.Inputs["mid"]) != results["mid"] ||
		got.Job.InputRefs["big"] != "/api/v1/jobs/"+got.Job.ID+"/step-inputs/big" || len(got.Job.InputRefs) != 1 {
		t.Fatalf("use's inputs %d, input_refs %v", len(got.Job.Inputs), got.Job.InputRefs)
	}
	in := e.do("GET", got.Job.InputRefs["big"]+"?worker_id="+wk, nil).want(t, http.StatusOK)
	if string(in.body) != results["big"] {
		t.Fatalf("step-inputs/big: %d bytes", len(in.body))
	}
	e.patch(got.Job.ID, map[string]any{"worker_id": wk, "state": "running"}).want(t, http.StatusOK)
	over := `{"worker_id":"` + wk + `","state":"succeeded","result":"` + strings.Repeat("o", 17<<20) + `"}`
	e.do("PATCH", "/api/v1/jobs/"+got.Job.ID, over).problem(t, http.StatusRequestEntityTooLarge, "payload-too-large")
	over = `{"worker_id":"` + wk + `","state":"succeeded","result":"` + strings.Repeat("o", 16<<20) + `"}` // within the body's limit
	e.do("PATCH", "/api/v1/jobs/"+got.Job.ID, over).problem(t, http.StatusBadRequest, engine.ProblemInvalidInput)
	e.patch(got.Job.ID, map[string]any{"worker_id": wk, "state": "succeeded", "result": 1}).want(t, http.StatusOK)
	if v := e.waitState(c.ID, domain.StateSucceeded); v.ResultRef != nil {
		t.Fatalf("the workflow's result_ref %+v", v.ResultRef)
	}
	if r := e.do("GET", "/api/v1/jobs/"+c.Steps["use"]+"/result", nil).want(t, http.StatusOK); string(r.body) != "1" {
		t.Fatalf("use's result %s", r.body)
	}
}
