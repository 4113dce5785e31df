package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/engine"
)

// Every field of a body or query whose value is out of range is refused
// with 400 (or 422), a problem of a stable type naming the field, and
// nothing is written: no event, no worker registration.
func TestBadFieldsNameTheFieldWriteNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"w","types":["bad.in"]}`)
	id := e.submit(`{"type":"bad.in"}`).ID
	e.claimJob(wk, id)
	var workers struct {
		Workers []WorkerView `json:"workers"`
	}
	e.do("GET", "/api/v1/workers", nil).want(t, 200).json(t, &workers)
	nWorkers := len(workers.Workers)
	before := e.eventCount()
	invalid, malformed := engine.ProblemInvalidInput, problemMalformedRequest
	submit := func(fields string) string { return `{"type":"bad.in",` + fields + `}` }
	patch := func(fields string) string { return `{"worker_id":"` + wk + `",` + fields + `}` }
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		slug, field              string
	}{
		{"max_retries -1", "POST", "/api/v1/jobs", submit(`"max_retries":-1`), 400, invalid, "max_retries"},
		{"max_retries 1001", "POST", "/api/v1/jobs", submit(`"max_retries":1001`), 400, invalid, "max_retries"},
		{"max_retries 1e20", "POST", "/api/v1/jobs", submit(`"max_retries":1e20`), 400, malformed, "max_retries"},
		{"max_retries 1.5", "POST", "/api/v1/jobs", submit(`"max_retries":1.5`), 400, malformed, "max_retries"},
		{"max_lease_requeues -1", "POST", "/api/v1/jobs", submit(`"max_lease_requeues":-1`), 400, invalid, "max_lease_requeues"},
		{"timeout 0", "POST", "/api/v1/jobs", submit(`"timeout":0`), 400, invalid, "timeout"},
		{"timeout -1s", "POST", "/api/v1/jobs", submit(`"timeout":"-1s"`), 400, invalid, "timeout"},
		{"timeout soon", "POST", "/api/v1/jobs", submit(`"timeout":"soon"`), 400, malformed, "timeout"},
		{"backoff -0.5", "POST", "/api/v1/jobs", submit(`"backoff":-0.5`), 400, invalid, "backoff"},
		{"backoff_cap -1", "POST", "/api/v1/jobs", submit(`"backoff_cap":-1`), 400, invalid, "backoff_cap"},
		{"delay -1", "POST", "/api/v1/jobs", submit(`"delay":-1`), 400, invalid, "delay"},
		{"delay 1e10 s", "POST", "/api/v1/jobs", submit(`"delay":1e10`), 400, invalid, "delay"},
		{"delay 1e300 s", "POST", "/api/v1/jobs", submit(`"delay":1e300`), 400, invalid, "delay"},
		{"queue_timeout -5", "POST", "/api/v1/jobs", submit(`"queue_timeout":-5`), 400, invalid, "queue_timeout"},
		{"queue_timeout 1e12 s", "POST", "/api/v1/jobs", submit(`"queue_timeout":"1e12"`), 400, invalid, "queue_timeout"},
		{"jitter -0.1", "POST", "/api/v1/jobs", submit(`"jitter":-0.1`), 400, invalid, "jitter"},
		{"jitter 1e308", "POST", "/api/v1/jobs", submit(`"jitter":1e308`), 400, invalid, "jitter"},
		{"priority 1001", "POST", "/api/v1/jobs", submit(`"priority":1001`), 400, invalid, "priority"},
		{"priority -1001", "POST", "/api/v1/jobs", submit(`"priority":-1001`), 400, invalid, "priority"},
		{"empty tag", "POST", "/api/v1/jobs", submit(`"tags":[""]`), 400, invalid, "tags"},
		{"empty retry_on", "POST", "/api/v1/jobs", submit(`"retry_on":[""]`), 400, invalid, "retry_on"},
		{"no_retry_on with a newline", "POST", "/api/v1/jobs", submit(`"no_retry_on":["a\nb"]`), 400, invalid, "no_retry_on"},
		{"run_at not a time", "POST", "/api/v1/jobs", submit(`"run_at":"tomorrow"`), 400, malformed, "run_at"},
		{"claim wait -1", "POST", "/api/v1/tasks/claim", `{"worker_id":"` + wk + `","wait":-1}`, 400, invalid, "wait"},
		{"claim wait 1e10 s", "POST", "/api/v1/tasks/claim", `{"worker_id":"` + wk + `","wait":1e10}`, 400, invalid, "wait"},
		{"claim wait soon", "POST", "/api/v1/tasks/claim", `{"worker_id":"` + wk + `","wait":"soon"}`, 400, malformed, "wait"},
		{"claim without worker", "POST", "/api/v1/tasks/claim", `{"wait":1}`, 400, invalid, "worker_id"},
		{"register concurrency 0", "POST", "/api/v1/workers", `{"types":["a"],"concurrency":0}`, 400, invalid, "concurrency"},
		{"register concurrency -1", "POST", "/api/v1/workers", `{"types":["a"],"concurrency":-1}`, 400, invalid, "concurrency"},
		{"register concurrency 10001", "POST", "/api/v1/workers", `{"types":["a"],"concurrency":10001}`, 400, invalid, "concurrency"},
		{"register concurrency x", "POST", "/api/v1/workers", `{"types":["a"],"concurrency":"x"}`, 400, malformed, "concurrency"},
		{"register no queues", "POST", "/api/v1/workers", `{"types":["a"],"queues":[]}`, 400, invalid, "queues"},
		{"register no types", "POST", "/api/v1/workers", `{"types":[]}`, 400, invalid, "types"},
		{"register too many types", "POST", "/api/v1/workers", `{"types":[` + typeList(65) + `]}`, 422, problemRegistrationTooLarge, "types"},
		{"progress past total", "PATCH", "/api/v1/jobs/" + id, patch(`"progress":{"current":5,"total":3}`), 400, invalid, "progress"},
		{"progress negative", "PATCH", "/api/v1/jobs/" + id, patch(`"progress":{"current":-1,"total":3}`), 400, invalid, "progress"},
		{"progress not a number", "PATCH", "/api/v1/jobs/" + id, patch(`"progress":{"current":"x"}`), 400, malformed, "progress.current"},
		{"requeue reason too long", "PATCH", "/api/v1/jobs/" + id, patch(`"state":"queued","reason":"` + strings.Repeat("r", 1025) + `"`), 400, invalid, "reason"},
		{"unknown state", "PATCH", "/api/v1/jobs/" + id, patch(`"state":"sleeping"`), 400, invalid, "state"},
		{"list limit 0", "GET", "/api/v1/jobs?limit=0", "", 400, invalid, "limit"},
		{"list limit -1", "GET", "/api/v1/jobs?limit=-1", "", 400, invalid, "limit"},
		{"list limit 1001", "GET", "/api/v1/jobs?limit=1001", "", 400, invalid, "limit"},
		{"list state unknown", "GET", "/api/v1/jobs?state=sleeping", "", 400, invalid, "state"},
		{"children limit 0", "GET", "/api/v1/jobs/" + id + "/children?limit=0", "", 400, invalid, "limit"},
		{"events limit 0", "GET", "/api/v1/jobs/" + id + "/events?limit=0", "", 400, invalid, "limit"},
		{"events after -1", "GET", "/api/v1/jobs/" + id + "/events?after=-1", "", 400, invalid, "after"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.body != "" {
				body = tc.body
			}
			p := e.do(tc.method, tc.path, body).problem(t, tc.status, tc.slug)
			if p.Field != tc.field {
				t.Fatalf("field %q, want %q: %+v", p.Field, tc.field, p)
			}
			if !strings.Contains(p.Detail, strings.Split(tc.field, ".")[0]) {
				t.Fatalf("detail %q does not name %s", p.Detail, tc.field)
			}
		})
	}
	if n := e.eventCount(); n != before {
		t.Fatalf("refused requests wrote %d events", n-before)
	}
	e.do("GET", "/api/v1/workers", nil).want(t, 200).json(t, &workers)
	if len(workers.Workers) != nWorkers {
		t.Fatalf("refused registrations registered %d workers", len(workers.Workers)-nWorkers)
	}
	// Values that are given are taken as they are, zeros included.
	j := e.submit(submit(`"max_retries":0,"backoff":0,"jitter":0,"max_lease_requeues":0,"priority":-1000`))
	if j.MaxRetries != 0 || j.BackoffSeconds != 0 || j.MaxLeaseRequeues != 0 || j.Priority != -1000 {
		t.Fatalf("explicit zeros: %+v", j)
	}
	var reg WorkerView
	e.do("POST", "/api/v1/workers", `{"types":["a"]}`).want(t, 201).json(t, &reg)
	if reg.Concurrency != 1 {
		t.Fatalf("default concurrency %d", reg.Concurrency)
	}
}

func typeList(n int) string {
	ts := make([]string, n)
	for i := range ts {
		ts[i] = fmt.Sprintf(`"t%d"`, i)
	}
	return strings.Join(ts, ",")
}

// rawPost sends a request on a connection of its own, writing all of it
// (head, then body as written by writeBody) before reading the answer, as
// Python's urllib and requests do, and returns the answer.
func rawPost(t *testing.T, addr, head string, writeBody func(io.Writer) error) (*http.Response, []byte, error) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A send buffer of a client on a network, not of loopback (which takes
	// megabytes at once): the body is still being sent when the answer is.
	if err := conn.(*net.TCPConn).SetWriteBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	bw := bufio.NewWriterSize(conn, 64<<10)
	if _, err := io.WriteString(bw, head); err != nil {
		return nil, nil, fmt.Errorf("write head: %w", err)
	}
	if err := writeBody(bw); err != nil {
		return nil, nil, fmt.Errorf("write body: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return nil, nil, fmt.Errorf("write body: %w", err)
	}
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("read the answer: %w", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("read the answer's body: %w", err)
	}
	return res, b, nil
}

// wantTooLarge checks that an answer is a 413 payload-too-large problem
// that closes the connection.
func wantTooLarge(t *testing.T, res *http.Response, body []byte) {
	t.Helper()
	r := resp{status: res.StatusCode, header: res.Header, body: body}
	r.problem(t, http.StatusRequestEntityTooLarge, problemPayloadTooLarge)
	if !res.Close {
		t.Fatalf("a 413 that keeps the connection: %v", res.Header)
	}
}

// A client that writes its whole request, a body over the limit, before
// it reads reads the 413, every time: the gateway drains the body before
// it closes, instead of resetting the connection under the client.
func TestTooLargeBodyIsReadByClientsThatSendItAll(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := e.ts.Listener.Addr().String()
	before := e.eventCount()
	const size = 2 << 20 // twice the default limit
	payload := `{"type":"big.body","payload":"` + strings.Repeat("x", size) + `"}`
	for i := range 20 {
		res, body, err := rawPost(t, addr, fmt.Sprintf("POST /api/v1/jobs HTTP/1.1\r\nHost: gw\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(payload)),
			func(w io.Writer) error { _, err := io.WriteString(w, payload); return err })
		if err != nil {
			t.Fatalf("Content-Length, round %d: %v", i, err)
		}
		wantTooLarge(t, res, body)
		res, body, err = rawPost(t, addr, "POST /api/v1/jobs HTTP/1.1\r\nHost: gw\r\n"+
			"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
			func(w io.Writer) error {
				for rest := payload; rest != ""; {
					n := min(len(rest), 32<<10)
					if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", n, rest[:n]); err != nil {
						return err
					}
					rest = rest[n:]
				}
				_, err := io.WriteString(w, "0\r\n\r\n")
				return err
			})
		if err != nil {
			t.Fatalf("chunked, round %d: %v", i, err)
		}
		wantTooLarge(t, res, body)
	}
	if n := e.eventCount() - before; n != 0 {
		t.Fatalf("bodies over the limit wrote %d events", n)
	}
	var l jobList
	e.do("GET", "/api/v1/jobs?type=big.body", nil).want(t, 200).json(t, &l)
	if len(l.Jobs) != 0 {
		t.Fatalf("%d jobs of an over-limit body", len(l.Jobs))
	}
}

// Draining is bounded: a body declared larger than what is drained, and
// one a client waits to send until told to continue, are answered at once
// without being read; a body that stops coming is answered after the
// drain's time bound.
func TestTooLargeBodyDrainIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	addr := e.ts.Listener.Addr().String()
	before := e.eventCount()
	noBody := func(io.Writer) error { return nil }
	for _, head := range []string{
		fmt.Sprintf("POST /api/v1/jobs HTTP/1.1\r\nHost: gw\r\nContent-Length: %d\r\n\r\n", 1<<30),
		fmt.Sprintf("POST /api/v1/jobs HTTP/1.1\r\nHost: gw\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n", 2<<20),
	} {
		t0 := time.Now()
		res, body, err := rawPost(t, addr, head, noBody)
		if err != nil {
			t.Fatalf("%q: %v", head, err)
		}
		wantTooLarge(t, res, body)
		if took := time.Since(t0); took > drainTime/2 {
			t.Fatalf("%q: answered after %s, want at once", head, took)
		}
	}
	// A chunked body over the limit that stops coming: the drain gives up
	// after its time bound, and the client is answered.
	t0 := time.Now()
	res, body, err := rawPost(t, addr, "POST /api/v1/jobs HTTP/1.1\r\nHost: gw\r\nTransfer-Encoding: chunked\r\n\r\n",
		func(w io.Writer) error {
			chunk := strings.Repeat("x", 64<<10)
			for range (DefaultMaxBodyBytes / len(chunk)) + 2 {
				if _, err := fmt.Fprintf(w, "%x\r\n%s\r\n", len(chunk), chunk); err != nil {
					return err
				}
			}
			return nil // and no last chunk: the body never ends
		})
	if err != nil {
		t.Fatal(err)
	}
	wantTooLarge(t, res, body)
	if took := time.Since(t0); took < drainTime-time.Second || took > drainTime+10*time.Second {
		t.Fatalf("a stalled body was answered after %s, want about %s", took, drainTime)
	}
	if n := e.eventCount() - before; n != 0 {
		t.Fatalf("bodies over the limit wrote %d events", n)
	}
}

// The problem of a body that does not decode names the field, in the
// JSON an HTTP client reads.
func TestUndecodableFieldInProblemJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("POST", "/api/v1/jobs", `{"type":"a","delay":1e10}`)
	var raw map[string]any
	if err := json.Unmarshal(r.body, &raw); err != nil || raw["field"] != "delay" || raw["type"] != engine.ProblemInvalidInput {
		t.Fatalf("%d %s", r.status, r.body)
	}
}
