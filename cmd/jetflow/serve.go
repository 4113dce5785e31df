package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/gateway"
	"github.com/jetflow/jetflow/internal/domain"
)

func cmdServe(c *cli, args []string) int {
	fs := c.flags()
	var (
		dir, listen, url, sync string
		demo                   bool
		replicas               int
		lag                    time.Duration
		concurrency            int
		httpAddr               string
		origins                stringList
		maxBody                int64
		maxStreams             int
		httpLease              time.Duration
		categories             string
		typeGrace              time.Duration
		misfireGrace           time.Duration
		retention              time.Duration
		eventsRetention        time.Duration
		auth, openOps          bool
		adminTokenFile         string
		natsAuth               bool
		maxUpload              = byteSize(gateway.DefaultMaxUpload)
		maxFiles               int
		auditDir               string
		checkpointEvery        time.Duration
	)
	fs.StringVar(&dir, "data", "./jetflow-data", "JetStream store directory of the embedded NATS server")
	fs.StringVar(&listen, "nats-listen", "127.0.0.1:4222", "address the embedded NATS server listens on")
	fs.StringVar(&url, "nats", "", "use the NATS system at this URL (comma-separated for a cluster) instead of an embedded server")
	fs.StringVar(&sync, "sync", "1s", "embedded server fsync: an interval (loses at most that much on power loss) or \"always\" (fsync before every ack)")
	fs.BoolVar(&demo, "demo", false, "run the demo handlers (demo.echo, demo.sleep, demo.fail, demo.fanout) and submit a first job")
	fs.IntVar(&replicas, "replicas", 0, "replicas of the streams jetflow creates (default: those of the existing event log; on a new system 3 on a cluster, else 1)")
	durationVar(fs, &lag, "projector-lag", jetflow.DefaultProjectorLag, "how long the projector lets writers project their own events before it verifies them")
	fs.IntVar(&concurrency, "concurrency", 10, "demo handlers running at once")
	fs.StringVar(&httpAddr, "http", gateway.DefaultAddr, "address of the HTTP API and dashboard (\"\" or \"off\": none)")
	fs.Var(&origins, "http-origin", "an origin (https://ops.example.com) whose pages may send POST/PATCH/DELETE to the API besides the gateway's own (repeatable; for a proxy that rewrites Host)")
	fs.Int64Var(&maxBody, "http-max-body", gateway.DefaultMaxBodyBytes, "largest request body in bytes (more: 413)")
	fs.Var(&maxUpload, "max-upload", "most `bytes` of files one submit may upload (multipart POST /api/v1/jobs; suffixes KiB, MiB, GiB; more: 413)")
	fs.IntVar(&maxFiles, "max-files", gateway.DefaultMaxFiles, fmt.Sprintf("most files one submit may upload (1-%d; more: 400)", gateway.DefaultMaxFiles))
	fs.IntVar(&maxStreams, "http-max-streams", gateway.DefaultMaxStreams, "event streams and long polls open at once (more: 503 overloaded)")
	durationVar(fs, &httpLease, "http-lease", jetflow.DefaultLease, "how long an HTTP worker's claim lasts without a heartbeat (workers are told to beat every third of it)")
	fs.StringVar(&categories, "categories", "", "the only categories a job type may be registered under over HTTP, comma-separated (default: any)")
	durationVar(fs, &retention, "retention", 7*24*time.Hour, "how long terminal jobs are kept before they are purged, in namespaces that set no retention of their own")
	durationVar(fs, &eventsRetention, "events-retention", 90*24*time.Hour, "how long the event log keeps events (the stream's MaxAge, applied by JetStream); docs/architecture.md says what an audit can still see")
	durationVar(fs, &typeGrace, "type-grace", 10*time.Minute, "how long a registered type may go without workers and jobs before it is soft-deleted")
	durationVar(fs, &misfireGrace, "misfire-grace", jetflow.DefaultMisfireGrace, "how late a schedule's tick may fire and still count as on time; later, the schedule's misfire policy decides (docs/schedules.md)")
	fs.BoolVar(&auth, "auth", false, "access control: the HTTP API and the dashboard need a token (jetflow token create); required to listen beyond loopback")
	fs.BoolVar(&openOps, "open-ops", false, "with --auth, serve /metrics and /readyz without a token")
	fs.StringVar(&adminTokenFile, "admin-token-file", "", "with --auth, where the first admin token is written when none exists (default: <data>/admin-token with the embedded server; none with --nats)")
	var natsWorkerNS string
	fs.StringVar(&natsWorkerNS, "nats-worker-namespaces", "", "with --nats-auth, also a worker user bound to each of these namespaces (comma-separated; worker-<namespace>, added to "+jetflow.NATSUsersFile+" if missing): it writes events and registers types in its namespace only (docs/security.md)")
	fs.BoolVar(&natsAuth, "nats-auth", false, "the embedded server requires credentials: users engine, worker and client, each limited to its role, passwords in <data>/"+jetflow.NATSUsersFile)
	fs.StringVar(&auditDir, "audit-dir", "", "directory of the key that signs the event log's checkpoints ("+jetflow.AuditKeyFile+", created if missing; default: <data> with the embedded server; with --nats none: no checkpoints; docs/audit.md)")
	durationVar(fs, &checkpointEvery, "checkpoint-interval", 30*time.Second, "how often the leader checkpoints the event log, if anything was appended")
	c.natsFlags(fs)
	fs.BoolVar(&c.debug, "debug", false, "debug logging")
	if _, ok := c.parse(args, 0, 0); !ok {
		return exitUsage
	}
	var cats []string
	if categories != "" {
		cats = strings.Split(categories, ",")
	}
	embeddedOnly := "only with the embedded server (not with --nats)"
	externalOnly := "only with --nats URL (the embedded server's own users: --nats-auth)"
	httpOnly := "only with the HTTP API (not with --http off)"
	noHTTP := httpAddr == "" || httpAddr == "off"
	if !c.checkFlags(
		when("data", dir == "", "must not be empty"),
		when("data", url != "", embeddedOnly),
		when("nats-listen", !validHostPort(listen), "want HOST:PORT"),
		when("nats-listen", url != "", embeddedOnly),
		when("sync", !validSync(sync), `want "always" or a duration over 0`),
		when("sync", url != "", embeddedOnly),
		when("replicas", replicas < 0 || replicas > maxReplicas,
			fmt.Sprintf("must be 0 (those of the existing event log) to %d", maxReplicas)),
		when("replicas", url == "" && replicas > 1, "the embedded server is one node: must be 0 or 1"),
		when("projector-lag", lag <= 0, "must be more than 0"),
		when("checkpoint-interval", checkpointEvery < time.Second, "must be 1s or more"),
		when("concurrency", concurrency < 1, "must be 1 or more"),
		when("concurrency", !demo, "only with --demo"),
		when("http", !noHTTP && !validHostPort(httpAddr), `want HOST:PORT, or "off"`),
		when("http-origin", noHTTP, httpOnly),
		when("http-max-body", maxBody < 1, "must be 1 or more"),
		when("http-max-body", noHTTP, httpOnly),
		when("max-upload", maxUpload < 1, "must be 1 or more"),
		when("max-upload", noHTTP, httpOnly),
		when("max-files", maxFiles < 1 || maxFiles > gateway.DefaultMaxFiles, fmt.Sprintf("must be 1 to %d", gateway.DefaultMaxFiles)),
		when("max-files", noHTTP, httpOnly),
		when("http-max-streams", maxStreams < 1, "must be 1 or more"),
		when("http-max-streams", noHTTP, httpOnly),
		when("http-lease", httpLease < minLease, fmt.Sprintf("must be at least %s", minLease)),
		when("http-lease", noHTTP, httpOnly),
		when("categories", noHTTP, httpOnly),
		when("categories", !validCategories(cats), "want category names (1-64 of [A-Za-z0-9_-.]) separated by commas"),
		when("type-grace", typeGrace <= 0, "must be more than 0"),
		when("misfire-grace", misfireGrace <= 0, "must be more than 0"),
		when("retention", retention <= 0, "must be more than 0"),
		when("events-retention", eventsRetention <= 0, "must be more than 0"),
		when("open-ops", !auth, "only with --auth"),
		when("admin-token-file", !auth, "only with --auth"),
		when("admin-token-file", adminTokenFile == "", "must not be empty"),
		when("nats-auth", url != "", embeddedOnly),
		when("nats-worker-namespaces", !natsAuth, "only with --nats-auth"),
		when("nats-worker-namespaces", !validNamespaces(natsWorkerNS), "want namespace names separated by commas"),
	) || !c.natsCredsOnlyWith(url != "", externalOnly) {
		return exitUsage
	}
	if !noHTTP && !auth && !isLoopback(httpAddr) {
		c.errorf("--http %s: the HTTP API would be reachable from other machines, where anyone could read, submit and cancel "+
			"every job: add --auth (tokens; the first admin token is written to the data directory), or listen on 127.0.0.1", httpAddr)
		return exitUsage
	}
	if auth && adminTokenFile == "" && url == "" {
		adminTokenFile = filepath.Join(dir, "admin-token")
	}
	for _, o := range origins {
		if err := http.NewCrossOriginProtection().AddTrustedOrigin(o); err != nil {
			c.refuseFlag("http-origin", fmt.Sprintf("%q", o), "want an origin: scheme://host[:port]")
			return exitUsage
		}
	}
	// A second serve of the same directory or addresses fails now, naming
	// what is in use.
	if url == "" {
		release, ok := c.claimDataDir(dir)
		if !ok {
			return exitUsage
		}
		defer release()
		if !c.checkFree("nats-listen", listen) {
			return exitUsage
		}
	}
	if !noHTTP && !c.checkFree("http", httpAddr) {
		return exitUsage
	}
	log := c.logger()
	stopTracing, ok := c.startTracing("jetflow")
	if !ok {
		return exitUsage
	}
	defer stopTracing()
	ctx, stop := signalContext()
	defer stop()

	var nc *nats.Conn
	var srv *server.Server
	if url == "" {
		cfg := jetflow.ServerConfig{Dir: dir, Listen: listen, Debug: c.debug}
		if sync == "always" {
			cfg.SyncAlways = true
		} else {
			d, err := parseDuration(sync)
			if err != nil || d <= 0 {
				c.errorf("--sync %q: want \"always\" or a positive duration", sync)
				return exitUsage
			}
			cfg.SyncInterval = d
		}
		var auth []nats.Option
		if natsAuth {
			var ok bool
			if cfg.Users, auth, ok = c.embeddedUsers(dir, splitList(natsWorkerNS), log); !ok {
				return exitUsage
			}
		} else if !isLoopbackNATS(listen) {
			log.Warn("the embedded NATS server listens beyond this machine without --nats-auth: whoever reaches it may do anything", "listen", listen)
		}
		var err error
		if srv, err = jetflow.StartServer(cfg); err != nil {
			c.errorOf(err, "%v", err)
			return exitUsage
		}
		defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
		if nc, err = jetflow.ConnectInProcess(srv, "jetflow-serve", auth...); err != nil {
			c.errorOf(err, "%v", err)
			return exitUsage
		}
		log.Info("embedded NATS server", "listen", "nats://"+listen, "data", dir, "sync", sync)
	} else {
		auth, ok := c.natsOptions()
		if !ok {
			return exitUsage
		}
		var err error
		nc, err = nats.Connect(url, append([]nats.Option{nats.Name("jetflow-serve"), nats.MaxReconnects(-1)}, auth...)...)
		if err != nil {
			c.errorf("connect to NATS at %s: %v", redact(url), err)
			return exitUsage
		}
		log.Info("external NATS", "url", redact(url), "cluster", nc.ConnectedClusterName())
	}
	defer nc.Close()

	client, err := jetflow.NewClient(ctx, nc, jetflow.ClientOptions{Replicas: replicas, EventsRetention: eventsRetention,
		Sync: serverSync(url == "", sync), Name: "engine-" + defaultID(), Logger: log})
	if err != nil {
		c.errorOf(err, "%v", err)
		return exitUsage
	}
	log.Info("streams provisioned", "replicas", client.Replicas())
	if auth {
		if err := bootstrapAdmin(ctx, c, client, adminTokenFile); err != nil {
			c.errorf("access control: %v", err)
			return exitFailed
		}
	}
	if auditDir == "" && url == "" {
		auditDir = dir
	}
	eng, err := jetflow.NewEngineE(client, jetflow.EngineConfig{ProjectorLag: lag, TypeGrace: typeGrace, Retention: retention, Auth: auth, Logger: log,
		MisfireGrace: misfireGrace, AuditKeyDir: auditDir, CheckpointInterval: checkpointEvery})
	if err != nil {
		c.errorf("--audit-dir: %v", err)
		return exitFailed
	}
	if k := eng.AuditPublicKey(); k != "" {
		log.Info("event log checkpoints signed; keep this public key elsewhere to verify them (jetflow audit verify --pubkey)", "pubkey", k, "key", filepath.Join(auditDir, jetflow.AuditKeyFile))
	} else {
		log.Info("no event log checkpoints: no --audit-dir")
	}
	if httpAddr != "" && httpAddr != "off" {
		// The gateway writes as itself: events it writes name it.
		gwClient, err := jetflow.NewClient(ctx, nc, jetflow.ClientOptions{Name: "gateway-" + defaultID(), Logger: log})
		if err != nil {
			c.errorOf(err, "%v", err)
			return exitUsage
		}
		gw, err := gateway.New(gateway.Config{Client: gwClient, Addr: httpAddr, Log: log,
			TrustedOrigins: origins, MaxBodyBytes: maxBody, MaxStreams: maxStreams, Lease: httpLease, Categories: cats,
			Auth: auth, OpenOps: openOps, MaxUpload: int64(maxUpload), MaxFiles: maxFiles, AuditPublicKey: eng.AuditPublicKey()})
		if err != nil {
			c.errorOf(err, "%v", err)
			return exitUsage
		}
		eng.Add(gw)
	}
	if err := eng.Start(ctx); err != nil {
		c.errorf("start engine: %v", err)
		return exitFailed
	}
	var w *jetflow.Worker
	if demo {
		w = jetflow.NewWorker(client, jetflow.WorkerConfig{Logger: log,
			Concurrency: concurrency})
		registerDemo(w, "", true)
		if err := w.Start(ctx); err != nil {
			c.errorf("start demo worker: %v", err)
			eng.Stop(context.Background())
			return exitFailed
		}
		go firstDemoJob(ctx, client, log)
	}
	fmt.Fprintf(c.errw, "jetflow is running. In another terminal:\n"+
		"  %[1]s submit demo.echo '{\"hello\":\"world\"}' --wait\n"+
		"  %[1]s ls\n(Ctrl-C stops it.)\n", progName())
	<-ctx.Done()
	log.Info("shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if w != nil {
		w.Stop(shutdown)
	}
	eng.Stop(shutdown)
	return exitOK
}

// Bounds of serve's and worker's flags.
const (
	maxReplicas = 5 // JetStream's most
	// minLease: a worker renews its leases every third of the lease (the
	// runtime's minimum).
	minLease = 300 * time.Millisecond
)

// serverSync is the fsync mode serve records on the event log: that of
// the embedded server it started, none with an external one.
func serverSync(embedded bool, sync string) string {
	switch {
	case !embedded:
		return ""
	case sync == "always":
		return "always"
	}
	return "interval"
}

// validSync reports whether s is an fsync mode of the embedded server:
// "always" or an interval over 0.
func validSync(s string) bool {
	if s == "always" {
		return true
	}
	d, err := parseDuration(s)
	return err == nil && d > 0
}

// validHostPort reports whether s is HOST:PORT with a port number (0: any
// free port).
func validHostPort(s string) bool {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 0 && n <= 65535
}

// firstDemoJob submits one demo job and logs how it ended, so that a
// newcomer sees a job go through within seconds of starting serve --demo.
func firstDemoJob(ctx context.Context, client *jetflow.Client, log *slog.Logger) {
	job, err := client.Submit(ctx, "demo.echo", map[string]string{"hello": "jetflow"})
	if err != nil {
		log.Warn("demo job", "err", err)
		return
	}
	log.Info("demo job submitted", "id", job.ID, "type", job.Type)
	done, err := client.Wait(ctx, job.ID)
	if err != nil {
		return
	}
	log.Info("demo job finished", "id", done.ID, "state", done.State, "result", string(done.Result),
		"events", done.Events, "see", progName()+" events "+done.ID)
}

// progName is how to run this program again, for the messages that say
// what to type: as it was run, or go run when it was (a binary in go's
// build cache).
func progName() string {
	p := os.Args[0]
	if strings.Contains(p, "go-build") || p == "" {
		return "go run ./cmd/jetflow"
	}
	if !strings.Contains(p, "/") {
		return p // found in PATH
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(rel, "..") {
			return "./" + rel
		}
	}
	return p
}

func defaultID() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", h, os.Getpid())
}

func cmdWorker(c *cli, args []string) int {
	fs := c.clientFlags()
	var (
		queue       string
		concurrency int
		lease       time.Duration
		grace       time.Duration
		id          string
	)
	fs.StringVar(&queue, "queue", "", "serve only this queue (default: every queue, those created later included)")
	fs.IntVar(&concurrency, "concurrency", 10, "handlers running at once on each queue")
	durationVar(fs, &lease, "lease", jetflow.DefaultLease, "how long a silent worker keeps its jobs")
	durationVar(fs, &grace, "grace", jetflow.DefaultShutdownGrace, "on SIGTERM or SIGINT, how long running handlers may finish before their jobs are requeued (a second signal ends it at once)")
	fs.StringVar(&id, "id", "", "worker id (default host-pid)")
	ns := c.namespaceFlag("namespace of its registered types (demo:greet), default: default")
	fs.BoolVar(&c.debug, "debug", false, "debug logging")
	var ex execFlags // --exec: shell jobs (exec.go)
	ex.add(fs)
	if _, ok := c.parse(args, 0, 0); !ok || !c.checkNamespace(*ns) {
		return exitUsage
	}
	if !c.checkFlags(
		when("concurrency", concurrency < 1, "must be 1 or more"),
		when("lease", lease < minLease, fmt.Sprintf("must be at least %s", minLease)),
		when("grace", grace <= 0, "must be more than 0"),
		when("id", id == "", "must not be empty (leave --id out for host-pid)"),
	) || !ex.check(c) {
		return exitUsage
	}
	stopTracing, ok := c.startTracing("jetflow-worker")
	if !ok {
		return exitUsage
	}
	defer stopTracing()
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		kind := ""
		if len(ex.execs) > 0 {
			kind = "shell"
		}
		w := jetflow.NewWorker(cl, jetflow.WorkerConfig{ID: id, Logger: c.logger(), ShutdownGrace: grace,
			Concurrency: concurrency, Lease: lease, Namespace: *ns, Kind: kind})
		runners, err := ex.register(w, cl, queue, c.logger())
		if err != nil {
			c.errorOf(err, "%v", err)
			return exitUsage
		}
		if runners == nil {
			registerDemo(w, queue, false)
		}
		if err := w.Start(ctx); err != nil {
			c.errorOf(err, "%v", err)
			return exitFailed
		}
		where := "every queue"
		if queue != "" {
			where = "queue " + queue
		}
		space := *ns
		if space == "" {
			space = "default"
		}
		fmt.Fprintf(c.errw, "worker %s running %s on %s, registered types in namespace %s\n", w.ID(), ex.what(), where, space)
		<-ctx.Done()
		w.Quiet()
		// A second signal skips what is left of the grace.
		again := make(chan os.Signal, 1)
		signal.Notify(again, os.Interrupt, syscall.SIGTERM)
		defer signal.Stop(again)
		stopCtx, skip := context.WithCancel(context.Background())
		defer skip()
		go func() {
			select {
			case <-again:
				fmt.Fprintf(c.errw, "worker %s: second signal: the grace is skipped, running handlers are cancelled and their jobs requeued\n", w.ID())
				skip()
			case <-stopCtx.Done():
			}
		}()
		fmt.Fprintf(c.errw, "worker %s stopping: it claims nothing more; running handlers have %s, then their jobs are requeued (a second signal: at once)\n", w.ID(), grace)
		w.Stop(stopCtx)
		ex.close(runners)
		return exitOK
	})
}

// splitList is a comma-separated flag's values ("": none).
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// validNamespaces reports whether a comma-separated list names namespaces
// ("": none).
func validNamespaces(s string) bool {
	for _, ns := range splitList(s) {
		if !domain.ValidNamespace(ns) {
			return false
		}
	}
	return true
}

// validCategories reports whether every name of an allow-list can be a
// category.
func validCategories(cats []string) bool {
	for _, c := range cats {
		if c == "" || len(c) > 64 || strings.ContainsAny(c, ":@") || !validTypeChars(c) {
			return false
		}
	}
	return true
}

func validTypeChars(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return s[0] != '.' && s[len(s)-1] != '.'
}

// registerDemo registers the demo handlers on queue ("": every queue);
// with internal, also @internal:demo:clock, a type the engine's process
// runs itself (serve --demo).
func registerDemo(w *jetflow.Worker, queue string, internal bool) {
	if internal {
		jetflow.Register(w, "@internal:demo:clock", func(context.Context, *jetflow.Job[any]) (map[string]string, error) {
			return map[string]string{"engine_time": time.Now().UTC().Format(time.RFC3339Nano)}, nil
		})
	}
	var on []jetflow.HandlerOption
	if queue != "" {
		on = append(on, jetflow.OnQueue(queue))
	}
	w.Handle("demo.echo", jetflow.HandlerFunc(func(_ context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
		return job.Payload, nil
	}), on...)
	jetflow.Register(w, "demo.sleep", func(ctx context.Context, job *jetflow.Job[struct {
		Seconds float64 `json:"seconds"`
	}]) (map[string]float64, error) {
		d := time.Duration(job.Payload.Seconds * float64(time.Second))
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return map[string]float64{"slept_seconds": job.Payload.Seconds}, nil
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}, on...)
	// demo.fanout: {"children": N, "child_seconds": S} fans out to N
	// demo.sleep children; {"batches": N, "fail_every": K, "batch_ms": M}
	// to N demo.batch batches, every K-th failing. "policy" (all,
	// fail_fast, tolerate) and "max_failure_ratio" choose the policy.
	jetflow.Register(w, "demo.fanout", func(_ context.Context, job *jetflow.Job[struct {
		Children     int     `json:"children"`
		ChildSeconds float64 `json:"child_seconds"`
		Batches      int     `json:"batches"`
		FailEvery    int     `json:"fail_every"`
		BatchMS      int     `json:"batch_ms"`
		Policy       string  `json:"policy"`
		Ratio        float64 `json:"max_failure_ratio"`
	}]) (any, error) {
		p := job.Payload
		spec := jetflow.FanOutSpec{Policy: p.Policy, MaxFailureRatio: p.Ratio}
		switch {
		case p.Children > 0:
			payloads := make([]any, p.Children)
			for i := range payloads {
				payloads[i] = map[string]float64{"seconds": p.ChildSeconds}
			}
			kids, err := jetflow.Children("demo.sleep", payloads, jetflow.MaxRetries(0))
			if err != nil {
				return nil, jetflow.Permanent(err)
			}
			spec.Children = kids
		case p.Batches > 0:
			spec.BatchType = "demo.batch"
			spec.BatchMaxRetries = new(int) // a demo failure is final
			for i := 1; i <= p.Batches; i++ {
				fail := p.FailEvery > 0 && i%p.FailEvery == 0
				spec.Batches = append(spec.Batches, map[string]any{"fail": fail, "ms": p.BatchMS})
			}
		default:
			return nil, jetflow.Permanent(errors.New(`demo.fanout wants {"children": N} or {"batches": N}`))
		}
		return nil, jetflow.FanOut(spec)
	}, on...)
	jetflow.RegisterBatch(w, "demo.batch", func(ctx context.Context, b *jetflow.Batch[struct {
		Fail bool `json:"fail"`
		MS   int  `json:"ms"`
	}]) error {
		if b.Payload.MS > 0 {
			t := time.NewTimer(time.Duration(b.Payload.MS) * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
		if b.Payload.Fail {
			// One message for all: the parent's summary counts them together.
			return jetflow.WithCode("DEMO_BATCH", errors.New("demo batch failed on purpose (fail_every)"))
		}
		return nil
	}, on...)
	jetflow.Register(w, "demo.fail", func(_ context.Context, job *jetflow.Job[struct {
		Times int `json:"times"`
	}]) (map[string]int, error) {
		if job.Attempt <= job.Payload.Times {
			return nil, jetflow.WithCode("DEMO_FAIL", fmt.Errorf("attempt %d of %d planned failures", job.Attempt, job.Payload.Times))
		}
		return map[string]int{"attempts": job.Attempt}, nil
	}, on...)
	// demo:greet is a registered type (category demo, name greet) of the
	// worker's namespace, with the JSON Schema of its payload generated from
	// the struct: a payload without a string "name" is refused at submit
	// (schema-violation), before anything is written.
	jetflow.Register(w, "demo:greet", func(_ context.Context, job *jetflow.Job[struct {
		Name string `json:"name"`
	}]) (string, error) {
		return "hello " + job.Payload.Name, nil
	}, on...)
}
