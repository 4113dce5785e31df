package gateway

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// TestTwoGatewaysBehindABalancer: a worker's requests may reach any
// gateway, and every gateway's index sees every job.
func TestTwoGatewaysBehindABalancer(t *testing.T) {
	t.Parallel()
	a := newEnv(t)
	g2, err := New(Config{Client: testkit.Client(t, testkit.Conn(t, a.srv), "gateway-2"), Lease: 3 * time.Second, Log: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := g2.Start(a.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g2.Stop(context.Background()) })
	ts2 := httptest.NewServer(g2)
	t.Cleanup(ts2.Close)
	b := &env{t: t, srv: a.srv, store: a.store, eng: a.eng, g: g2, ts: ts2, ctx: a.ctx}

	wk := a.register(`{"name":"roaming","types":["lb.job"]}`)
	id := a.submit(`{"type":"lb.job"}`).ID
	testkit.WaitFor(t, 10*time.Second, func() error {
		var l jobList
		b.do("GET", "/api/v1/jobs?type=lb.job", nil).want(t, 200).json(t, &l)
		if len(l.Jobs) != 1 || l.Jobs[0].ID != id {
			return fmt.Errorf("gateway 2 lists %d jobs", len(l.Jobs))
		}
		return nil
	})
	b.claimJob(wk, id)
	a.patch(id, map[string]any{"worker_id": wk, "state": "running"}).want(t, 200)
	var hb heartbeatResponse
	b.do("POST", "/api/v1/workers/"+wk+"/heartbeat", nil).want(t, 200).json(t, &hb)
	if strings.Join(hb.Jobs, ",") != id {
		t.Fatalf("heartbeat through gateway 2: %+v", hb)
	}
	b.patch(id, map[string]any{"worker_id": wk, "state": "succeeded", "result": "ok"}).want(t, 200)
	if j := a.get(id); j.State != domain.StateSucceeded || string(j.Result) != `"ok"` {
		t.Fatalf("job %+v", j)
	}
	a.wantEvents(id, domain.EvSubmitted, domain.EvClaimed, domain.EvStarted, domain.EvSucceeded)
	a.do("DELETE", "/api/v1/workers/"+wk, nil).want(t, 200)
	b.do("GET", "/api/v1/workers/"+wk, nil).want(t, 404)
}
