package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// natsSubmit sends a submit command over NATS: JSON when body is a
// string, else msgpack; it returns the reply read as JSON.
func natsSubmit(t *testing.T, nc *nats.Conn, body any) (job map[string]any, created *bool, problem *Problem) {
	t.Helper()
	m := nats.NewMsg(streams.CommandPrefix + ".submit")
	if s, ok := body.(string); ok {
		m.Data = []byte(s)
		m.Header.Set("Content-Type", "application/json")
	} else {
		var err error
		if m.Data, err = streams.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	res, err := nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	data := res.Data
	if _, ok := body.(string); !ok {
		var generic map[string]any
		if err := streams.Unmarshal(data, &generic); err != nil {
			t.Fatal(err)
		}
		data, _ = json.Marshal(generic)
	}
	var out struct {
		Job     map[string]any `json:"job"`
		Created *bool          `json:"created"`
		Error   *Problem       `json:"error"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("reply %s: %v", data, err)
	}
	return out.Job, out.Created, out.Error
}

// A unique job over HTTP and NATS: the first submit of a key creates
// (201), the next get it (200, created false) and it counts them; every
// bad unique option is the same problem over both, naming its field, and
// writes nothing.
func TestUniqueOverHTTPAndNATS(t *testing.T) {
	e := newEnv(t)
	nc := testkit.Conn(t, e.srv)
	body := `{"type": "g.none", "unique_key": "report-11", "unique_for": "1h", "unique_while": "any"}`
	first := e.do("POST", "/api/v1/jobs", body).want(t, http.StatusCreated).job(t)
	if first.Unique == nil || first.Unique.Key != "report-11" || first.Unique.While != domain.UniqueWhileAny ||
		first.Unique.ForSeconds != 3600 || first.Unique.Until == nil || !first.Unique.Holds {
		t.Fatalf("unique view %+v", first.Unique)
	}
	again := e.do("POST", "/api/v1/jobs", body).want(t, http.StatusOK)
	if j := again.job(t); j.ID != first.ID || again.header.Get("Location") != "/api/v1/jobs/"+first.ID {
		t.Fatalf("again: %s %v", again.body, again.header)
	}
	job, created, p := natsSubmit(t, nc, body)
	if p != nil || created == nil || *created || job["id"] != first.ID {
		t.Fatalf("nats: %v %v %+v", job, created, p)
	}
	job, created, p = natsSubmit(t, nc, map[string]any{"type": "g.none", "unique_fields": []string{"user"}, "payload": map[string]any{"user": "ada"}})
	if p != nil || created == nil || !*created {
		t.Fatalf("nats msgpack: %v %v %+v", job, created, p)
	}
	e.wantEvents(first.ID, domain.EvSubmitted, domain.EvDuplicate, domain.EvDuplicate)
	testkit.WaitFor(t, 10*time.Second, func() error {
		if v := e.get(first.ID); v.Duplicates != 2 {
			return fmt.Errorf("duplicates %d", v.Duplicates)
		}
		return nil
	})
	// The dashboard's job page shows the key, its terms and the duplicates.
	page := string(e.do("GET", "/jobs/"+first.ID, nil).want(t, http.StatusOK).body)
	for _, s := range []string{`id="f-unique-key">report-11<`, `while any, until <time`, `id="f-dups">2 duplicate submits<`} {
		if !strings.Contains(page, s) {
			t.Errorf("the job's page lacks %s", s)
		}
	}

	before := e.eventCount()
	for _, tc := range []struct{ body, field string }{
		{`{"type": "g.none", "unique_key": "k", "unique_fields": ["a"]}`, "unique_fields"},
		{`{"type": "g.none", "unique_key": "k", "unique_while": "done"}`, "unique_while"},
		{`{"type": "g.none", "unique_key": "k", "unique_for": "9000h"}`, "unique_for"},
		{`{"type": "g.none", "unique_key": "k", "unique_for": -1}`, "unique_for"},
		{`{"type": "g.none", "unique_fields": ["a", "b", "c", "d", "e", "f", "g", "h", "i"]}`, "unique_fields"},
		{`{"type": "g.none", "unique_fields": ["a b"]}`, "unique_fields"},
		{`{"type": "g.none", "unique_for": "1m"}`, "unique_for"},
		{`{"type": "g.none", "unique_key": "k", "idempotency_key": "i"}`, "unique_key"},
		{`{"type": "g.none", "unique_key": "fields:x"}`, "unique_key"},
	} {
		hp := e.do("POST", "/api/v1/jobs", tc.body).problem(t, http.StatusBadRequest, "invalid-input")
		if hp.Field != tc.field {
			t.Errorf("HTTP %s: field %q, want %q", tc.body, hp.Field, tc.field)
		}
		var asMap map[string]any
		if err := json.Unmarshal([]byte(tc.body), &asMap); err != nil {
			t.Fatal(err)
		}
		for _, b := range []any{tc.body, asMap} {
			_, _, np := natsSubmit(t, nc, b)
			if np == nil || np.Type != hp.Type || np.Field != hp.Field || np.Status != hp.Status {
				t.Errorf("NATS %v: %+v, HTTP said %+v", b, np, hp)
			}
		}
	}
	// A unique job takes no input files (its id is chosen before they are stored).
	if p := e.submitFiles(`{"type":"t","unique_key":"k"}`, upFile{"a", "x"}).problem(t, http.StatusBadRequest, "invalid-input"); p.Field != "unique_key" {
		t.Errorf("with files: field %q", p.Field)
	}
	if n := e.eventCount(); n != before {
		t.Fatalf("refusals wrote %d events", n-before)
	}
}
