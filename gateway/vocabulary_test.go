package gateway

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// One error vocabulary: each mistake, made over HTTP and over the NATS
// command protocol, gets the same problem slug (and names the same field),
// and writes nothing either way.
func TestSameMistakeSameSlugBothWays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := testkit.Conn(t, e.srv)
	id := e.submit(`{"type":"voc.x"}`).ID
	ended := e.submit(`{"type":"voc.x"}`).ID
	if _, err := e.store.Cancel(e.ctx, ended, "ended"); err != nil {
		t.Fatal(err)
	}
	unknown := domain.NewID()
	big := `{"type":"voc.x","payload":"` + strings.Repeat("x", 3<<20) + `"}`
	for _, tc := range []struct {
		name         string
		method, path string // HTTP
		verb         string // NATS
		body         string // both, JSON
		slug, field  string
	}{
		{"bad JSON", "POST", "/api/v1/jobs", "submit", `{"type":`, problemMalformedRequest, ""},
		{"empty body", "POST", "/api/v1/jobs", "submit", ``, problemMalformedRequest, ""},
		{"unknown field", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","bogus":1}`, problemMalformedRequest, ""},
		{"trailing data", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x"} {}`, problemMalformedRequest, ""},
		{"wrong field type", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","max_retries":"three"}`, problemMalformedRequest, "max_retries"},
		{"not a duration", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","delay":"soon"}`, problemMalformedRequest, "delay"},
		{"not a time", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","run_at":"tomorrow"}`, problemMalformedRequest, "run_at"},
		{"duration out of range", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","delay":1e10}`, engine.ProblemInvalidInput, "delay"},
		{"number out of range", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","max_retries":-1}`, engine.ProblemInvalidInput, "max_retries"},
		{"timeout 0", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","timeout":0}`, engine.ProblemInvalidInput, "timeout"},
		{"bad type", "POST", "/api/v1/jobs", "submit", `{"type":"bad type"}`, engine.ProblemInvalidInput, "type"},
		{"no type", "POST", "/api/v1/jobs", "submit", `{}`, engine.ProblemInvalidInput, "type"},
		{"bad parent", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","parent":"nope"}`, engine.ProblemInvalidInput, "parent"},
		{"concurrency key too long", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","concurrency_key":"` + strings.Repeat("k", 257) + `"}`, engine.ProblemInvalidInput, "concurrency_key"},
		{"concurrency key not a string", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","concurrency_key":7}`, problemMalformedRequest, "concurrency_key"},
		{"bad namespace", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","namespace":"a@b"}`, "invalid-namespace", "namespace"},
		{"empty namespace", "POST", "/api/v1/jobs", "submit", `{"type":"voc.x","namespace":""}`, "invalid-namespace", "namespace"},
		{"bad registered type", "POST", "/api/v1/jobs", "submit", `{"type":"a:b:c:d"}`, "invalid-type-name", "type"},
		{"unknown registered type", "POST", "/api/v1/jobs", "submit", `{"type":"billing:nothing"}`, "unknown-type", ""},
		{"too large", "POST", "/api/v1/jobs", "submit", big, problemPayloadTooLarge, ""},
		{"malformed id", "GET", "/api/v1/jobs/nope", "get", `{"id":"nope"}`, engine.ProblemNotFound, ""},
		{"unknown id", "GET", "/api/v1/jobs/" + unknown, "get", `{"id":"` + unknown + `"}`, engine.ProblemNotFound, ""},
		{"cancel malformed id", "POST", "/api/v1/jobs/nope/cancel", "cancel", `{"id":"nope"}`, engine.ProblemNotFound, ""},
		{"cancel unknown id", "POST", "/api/v1/jobs/" + unknown + "/cancel", "cancel", `{"id":"` + unknown + `"}`, engine.ProblemNotFound, ""},
		{"events malformed id", "GET", "/api/v1/jobs/nope/events", "history", `{"id":"nope"}`, engine.ProblemNotFound, ""},
		{"reason too long", "POST", "/api/v1/jobs/" + id + "/cancel", "cancel", `{"id":"` + id + `","reason":"` + strings.Repeat("r", 1025) + `"}`, engine.ProblemInvalidInput, "reason"},
		{"list bad state", "GET", "/api/v1/jobs?state=sleeping", "list", `{"state":"sleeping"}`, engine.ProblemInvalidInput, "state"},
		{"list bad queue", "GET", "/api/v1/jobs?queue=a.b", "list", `{"queue":"a.b"}`, engine.ProblemInvalidInput, "queue"},
		{"list bad parent", "GET", "/api/v1/jobs?parent=nope", "list", `{"parent":"nope"}`, engine.ProblemInvalidInput, "parent"},
		{"list bad cursor", "GET", "/api/v1/jobs?cursor=nope", "list", `{"cursor":"nope"}`, engine.ProblemBadCursor, "cursor"},
		{"retry malformed id", "POST", "/api/v1/jobs/nope/retry", "retry", `{"id":"nope"}`, engine.ProblemNotFound, ""},
		{"retry unknown id", "POST", "/api/v1/jobs/" + unknown + "/retry", "retry", `{"id":"` + unknown + `"}`, engine.ProblemNotFound, ""},
		{"retry of a job not ended", "POST", "/api/v1/jobs/" + id + "/retry", "retry", `{"id":"` + id + `"}`, engine.ProblemInvalidTransition, ""},
		{"retry unknown field", "POST", "/api/v1/jobs/" + ended + "/retry", "retry", `{"id":"` + ended + `","bogus":1}`, problemMalformedRequest, ""},
		{"purge malformed id", "POST", "/api/v1/jobs/nope/purge", "purge_job", `{"id":"nope"}`, engine.ProblemNotFound, ""},
		{"purge unknown id", "POST", "/api/v1/jobs/" + unknown + "/purge", "purge_job", `{"id":"` + unknown + `"}`, engine.ProblemNotFound, ""},
		{"purge not finished", "POST", "/api/v1/jobs/" + id + "/purge", "purge_job", `{"id":"` + id + `"}`, engine.ProblemInvalidTransition, ""},
		{"purge reason too long", "POST", "/api/v1/jobs/" + id + "/purge", "purge_job", `{"id":"` + id + `","reason":"` + strings.Repeat("r", 1025) + `"}`, engine.ProblemInvalidInput, "reason"},
		{"priority malformed id", "POST", "/api/v1/jobs/nope/priority", "reprioritize", `{"id":"nope","priority":1}`, engine.ProblemNotFound, ""},
		{"priority unknown id", "POST", "/api/v1/jobs/" + unknown + "/priority", "reprioritize", `{"id":"` + unknown + `","priority":1}`, engine.ProblemNotFound, ""},
		{"priority out of range", "POST", "/api/v1/jobs/" + id + "/priority", "reprioritize", `{"id":"` + id + `","priority":1001}`, engine.ProblemInvalidInput, "priority"},
		{"priority missing", "POST", "/api/v1/jobs/" + id + "/priority", "reprioritize", `{"id":"` + id + `"}`, engine.ProblemInvalidInput, "priority"},
		{"priority not a number", "POST", "/api/v1/jobs/" + id + "/priority", "reprioritize", `{"id":"` + id + `","priority":"high"}`, problemMalformedRequest, "priority"},
		{"priority of an ended job", "POST", "/api/v1/jobs/" + ended + "/priority", "reprioritize", `{"id":"` + ended + `","priority":5}`, engine.ProblemInvalidTransition, ""},
		{"children malformed id", "GET", "/api/v1/jobs/nope/children", "children", `{"id":"nope"}`, engine.ProblemNotFound, ""},
		{"children unknown id", "GET", "/api/v1/jobs/" + unknown + "/children", "children", `{"id":"` + unknown + `"}`, engine.ProblemNotFound, ""},
		{"pause bad queue", "POST", "/api/v1/queues/a.b/pause", "queue.pause", `{"queue":"a.b"}`, engine.ProblemInvalidInput, "queue"},
		{"limits bad queue", "PUT", "/api/v1/queues/a.b", "queue.limits", `{"queue":"a.b","max_running":1}`, engine.ProblemInvalidInput, "queue"},
		{"limits out of range", "PUT", "/api/v1/queues/q", "queue.limits", `{"queue":"q","max_running":-1}`, engine.ProblemInvalidInput, "max_running"},
		{"limits wrong type", "PUT", "/api/v1/queues/q", "queue.limits", `{"queue":"q","max_running":"five"}`, problemMalformedRequest, "max_running"},
		{"limits unknown field", "PUT", "/api/v1/queues/q", "queue.limits", `{"queue":"q","max":1}`, problemMalformedRequest, ""},
		{"register an internal type", "PUT", "/api/v1/types/@internal/cat/x", "type.register", `{"type":"@internal:cat:x"}`, "internal-type", ""},
		{"register a bad schema", "PUT", "/api/v1/types/acme/cat/x", "type.register", `{"type":"acme:cat:x","schema":{"type":5}}`, "invalid-schema", ""},
		{"a type never registered", "GET", "/api/v1/types/acme/cat/none", "type.get", `{"type":"acme:cat:none"}`, "unknown-type", ""},
		{"types of a bad namespace", "GET", "/api/v1/types?namespace=a@b", "types", `{"namespace":"a@b"}`, "invalid-namespace", "namespace"},
		{"namespace bad name", "PUT", "/api/v1/namespaces/a@b", "namespace.set", `{"namespace":"a@b","strict_types":true}`, "invalid-namespace", "namespace"},
		{"retention not a duration", "PUT", "/api/v1/namespaces/ns", "namespace.set", `{"namespace":"ns","retention":"soon"}`, problemMalformedRequest, "retention"},
		{"token bad role", "POST", "/api/v1/tokens", "token.create", `{"name":"n","namespace":"acme","role":"boss"}`, engine.ProblemInvalidInput, "role"},
		{"token ttl not a duration", "POST", "/api/v1/tokens", "token.create", `{"name":"n","namespace":"acme","role":"reader","ttl":"soon"}`, engine.ProblemInvalidInput, "ttl"},
		{"token admin of one namespace", "POST", "/api/v1/tokens", "token.create", `{"name":"n","namespace":"acme","role":"admin"}`, engine.ProblemInvalidInput, "namespace"},
		{"revoke unknown token", "DELETE", "/api/v1/tokens/" + unknown, "token.revoke", `{"id":"` + unknown + `"}`, "unknown-token", ""},
		{"download malformed id", "GET", "/api/v1/jobs/nope/download", "file.download", `{"id":"nope"}`, engine.ProblemNotFound, ""},
		{"download without an archive", "GET", "/api/v1/jobs/" + ended + "/download", "file.download", `{"id":"` + ended + `"}`, engine.ProblemNoArchive, ""},
		{"input of a job not held", "GET", "/api/v1/jobs/" + id + "/inputs/a.txt?worker_id=wk-" + unknown, "file.input",
			`{"id":"` + id + `","name":"a.txt","worker_id":"wk-` + unknown + `"}`, engine.ProblemNotClaimant, ""},
		{"result of a job not held", "PUT", "/api/v1/jobs/" + id + "/result?worker_id=wk-" + unknown, "file.result",
			`{"id":"` + id + `","worker_id":"wk-` + unknown + `","offset":0,"data":""}`, engine.ProblemNotClaimant, ""},
		{"audit not an instant", "GET", "/api/v1/audit/verify?since=monday", "audit_verify", `{"since":"monday"}`, engine.ProblemInvalidInput, "since"},
		{"audit until before since", "GET", "/api/v1/audit/verify?since=2021-01-01T00:00:00Z&until=2020-01-01T00:00:00Z", "audit_verify",
			`{"since":"2021-01-01T00:00:00Z","until":"2020-01-01T00:00:00Z"}`, engine.ProblemInvalidInput, "until"},
		{"audit bad queue", "GET", "/api/v1/audit/verify?queue=a.b", "audit_verify", `{"queue":"a.b"}`, engine.ProblemInvalidInput, "queue"},
		{"audit bad namespace", "GET", "/api/v1/audit/verify?namespace=a@b", "audit_verify", `{"namespace":"a@b"}`, engine.ProblemInvalidInput, "namespace"},
		{"audit not a key", "GET", "/api/v1/audit/verify?pubkey=nope", "audit_verify", `{"pubkey":"nope"}`, engine.ProblemInvalidInput, "pubkey"},
		{"audit key without a checkpoint", "GET", "/api/v1/audit/pubkey", "audit_pubkey", `{}`, engine.ProblemNotFound, ""},
		{"list at not an instant", "GET", "/api/v1/jobs?at=noon", "list_at", `{"at":"noon"}`, engine.ProblemInvalidInput, "at"},
		{"list at bad state", "GET", "/api/v1/jobs?at=2026-11-26T14:02:00Z&state=sleeping", "list_at", `{"at":"2026-11-26T14:02:00Z","state":"sleeping"}`, engine.ProblemInvalidInput, "state"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := e.eventCount()
			var body any
			if tc.method != "GET" {
				body = tc.body
			}
			// A cancel takes its id from the path: its body is the reason;
			// so for the other verbs whose route names what they act on.
			if keys := inPath[tc.verb]; keys != nil {
				var b map[string]any
				_ = json.Unmarshal([]byte(tc.body), &b)
				for _, k := range keys {
					delete(b, k)
				}
				body = b
			}
			hr := e.do(tc.method, tc.path, body)
			var hp Problem
			if hr.status < 400 || json.Unmarshal(hr.body, &hp) != nil {
				t.Fatalf("HTTP: %d %s", hr.status, hr.body)
			}
			m := nats.NewMsg(streams.CommandPrefix + "." + tc.verb)
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
}

// inPath are the fields of a command that its HTTP route has in its path
// (or query), not in its body.
var inPath = map[string][]string{"cancel": {"id"}, "retry": {"id"}, "reprioritize": {"id"}, "purge_job": {"id"}, "queue.pause": {"queue"}, "queue.limits": {"queue"},
	"type.register": {"type"}, "namespace.set": {"namespace"}, "token.revoke": {"id"}, "file.result": {"id", "worker_id", "offset", "data"}}
