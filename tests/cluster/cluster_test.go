// Package cluster tests jetflow on a real 3-node NATS cluster on loopback:
// each node its own process (this test binary, run as a NATS server), the
// streams and buckets replicated three times, two engines and two workers
// as jetflow processes, and a node killed with SIGKILL in the middle of the
// work.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

const (
	nodeEnv    = "JETFLOW_TEST_NODE" // name of the node this process runs
	nodeClient = "JETFLOW_TEST_NODE_CLIENT"
	nodeRoute  = "JETFLOW_TEST_NODE_CLUSTER"
	nodeRoutes = "JETFLOW_TEST_NODE_ROUTES"
	nodeDir    = "JETFLOW_TEST_NODE_DIR"
)

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(nodeEnv) != "" {
		os.Exit(runNode())
	}
	testkit.MainWithJetflow(m, &binary)
}

// runNode runs one NATS server of the cluster until SIGTERM (or SIGKILL).
func runNode() int {
	host, port, err := hostPort(os.Getenv(nodeClient))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	chost, cport, err := hostPort(os.Getenv(nodeRoute))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	opts := &server.Options{
		ServerName:   os.Getenv(nodeEnv),
		Host:         host,
		Port:         port,
		JetStream:    true,
		StoreDir:     os.Getenv(nodeDir),
		SyncInterval: engine.DefaultSyncInterval,
		Cluster:      server.ClusterOpts{Name: "jetflow-test", Host: chost, Port: cport},
		Routes:       server.RoutesFromStr(os.Getenv(nodeRoutes)),
		NoSigs:       true,
		NoLog:        true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		fmt.Fprintln(os.Stderr, "node not ready")
		return 1
	}
	fmt.Printf("node %s ready\n", opts.ServerName)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return 0
}

func hostPort(addr string) (string, int, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("address %q", addr)
	}
	var p int
	_, err := fmt.Sscanf(addr[i+1:], "%d", &p)
	return addr[:i], p, err
}

// cluster is three NATS nodes, each its own process.
type cluster struct {
	t       *testing.T
	names   []string
	clients []string // host:port of each node's clients
	routes  []string
	dirs    []string
	procs   []*testkit.Proc
	urls    string // every node, comma-separated
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a 3-node cluster")
	}
	c := &cluster{t: t}
	for i := 0; i < 3; i++ {
		c.names = append(c.names, fmt.Sprintf("n%d", i+1))
		c.clients = append(c.clients, testkit.FreeAddr(t))
		c.routes = append(c.routes, testkit.FreeAddr(t))
		c.dirs = append(c.dirs, t.TempDir())
	}
	var urls []string
	for _, a := range c.clients {
		urls = append(urls, "nats://"+a)
	}
	c.urls = strings.Join(urls, ",")
	c.procs = make([]*testkit.Proc, 3)
	for i := range c.names {
		c.start(i)
	}
	// Wait for JetStream to have a meta leader: until then nothing can be
	// provisioned.
	nc, err := nats.Connect(c.urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err
	})
	return c
}

func (c *cluster) start(i int) {
	c.t.Helper()
	self, err := os.Executable()
	if err != nil {
		c.t.Fatal(err)
	}
	var routes []string
	for _, r := range c.routes {
		routes = append(routes, "nats-route://"+r)
	}
	c.procs[i] = testkit.StartProc(c.t, "node "+c.names[i], []string{
		nodeEnv + "=" + c.names[i], nodeClient + "=" + c.clients[i], nodeRoute + "=" + c.routes[i],
		nodeRoutes + "=" + strings.Join(routes, ","), nodeDir + "=" + c.dirs[i],
	}, self)
	c.procs[i].WaitOutput(c.t, 30*time.Second, "ready")
}

// kill kills the node named name with SIGKILL.
func (c *cluster) kill(name string) {
	c.t.Helper()
	for i, n := range c.names {
		if n == name {
			c.procs[i].Kill(c.t)
			return
		}
	}
	c.t.Fatalf("no node %q", name)
}

func (c *cluster) client() *jetflow.Client {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := jetflow.Connect(ctx, c.urls, jetflow.ClientOptions{Replicas: 3, Name: "test", Logger: testkit.Logger(c.t)})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// On R3 streams a lost expected-sequence race is JetStream error 10071 or,
// while the winner is still in flight, 10164: sixteen stores racing to start
// one job still give one winner and fifteen clean refusals.
func TestClusterClaimRace(t *testing.T) {
	c := startCluster(t)
	client := c.client()
	ctx := testkit.Ctx(t)
	job, err := client.Submit(ctx, "nobody.runs.this", nil)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := testkit.StoreOf(t, client).Record(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	info, err := testkit.StoreOf(t, client).Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Replicas != 3 || info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
		t.Fatalf("events stream: %d replicas, cluster %+v", info.Config.Replicas, info.Cluster)
	}
	// Raw racing appends on one subject: the losers are refused with 10071
	// (the sequence moved) or, while a winner is still being replicated,
	// 10164; both are conflicts.
	raw, err := client.Submit(ctx, "nobody.runs.this", nil)
	if err != nil {
		t.Fatal(err)
	}
	rawSnap, err := testkit.StoreOf(t, client).Record(ctx, raw.ID)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	codes := map[int]int{}
	var rawWG sync.WaitGroup
	rawBegin := make(chan struct{})
	for i := 0; i < 16; i++ {
		js := testkit.StoreOf(t, c.client()).JS
		rawWG.Add(1)
		go func() {
			defer rawWG.Done()
			<-rawBegin
			m := &nats.Msg{Subject: streams.JobSubject(rawSnap.Job), Data: []byte("x"), Header: nats.Header{}}
			_, err := js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rawSnap.Job.Seq))
			mu.Lock()
			defer mu.Unlock()
			var apiErr *jetstream.APIError
			switch {
			case err == nil:
				codes[0]++
			case errors.As(err, &apiErr) && streams.IsConflict(err):
				codes[int(apiErr.ErrorCode)]++
			default:
				t.Errorf("racing append: %v", err)
			}
		}()
	}
	close(rawBegin)
	rawWG.Wait()
	if codes[0] != 1 || codes[10071]+codes[10164] != 15 {
		t.Fatalf("racing appends: %v (0 = stored)", codes)
	}
	t.Logf("racing appends on a replicated stream: %v (0 = stored)", codes)

	var wins, refusals atomic.Int32
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for i := 0; i < 16; i++ {
		st := testkit.StoreOf(t, c.client())
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			_, _, err := st.Apply(ctx, "claim", snap, func(j *domain.Job) (*domain.Event, error) {
				return commands.Start(j, fmt.Sprintf("racer%d", i), uint64(100+i), time.Now())
			})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, commands.ErrInvalidTransition):
				refusals.Add(1)
			default:
				t.Errorf("racer %d: %v", i, err)
			}
		}()
	}
	close(begin)
	wg.Wait()
	if wins.Load() != 1 || refusals.Load() != 15 {
		t.Fatalf("%d won, %d refused; want 1 and 15", wins.Load(), refusals.Load())
	}
	evs, err := client.Events(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[1].Type != domain.EvStarted {
		t.Fatalf("events %+v", evs)
	}
}

// Two engines and two workers on the cluster; the node that leads the event
// log is killed with SIGKILL while jobs run. Every job still succeeds, with
// exactly one terminal event, and the projection equals the log.
func TestClusterNodeLoss(t *testing.T) {
	c := startCluster(t)
	for _, name := range []string{"E1", "E2"} {
		p := testkit.StartProc(t, "serve "+name, nil, binary, "serve", "--nats", c.urls, "--http", "off", "--projector-lag", "500ms")
		p.WaitOutput(t, 60*time.Second, "jetflow is running")
	}
	for _, name := range []string{"W1", "W2"} {
		p := testkit.StartProc(t, "worker "+name, nil, binary, "worker", "--nats", c.urls, "--id", name,
			"--concurrency", "8", "--lease", "2s")
		p.WaitOutput(t, 60*time.Second, "worker "+name+" running")
	}
	client := c.client()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const n = 300
	var reqs []*jetflow.SubmitRequest
	for i := 0; i < n; i++ {
		var req *jetflow.SubmitRequest
		var err error
		switch i % 3 {
		case 0:
			req, err = jetflow.NewRequest("demo.echo", map[string]int{"n": i})
		case 1:
			req, err = jetflow.NewRequest("demo.fail", map[string]int{"times": 1}, jetflow.Backoff(0))
		default:
			req, err = jetflow.NewRequest("demo.sleep", map[string]float64{"seconds": 0.2})
		}
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, req)
	}
	jobs, errs := client.SubmitMany(ctx, reqs)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	// Each look has its own deadline: a read that was in flight on the
	// killed node is abandoned, not waited for.
	succeeded := func() (int, error) {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		all, err := client.List(lctx, jetflow.ListFilter{State: jetflow.Succeeded})
		return len(all), err
	}
	testkit.WaitFor(t, 60*time.Second, func() error {
		k, err := succeeded()
		if err != nil {
			return err
		}
		if k < n/5 {
			return testkit.Errorf("%d succeeded", k)
		}
		return nil
	})
	info, err := testkit.StoreOf(t, client).Events.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leader := info.Cluster.Leader
	c.kill(leader)
	t.Logf("killed %s, the leader of %s", leader, streams.EventsStream)

	for deadline := time.Now().Add(2 * time.Minute); ; {
		k, err := succeeded()
		if err == nil && k == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2m0s: %d of %d succeeded (%v); not: %s", k, n, err, notSucceeded(ctx, client, jobs))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, j := range jobs {
		evs, err := client.Events(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		terminal := 0
		for _, e := range evs {
			if e.To.Terminal() {
				terminal++
			}
		}
		if terminal != 1 || evs[len(evs)-1].Type != domain.EvSucceeded {
			t.Fatalf("job %d (%s): %d terminal events, last %s", i, j.Type, terminal, evs[len(evs)-1].Type)
		}
		if i%3 == 0 {
			got, err := client.Get(ctx, j.ID)
			if err != nil {
				t.Fatalf("get job %d: %v", i, err)
			}
			var res map[string]int
			if err := json.Unmarshal(got.Result, &res); err != nil || res["n"] != i {
				t.Fatalf("job %d result %s", i, got.Result)
			}
		}
	}
	code, out := replayVerify(t, c.urls)
	if code != 0 {
		t.Fatalf("replay --verify exited %d:\n%s", code, out)
	}
}

func replayVerify(t *testing.T, urls string) (int, string) {
	t.Helper()
	p := testkit.StartProc(t, "replay", nil, binary, "replay", "--verify", "--nats", urls)
	code, _ := p.WaitExit(t, 2*time.Minute)
	return code, p.Output()
}

// notSucceeded describes the jobs that have not succeeded: state, worker
// and events, for a failure's message.
func notSucceeded(ctx context.Context, client *jetflow.Client, jobs []*jetflow.JobInfo) string {
	var b strings.Builder
	for _, j := range jobs {
		got, err := client.Get(ctx, j.ID)
		if err != nil {
			fmt.Fprintf(&b, "\n  %s: %v", j.ID, err)
			continue
		}
		if got.State == jetflow.Succeeded {
			continue
		}
		fmt.Fprintf(&b, "\n  %s %s: %s (worker %s, attempts %d, lease requeues %d)", j.ID, j.Type, got.State, got.Worker,
			got.Attempts, got.LeaseRequeues)
		evs, _ := client.Events(ctx, j.ID)
		for _, e := range evs {
			fmt.Fprintf(&b, "\n    %d %s %s a=%d by %s %s", e.Seq, e.Time.Format("15:04:05.000"), e.Type, e.Attempt, e.Actor, e.Message)
		}
	}
	return b.String()
}
