package gateway

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// The registry over HTTP: registration statuses, the listing from a
// namespace, schema violations with their pointers, unknown types.
func TestTypesOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	schema := `{"type":"object","required":["w"],"properties":{"w":{"type":"integer"}}}`
	var tv typeView
	e.do("PUT", "/api/v1/types/acme/img/thumb", `{"schema":`+schema+`,"description":"thumbnails"}`).want(t, 201).json(t, &tv)
	if tv.FullName != "acme:img:thumb" || tv.Deleted || tv.Description != "thumbnails" || string(tv.Schema) != `{"properties":{"w":{"type":"integer"}},"required":["w"],"type":"object"}` {
		t.Fatalf("registered %+v", tv.TypeView)
	}
	e.do("PUT", "/api/v1/types/acme/img/thumb", `{"schema":`+schema+`}`).want(t, 200).json(t, &tv)
	if tv.Description != "thumbnails" {
		t.Fatalf("a registration without a description dropped it: %q", tv.Description)
	}
	e.do("PUT", "/api/v1/types/acme/img/thumb", `{"description":"small images"}`).want(t, 200)
	e.do("GET", "/api/v1/types/acme/img/thumb", nil).want(t, 200).json(t, &tv)
	if tv.Description != "small images" || string(tv.Schema) == "null" {
		t.Fatalf("a new description: %q, schema %s", tv.Description, tv.Schema)
	}
	e.do("PUT", "/api/v1/types/acme/img/thumb", `{"schema":{"type":"string"}}`).problem(t, 409, "schema-conflict")
	e.do("PUT", "/api/v1/types/@global/img/resize", `{}`).want(t, 201)
	e.do("PUT", "/api/v1/types/other/img/crop", `{}`).want(t, 201)
	for _, c := range []struct{ path, body, slug string }{
		{"/api/v1/types/ac.me/img/x", `{}`, "invalid-namespace"},
		{"/api/v1/types/acme/im@g/x", `{}`, "invalid-category"},
		{"/api/v1/types/acme/img/x%20y", `{}`, "invalid-type-name"},
	} {
		e.do("PUT", c.path, c.body).problem(t, 400, c.slug)
	}
	e.do("PUT", "/api/v1/types/acme/img/bad", `{"schema":{"type":"nope"}}`).problem(t, 422, "invalid-schema")
	e.do("PUT", "/api/v1/types/acme/img/bad", `{"schema":{"type":"object"},"extra":1}`).problem(t, 400, problemMalformedRequest)
	// A schema refers only to itself: no file or URL is read for it.
	secret := filepath.Join(t.TempDir(), "secret.json")
	if err := os.WriteFile(secret, []byte(`{"const":"s3cr3t"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"file://" + secret, "http://127.0.0.1:1/x.json", "other.json"} {
		p := e.do("PUT", "/api/v1/types/acme/img/ref", `{"schema":{"$ref":"`+ref+`"}}`).problem(t, 422, "invalid-schema")
		if strings.Contains(p.Detail, "s3cr3t") {
			t.Fatalf("detail shows the file: %s", p.Detail)
		}
	}
	e.do("PUT", "/api/v1/types/acme/img/big", `{"schema":{"description":"`+strings.Repeat("x", 64<<10)+`"}}`).problem(t, 422, "invalid-schema")
	e.do("PUT", "/api/v1/types/@internal/demo/clock", `{"schema":{"not":{}}}`).problem(t, 403, "internal-type")
	// Numbers stay as written: a float64 would round these.
	e.do("PUT", "/api/v1/types/acme/img/exact", `{"schema":{"const":12345678901234567891,"multipleOf":0.1000000000000000000001}}`).want(t, 201).json(t, &tv)
	if string(tv.Schema) != `{"const":12345678901234567891,"multipleOf":0.1000000000000000000001}` {
		t.Fatalf("schema stored as %s", tv.Schema)
	}

	var list struct{ Types []typeView }
	e.do("GET", "/api/v1/types?namespace=acme", nil).want(t, 200).json(t, &list)
	var names []string
	for _, v := range list.Types {
		names = append(names, v.FullName)
	}
	if strings.Join(names, ",") != "@global:img:resize,acme:img:exact,acme:img:thumb" {
		t.Fatalf("types visible from acme: %v", names)
	}
	e.do("GET", "/api/v1/types/acme/img/thumb", nil).want(t, 200).json(t, &tv)
	e.do("GET", "/api/v1/types/acme/img/nope", nil).problem(t, 404, "unknown-type")
	e.do("GET", "/api/v1/types?deleted=maybe", nil).problem(t, 400, "invalid-input")

	before := e.eventCount()
	p := e.do("POST", "/api/v1/jobs", `{"namespace":"acme","type":"img:thumb","payload":{"w":"wide"}}`).problem(t, 422, "schema-violation")
	if len(p.Violations) != 1 || p.Violations[0].Pointer != "/w" || p.Field != "payload" {
		t.Fatalf("violations %+v", p)
	}
	e.do("POST", "/api/v1/jobs", `{"namespace":"acme","type":"img:nothing"}`).problem(t, 404, "unknown-type")
	e.do("POST", "/api/v1/jobs", `{"namespace":"acme","type":"other:img:crop"}`).problem(t, 404, "unknown-type")
	e.do("POST", "/api/v1/jobs", `{"namespace":"a:b","type":"demo.echo"}`).problem(t, 400, "invalid-namespace")
	if after := e.eventCount(); after != before {
		t.Fatalf("refused submits wrote %d events", after-before)
	}
	j := e.submit(`{"namespace":"acme","type":"img:thumb","payload":{"w":64}}`)
	if j.Type != "acme:img:thumb" || j.Namespace != "acme" {
		t.Fatalf("submitted %+v", j)
	}
	e.waitState(j.ID, domain.StateQueued)
	e.do("GET", "/api/v1/types/acme/img/thumb", nil).want(t, 200).json(t, &tv)
	if tv.Queued != 1 {
		t.Fatalf("counts %+v", tv)
	}
}

// Namespaces: listed with their jobs by state and settings; a strict one
// takes registered types only.
func TestNamespacesOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.submit(`{"namespace":"acme","type":"demo.echo"}`)
	e.do("PUT", "/api/v1/types/acme/img/thumb", `{}`).want(t, 201)
	var ns namespaceView
	e.do("PUT", "/api/v1/namespaces/acme", `{"strict_types":true}`).want(t, 200).json(t, &ns)
	if !ns.Settings.StrictTypes || ns.Name != "acme" {
		t.Fatalf("namespace %+v", ns)
	}
	e.do("PUT", "/api/v1/namespaces/ac:me", `{"strict_types":true}`).problem(t, 400, "invalid-namespace")
	e.do("PUT", "/api/v1/namespaces/acme", `{"strict":true}`).problem(t, 400, problemMalformedRequest)
	e.do("POST", "/api/v1/jobs", `{"namespace":"acme","type":"demo.echo"}`).problem(t, 404, "unknown-type")
	e.submit(`{"namespace":"acme","type":"img:thumb"}`)
	testkit.WaitFor(t, 10*time.Second, func() error {
		var list struct{ Namespaces []namespaceView }
		e.do("GET", "/api/v1/namespaces", nil).want(t, 200).json(t, &list)
		for _, n := range list.Namespaces {
			if n.Name == "acme" && n.Settings.StrictTypes && n.Jobs[domain.StateQueued] == 2 {
				return nil
			}
		}
		return testkit.Errorf("namespaces %+v", list.Namespaces)
	})
}

// A remote worker registers its types with schemas in its namespace; an
// @internal type is refused to it, at registration and at claim.
func TestWorkerRegistersTypes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var reg WorkerView
	e.do("POST", "/api/v1/workers", `{"name":"py","namespace":"acme","types":["demo.echo",{"name":"img:thumb","schema":{"type":"object","required":["src"]}},"@global:img:resize"]}`).
		want(t, 201).json(t, &reg)
	if strings.Join(reg.Types, ",") != "demo.echo,acme:img:thumb,@global:img:resize" {
		t.Fatalf("registered types %v", reg.Types)
	}
	var tv typeView
	e.do("GET", "/api/v1/types/acme/img/thumb", nil).want(t, 200).json(t, &tv)
	if string(tv.Schema) != `{"required":["src"],"type":"object"}` || len(tv.LiveWorkers) != 1 || tv.LiveWorkers[0] != reg.ID {
		t.Fatalf("type %+v", tv)
	}
	e.do("POST", "/api/v1/workers", `{"name":"x","namespace":"acme","types":[{"name":"img:thumb","schema":{"type":"string"}}]}`).
		problem(t, 409, "schema-conflict")
	// A refused type refuses the whole registration: the types before it
	// are not registered either.
	before := e.eventCount()
	e.do("POST", "/api/v1/workers", `{"name":"x","types":[{"name":"img:new","schema":{"type":"object"}},{"name":"img:bad","schema":{"type":"nope"}}]}`).
		problem(t, 422, "invalid-schema")
	// One type twice, under one spelling or two, with two schemas.
	e.do("POST", "/api/v1/workers", `{"name":"x","types":[{"name":"img:new","schema":{"type":"object"}},{"name":"img:new","schema":{"type":"array"}}]}`).
		problem(t, 400, "invalid-input")
	e.do("POST", "/api/v1/workers", `{"name":"x","types":[{"name":"img:new","schema":{"type":"object"}},{"name":"default:img:new","schema":{"type":"array"}}]}`).
		problem(t, 409, "schema-conflict")
	e.do("GET", "/api/v1/types/default/img/new", nil).problem(t, 404, "unknown-type")
	if after := e.eventCount(); after != before {
		t.Fatalf("a refused registration wrote %d events", after-before)
	}
	e.do("POST", "/api/v1/workers", `{"name":"x","types":["@internal:demo:clock"]}`).problem(t, 403, "internal-type")
	e.do("POST", "/api/v1/workers", `{"name":"x","types":[{"name":"demo.echo","schema":{}}]}`).problem(t, 400, "invalid-input")
	e.do("POST", "/api/v1/workers", `{"name":"x","namespace":"a@b","types":["t"]}`).problem(t, 400, "invalid-namespace")
	id := e.submit(`{"namespace":"acme","type":"img:thumb","payload":{"src":"a.png"}}`).ID
	c := e.claim(reg.ID, 10)
	if c.Job == nil || c.Job.ID != id || c.Job.Type != "acme:img:thumb" {
		t.Fatalf("claimed %+v", c.Job)
	}
}

// An @internal type runs in the engine's process (an SDK worker there), is
// never handed to a remote worker, and a Go handler's payload type is the
// schema every client is held to.
func TestInternalAndGeneratedSchema(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cl, err := jetflow.NewClient(e.ctx, testkit.Conn(t, e.srv), jetflow.ClientOptions{Name: "engine", Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	type Thumb struct {
		Src   string `json:"src"`
		Width int    `json:"width,omitempty"`
	}
	w := jetflow.NewWorker(cl, jetflow.WorkerConfig{Namespace: "acme", Logger: testkit.Logger(t)})
	jetflow.Register(w, "img:thumb", func(_ context.Context, job *jetflow.Job[Thumb]) (string, error) {
		return "thumb of " + job.Payload.Src, nil
	})
	jetflow.Register(w, "@internal:demo:clock", func(context.Context, *jetflow.Job[any]) (string, error) { return "tick", nil })
	if err := w.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })

	p := e.do("POST", "/api/v1/jobs", `{"namespace":"acme","type":"img:thumb","payload":{"src":7}}`).problem(t, 422, "schema-violation")
	if len(p.Violations) != 1 || p.Violations[0].Pointer != "/src" {
		t.Fatalf("violations %+v", p.Violations)
	}
	e.do("POST", "/api/v1/jobs", `{"namespace":"acme","type":"img:thumb","payload":{"width":3}}`).problem(t, 422, "schema-violation")
	ok := e.submit(`{"namespace":"acme","type":"img:thumb","payload":{"src":"a.png"}}`)
	if done := e.waitState(ok.ID, domain.StateSucceeded); string(done.Result) != `"thumb of a.png"` {
		t.Fatalf("result %s", done.Result)
	}
	var schema struct {
		Required []string `json:"required"`
	}
	var tv typeView
	e.do("GET", "/api/v1/types/acme/img/thumb", nil).want(t, 200).json(t, &tv)
	if err := json.Unmarshal(tv.Schema, &schema); err != nil || strings.Join(schema.Required, ",") != "src" {
		t.Fatalf("generated schema %s", tv.Schema)
	}

	internal := e.submit(`{"namespace":"acme","type":"@internal:demo:clock"}`)
	if done := e.waitState(internal.ID, domain.StateSucceeded); done.Worker != w.ID() {
		t.Fatalf("@internal job run by %q", done.Worker)
	}
	// A claim of an @internal type is refused, whoever asks.
	_, err = e.g.remote.Claim(e.ctx, "wk-01ARZ3NDEKTSV4RRFFQ69G5FAV", nil, []string{"@internal:demo:clock"}, 0, "")
	if p := problemOf(err); p.Type != "internal-type" || p.Status != 403 {
		t.Fatalf("claim of an @internal type: %v", err)
	}
}
