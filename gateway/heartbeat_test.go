package gateway

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/testkit"
)

// beatAsync sends a heartbeat that waits, and returns its answer and how
// long it took on a channel.
type beatResult struct {
	hb   heartbeatResponse
	took time.Duration
}

func (e *env) beatAsync(worker string, wait float64) <-chan beatResult {
	out := make(chan beatResult, 1)
	go func() {
		t0 := time.Now()
		var hb heartbeatResponse
		r := e.do("POST", "/api/v1/workers/"+worker+"/heartbeat", map[string]any{"wait": wait})
		if r.status == 200 {
			r.json(e.t, &hb)
		} else {
			e.t.Errorf("heartbeat: %d %s", r.status, r.body)
		}
		out <- beatResult{hb, time.Since(t0)}
	}()
	return out
}

func waitBeat(t *testing.T, ch <-chan beatResult, within time.Duration) beatResult {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(within):
		t.Fatalf("no heartbeat answer within %s", within)
	}
	return beatResult{}
}

// A heartbeat that waits hears of a cancel within a second (it is woken
// by the cancel broadcast, not by its next beat); one with nothing to hear
// answers when its wait is over, its claims renewed; a job claimed while
// it waits is listened for too.
func TestHeartbeatLongPollHearsCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	wk := e.register(`{"name":"lp","types":["lp"],"concurrency":3}`)
	id := e.submit(`{"type":"lp"}`).ID
	e.run(wk, id)

	b := waitBeat(t, e.beatAsync(wk, 1), 5*time.Second)
	if b.took < time.Second || strings.Join(b.hb.Jobs, ",") != id || len(b.hb.Lost) != 0 {
		t.Fatalf("quiet wait: %+v after %s", b.hb, b.took)
	}

	ch := e.beatAsync(wk, 30)
	time.Sleep(300 * time.Millisecond) // let it wait (either order is correct: a cancel first is found by its look)
	t0 := time.Now()
	e.do("POST", "/api/v1/jobs/"+id+"/cancel", nil).want(t, 200)
	b = waitBeat(t, ch, 10*time.Second)
	if heard := time.Since(t0); heard > time.Second || strings.Join(b.hb.Lost, ",") != id || len(b.hb.Jobs) != 0 || len(b.hb.Claims) != 0 {
		t.Fatalf("cancel heard after %s: %+v", heard, b.hb)
	}

	// A claim made while the heartbeat waits is listened for.
	ch = e.beatAsync(wk, 30)
	time.Sleep(300 * time.Millisecond)
	id2 := e.submit(`{"type":"lp"}`).ID
	e.run(wk, id2)
	t0 = time.Now()
	e.do("POST", "/api/v1/jobs/"+id2+"/cancel", nil).want(t, 200)
	b = waitBeat(t, ch, 10*time.Second)
	if heard := time.Since(t0); heard > time.Second || strings.Join(b.hb.Lost, ",") != id2 {
		t.Fatalf("cancel of a claim made while waiting heard after %s: %+v", heard, b.hb)
	}

	// An execution timeout is heard as soon as the engine ends the attempt.
	id3 := e.submit(`{"type":"lp","timeout":"1s","max_retries":0}`).ID
	e.run(wk, id3)
	b = waitBeat(t, e.beatAsync(wk, 30), 15*time.Second)
	if strings.Join(b.hb.Lost, ",") != id3 || b.took > 8*time.Second {
		t.Fatalf("timeout heard after %s: %+v", b.took, b.hb)
	}
	if v := e.get(id3); v.Error == nil || v.Error.Code != "TIMEOUT" {
		t.Fatalf("timed out %+v", v)
	}
}

// A held batch is lost when its parent is cancelled: the waiting heartbeat
// hears it at once.
func TestHeartbeatLongPollHearsBatchParent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	coord := e.register(`{"name":"coord","types":["lpb.coord"]}`)
	wk := e.register(`{"name":"emb","batch_types":["lpb.batch"]}`)
	parent := e.submit(`{"type":"lpb.coord"}`).ID
	e.run(coord, parent)
	e.patch(parent, map[string]any{"worker_id": coord, "state": "waiting", "fanout": map[string]any{
		"batches": map[string]any{"type": "lpb.batch", "items": []int{1, 2}}}}).want(t, 200)
	bt := e.claimBatch(wk)
	ch := e.beatAsync(wk, 30)
	time.Sleep(300 * time.Millisecond)
	t0 := time.Now()
	e.do("POST", "/api/v1/jobs/"+parent+"/cancel", nil).want(t, 200)
	b := waitBeat(t, ch, 10*time.Second)
	if heard := time.Since(t0); heard > time.Second || strings.Join(b.hb.Lost, ",") != bt.ID {
		t.Fatalf("cancel of a batch's parent heard after %s: %+v", heard, b.hb)
	}
}

// Waiting heartbeats are long polls: bounded by MaxStreams; a bad wait is
// refused.
func TestHeartbeatLongPollLimits(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *Config) { c.MaxStreams = 1 })
	wk := e.register(`{"name":"lim","types":["lim"]}`)
	ch := e.beatAsync(wk, 2)
	testkit.WaitFor(t, 5*time.Second, func() error {
		if len(e.g.open) == 0 {
			return fmt.Errorf("the heartbeat does not wait yet")
		}
		return nil
	})
	r := e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", map[string]any{"wait": 2})
	r.problem(t, 503, problemOverloaded)
	if r.header.Get("Retry-After") != "1" {
		t.Fatalf("headers %v", r.header)
	}
	e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", nil).want(t, 200) // one that does not wait is served
	waitBeat(t, ch, 10*time.Second)
	for _, tc := range []struct{ body, slug, field string }{
		{`{"wait":-1}`, engine.ProblemInvalidInput, "wait"},
		{`{"wait":"soon"}`, problemMalformedRequest, "wait"},
		{`{"wait":1,"x":1}`, problemMalformedRequest, ""},
		{`[1]`, problemMalformedRequest, ""},
	} {
		if p := e.do("POST", "/api/v1/workers/"+wk+"/heartbeat", tc.body).problem(t, 400, tc.slug); p.Field != tc.field {
			t.Fatalf("%s: %+v", tc.body, p)
		}
	}
}
