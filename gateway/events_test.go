package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// ephemeralConsumers counts the consumers of the event log that are not
// durable: reads' and this gateway's metrics consumer, not the engine's
// (its leader creates those when it likes, after Start: durable ones, and
// the statistics keeper's ordered one).
func (e *env) ephemeralConsumers() int {
	e.t.Helper()
	n := 0
	list := e.store.Events.ListConsumers(e.ctx)
	for info := range list.Info() {
		if info.Config.Durable == "" && !strings.HasPrefix(info.Name, streams.StatsConsumerPrefix+"_") {
			n++
		}
	}
	if err := list.Err(); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// Reading a job's events (JSON, a stream that ends, the job's page)
// leaves no consumer behind on the server.
func TestEventReadsLeaveNoConsumers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.submit(`{"type":"nobody.runs.this"}`).ID
	e.do("POST", "/api/v1/jobs/"+id+"/cancel", nil).want(t, 200)
	base := e.ephemeralConsumers()
	for i := 0; i < 10; i++ {
		e.do("GET", "/api/v1/jobs/"+id+"/events", nil).want(t, 200)
		e.do("GET", "/jobs/"+id, nil, "Accept", "text/html").want(t, 200)
	}
	ch, cancel := e.openSSE("/api/v1/jobs/" + id + "/events")
	next(t, ch, "end")
	cancel()
	live := e.submit(`{"type":"nobody.runs.this"}`).ID
	ch, cancel = e.openSSE("/api/v1/jobs/" + live + "/events")
	next(t, ch, "message")
	cancel() // the client leaves a live stream
	testkit.WaitFor(t, 10*time.Second, func() error {
		if n := e.ephemeralConsumers(); n != base {
			return fmt.Errorf("%d ephemeral consumers on the event log, %d before the reads", n, base)
		}
		return nil
	})
}

// Streams and long polls are bounded per gateway: past MaxStreams they
// are refused at once with 503 overloaded, and a slot frees when one ends.
func TestOpenStreamsAreCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxStreams = 2 })
	id := e.submit(`{"type":"nobody.runs.this"}`).ID
	wk := e.register(`{"name":"w","types":["other"]}`)
	_, cancel1 := e.openSSE("/api/v1/stream")
	_, cancel2 := e.openSSE("/api/v1/jobs/" + id + "/events")
	for _, r := range []resp{
		e.do("GET", "/api/v1/stream", nil, "Accept", "text/event-stream"),
		e.do("GET", "/api/v1/jobs/"+id+"/events", nil, "Accept", "text/event-stream"),
		e.do("GET", "/api/v1/jobs/"+id, nil, "Prefer", "wait=5"),
		e.do("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wk, "wait": 5}),
	} {
		r.problem(t, http.StatusServiceUnavailable, problemOverloaded)
		if r.header.Get("Retry-After") == "" {
			t.Fatalf("no Retry-After: %v", r.header)
		}
	}
	// What does not stay open is served as usual.
	e.do("GET", "/api/v1/jobs/"+id+"/events", nil).want(t, 200)
	e.do("GET", "/api/v1/jobs/"+id, nil).want(t, 200)
	if c := e.claim(wk, 0); c.Job != nil {
		t.Fatalf("claimed %+v", c.Job)
	}
	cancel1()
	cancel2()
	testkit.WaitFor(t, 10*time.Second, func() error {
		ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", e.ts.URL+"/api/v1/jobs/"+id, nil)
		req.Header.Set("Prefer", "wait=1")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("Preference-Applied") != "wait=1" {
			return fmt.Errorf("long poll after the streams closed: %d", res.StatusCode)
		}
		return nil
	})
	if j := e.get(id); j.State != domain.StateQueued {
		t.Fatalf("job %s", j.State)
	}
}

// HEAD on a streaming route answers the head of the stream and ends at
// once; it holds no stream slot.
func TestHeadOnStreamsEndsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxStreams = 1 })
	id := e.submit(`{"type":"nobody.runs.this"}`).ID
	client := &http.Client{Timeout: 3 * time.Second}
	for _, path := range []string{"/api/v1/stream?with=queues,workers", "/api/v1/jobs/" + id + "/events"} {
		for i := 0; i < 2; i++ {
			req, _ := http.NewRequestWithContext(e.ctx, "HEAD", e.ts.URL+path, nil)
			req.Header.Set("Accept", "text/event-stream")
			res, err := client.Do(req)
			if err != nil {
				t.Fatalf("HEAD %s: %v", path, err)
			}
			res.Body.Close()
			if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("HEAD %s: %d %v", path, res.StatusCode, res.Header)
			}
		}
	}
}
