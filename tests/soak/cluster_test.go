package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/testkit"
)

// TestSoakCluster is the soak on a 3-node NATS cluster (each node its own
// process, streams replicated three times) with two engines (serve --nats)
// and the workers, under the same load and faults, and one more: every few
// faults a NATS node is killed with SIGKILL and, a few seconds later,
// started again on its data. Long only (JETFLOW_SOAK=long): replicated
// writes on a 2-core machine are too slow for the short budget.
func TestSoakCluster(t *testing.T) {
	if testing.Short() || !longSoak() {
		t.Skip("long soak only (JETFLOW_SOAK=long)")
	}
	s := startCluster(t, sized(t, clusterLong))
	s.startWorkers(s.sz.workers)
	runSoak(t, s)
}

// cluster is three NATS nodes, each its own process.
type cluster struct {
	bin     string
	names   []string
	clients []string // host:port of each node's clients
	routes  []string
	dirs    []string
	procs   []*testkit.Proc
}

func startCluster(t *testing.T, sz size) *system {
	t.Helper()
	c := &cluster{bin: testkit.BuildBinary(t, "github.com/jetflow/jetflow/tests/soak/natsnode")}
	for i := range 3 {
		c.names = append(c.names, fmt.Sprintf("n%d", i+1))
		c.clients = append(c.clients, testkit.FreeAddr(t))
		c.routes = append(c.routes, testkit.FreeAddr(t))
		c.dirs = append(c.dirs, t.TempDir())
	}
	c.procs = make([]*testkit.Proc, 3)
	for i := range c.names {
		c.start(t, i)
	}
	var urls []string
	for _, a := range c.clients {
		urls = append(urls, "nats://"+a)
	}
	s := &system{t: t, sz: sz, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), all: map[string]*worker{},
		url: strings.Join(urls, ","), nodes: c}
	// JetStream has no meta leader for a moment after the nodes start:
	// nothing can be provisioned until it has.
	nc, err := nats.Connect(s.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, time.Minute, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err
	})
	s.serveArgs = []string{"serve", "--nats", s.url, "--http", "off"}
	s.serves = []*testkit.Proc{s.startServe("serve 1"), s.startServe("serve 2")}
	s.client = testkit.Connect(t, s.url)
	return s
}

func (c *cluster) start(t *testing.T, i int) {
	t.Helper()
	var routes []string
	for _, r := range c.routes {
		routes = append(routes, "nats-route://"+r)
	}
	c.procs[i] = testkit.StartProc(t, "node "+c.names[i], nil, c.bin, "-name", c.names[i], "-listen", c.clients[i],
		"-cluster", c.routes[i], "-routes", strings.Join(routes, ","), "-dir", c.dirs[i])
	c.procs[i].WaitOutput(t, 2*time.Minute, "node "+c.names[i]+" ready")
}

// restartNode kills a NATS node with SIGKILL, leaves the cluster without it
// for a few seconds, and starts it again on its data.
func (s *system) restartNode() {
	s.t.Helper()
	i := s.rng.IntN(len(s.nodes.procs))
	r := restart{what: "node " + s.nodes.names[i], killed: time.Now()}
	s.nodes.procs[i].Kill(s.t)
	time.Sleep(2*time.Second + time.Duration(s.rng.Int64N(int64(3*time.Second))))
	s.nodes.start(s.t, i)
	r.ready = time.Now()
	s.nodeLoss = append(s.nodeLoss, r)
	s.faults.nodeKills++
	s.note(r.killed, "SIGKILL %s, ready again %.2f s later", r.what, r.ready.Sub(r.killed).Seconds())
}
