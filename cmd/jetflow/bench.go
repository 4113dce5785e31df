package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/clientstore"
	"github.com/jetflow/jetflow/streams"
)

// maxBenchRate bounds bench --rate: a ticker of a second divided by it.
const maxBenchRate = 1_000_000

// benchResult is what `jetflow bench --json` prints.
type benchResult struct {
	Jobs           int     `json:"jobs"`
	Workers        int     `json:"workers"`
	Storage        string  `json:"storage"`
	EnqueuePerSec  float64 `json:"enqueue_jobs_per_sec"`
	ProcessPerSec  float64 `json:"processing_jobs_per_sec"`
	StartP50Ms     float64 `json:"submit_to_start_p50_ms"`
	StartP99Ms     float64 `json:"submit_to_start_p99_ms"`
	CompleteP50Ms  float64 `json:"submit_to_complete_p50_ms"`
	CompleteP99Ms  float64 `json:"submit_to_complete_p99_ms"`
	LatencyRate    int     `json:"latency_rate_per_sec,omitempty"`
	LatStartP50Ms  float64 `json:"latency_submit_to_start_p50_ms,omitempty"`
	LatStartP99Ms  float64 `json:"latency_submit_to_start_p99_ms,omitempty"`
	LatCompleteP50 float64 `json:"latency_submit_to_complete_p50_ms,omitempty"`
	LatCompleteP99 float64 `json:"latency_submit_to_complete_p99_ms,omitempty"`
	CPUCores       float64 `json:"cpu_cores"`
	// CPU of this process (server and engine) per job, enqueue+drain, and
	// the messages stored in every stream per job (the log, the jobs
	// bucket, the queue; acks not counted).
	CPUMicrosPerJob float64 `json:"cpu_us_per_job"`
	// The same CPU split by a CPU profile of enqueue+drain: the embedded
	// NATS server's code, the rest (the engine, the workers, the submitters
	// and their NATS clients), and the Go runtime alone (GC, scheduler).
	CPUServerMicrosPerJob  float64 `json:"cpu_server_us_per_job"`
	CPUEngineMicrosPerJob  float64 `json:"cpu_engine_us_per_job"`
	CPURuntimeMicrosPerJob float64 `json:"cpu_runtime_us_per_job"`
	WritesPerJob           float64 `json:"writes_per_job"`
	// Under --sync always, the group commit of the log (enqueue+drain, the
	// submitter's, the workers' and the engine's appends): atomic batches,
	// the appends in them, and the appends of refused batches sent again.
	GroupBatches    int64 `json:"group_commit_batches,omitempty"`
	GroupBatched    int64 `json:"group_commit_appends,omitempty"`
	GroupResent     int64 `json:"group_commit_resent,omitempty"`
	GroupAlone      int64 `json:"group_commit_alone,omitempty"`
	ProjectorRepair int64 `json:"projector_repairs"`
	// After the drain, until the engine's consumers of the log (the
	// Projector, the statistics) have read it to its end: how long, and
	// the CPU it took per job (not in cpu_us_per_job). The latency phase
	// starts after it.
	SettleMs              float64 `json:"settle_ms"`
	CPUSettleMicrosPerJob float64 `json:"cpu_settle_us_per_job"`
	// Limits given to the bench queue (--max-running): every job was
	// admitted from pending, and processing is the admission rate.
	Limits jetflow.QueueLimits `json:"limits"`
	Users  int                 `json:"users"`
	Keys   int                 `json:"keys"` // concurrency keys of the jobs (--keys)
	// Spans recorded with --trace (tracing on, exported to nowhere).
	Spans int64 `json:"spans,omitempty"`
	// With --verify: replay --verify of the store the bench made.
	VerifyEvents int     `json:"verify_events,omitempty"`
	VerifyPerSec float64 `json:"verify_events_per_sec,omitempty"`
	VerifyDiffs  int     `json:"verify_diffs,omitempty"`
}

func cmdBench(c *cli, args []string) int {
	fs := c.flags()
	var (
		jobs, workers, rate, batch int
		latDur                     time.Duration
		syncMode                   string
		url                        string
	)
	fs.IntVar(&jobs, "jobs", 50000, "jobs to enqueue, then drain")
	fs.IntVar(&workers, "workers", 64, "concurrent handlers draining them")
	fs.IntVar(&batch, "batch", 1000, "jobs per pipelined submit batch")
	fs.IntVar(&rate, "rate", 200, "jobs/s of the latency phase (0: skip it)")
	durationVar(fs, &latDur, "latency-duration", 5*time.Second, "length of the latency phase")
	fs.StringVar(&syncMode, "sync", "1s", "embedded server fsync: interval or \"always\"")
	fs.StringVar(&url, "nats", "", "benchmark against this NATS system instead of an embedded server in a temp dir")
	fs.BoolVar(&c.json, "json", false, "print one JSON object")
	c.natsFlags(fs)
	cpuprofile := fs.String("cpuprofile", "", "write a CPU profile here (plain jobs: enqueue and drain; --fanout and --workflow: the run)")
	memprofile := fs.String("memprofile", "", "write a heap profile here as the latency phase starts (plain jobs): what the process (engine and embedded server) holds after the burst, as of the last GC")
	cpuSplitOn := fs.Bool("cpu-split", false, "split the CPU per job into the server's, the engine's and the Go runtime's by a CPU profile (the profiler costs a few percent of throughput; also with --cpuprofile)")
	fanout := fs.Bool("fanout", false, "fan-out mode: one parent, --jobs batches, --workers batch handlers; reports batches/s")
	workflow := fs.String("workflow", "", "workflow mode: one workflow of --jobs steps (default 1000 chain, 10000 wide): chain (step end -> next step start p50/p99) or wide (--layers layers; steps/s)")
	layers := fs.Int("layers", 10, "layers of --workflow wide")
	var limits jetflow.QueueLimits
	var users int
	fs.IntVar(&limits.MaxRunning, "max-running", 0, "give the bench queue this limit: every job is then admitted from pending (0: no limit)")
	fs.IntVar(&limits.MaxRunningPerUser, "max-running-per-user", 0, "give the bench queue this per-user limit (0: none)")
	fs.IntVar(&users, "users", 1, "jobs are submitted for this many users, in turn")
	var keys int
	fs.IntVar(&limits.MaxRunningPerKey, "max-running-per-key", 0, "give the bench queue this per-key limit (0: none); jobs have --keys concurrency keys")
	fs.IntVar(&keys, "keys", 0, "jobs are submitted with this many concurrency keys, in turn (0: none)")
	fs.IntVar(&limits.RateLimit, "rate-limit", 0, "give the bench queue this rate limit, per --rate-period (0: none)")
	durationVar(fs, &limits.RatePeriod, "rate-period", time.Second, "the period of --rate-limit")
	fs.StringVar(&limits.RateKey, "rate-key", "", "the bench queue's rate key (user, concurrency_key; \"\": the queue's)")
	fs.BoolVar(&limits.Priorities, "priorities", false, "give the bench queue priorities: jobs are submitted with priorities 0 to 9, in turn")
	fs.IntVar(&limits.MaxQueued, "max-queued", 0, "the bench queue's window of admitted jobs waiting for a worker (0: none; 100 with --priorities)")
	uniq := fs.Bool("unique", false, "submit every job with a unique key of its own (docs/unique.md): what the unique path costs a submit")
	traced := fs.Bool("trace", false, "record OpenTelemetry spans (tracing on, exported to nowhere): what tracing costs")
	verifyAfter := fs.Bool("verify", false, "at the end, time replay --verify of the store the bench made (events/s; docs/audit.md)")
	if _, ok := c.parse(args, 0, 0); !ok {
		return exitUsage
	}
	embeddedOnly := "only with the embedded server (not with --nats)"
	notFanout := "not with --fanout"
	if !c.checkFlags(
		when("jobs", jobs < 1, "must be 1 or more"),
		when("jobs", *fanout && jobs > jetflow.MaxFanout, fmt.Sprintf("must be at most %d with --fanout", jetflow.MaxFanout)),
		when("workers", workers < 1, "must be 1 or more"),
		when("batch", batch < 1, "must be 1 or more"),
		when("batch", *fanout, notFanout),
		when("rate", rate < 0 || rate > maxBenchRate, fmt.Sprintf("must be 0 (no latency phase) to %d", maxBenchRate)),
		when("rate", *fanout, notFanout),
		when("latency-duration", latDur <= 0, "must be more than 0"),
		when("latency-duration", *fanout, notFanout),
		when("latency-duration", rate == 0, "not with --rate 0 (no latency phase)"),
		when("sync", !validSync(syncMode), `want "always" or a duration over 0`),
		when("sync", url != "", embeddedOnly),
		when("cpuprofile", *cpuprofile == "", "must not be empty"),
		when("memprofile", *memprofile == "", "must not be empty"),
		when("memprofile", *workflow != "" || *fanout || rate == 0, "only for plain jobs with a latency phase (not with --workflow, --fanout or --rate 0)"),
		when("max-running", limits.MaxRunning < 0 || limits.MaxRunning > jetflow.MaxQueueLimit, fmt.Sprintf("must be 0 to %d", jetflow.MaxQueueLimit)),
		when("max-running-per-user", limits.MaxRunningPerUser < 0 || limits.MaxRunningPerUser > jetflow.MaxQueueLimit, fmt.Sprintf("must be 0 to %d", jetflow.MaxQueueLimit)),
		when("max-running", *fanout, notFanout),
		when("max-running-per-user", *fanout, notFanout),
		when("users", users < 1 || users > 100000, "must be 1 to 100000"),
		when("keys", keys < 0 || keys > 100000, "must be 0 to 100000"),
		when("max-running-per-key", limits.MaxRunningPerKey < 0 || limits.MaxRunningPerKey > jetflow.MaxQueueLimit, fmt.Sprintf("must be 0 to %d", jetflow.MaxQueueLimit)),
		when("rate-limit", limits.RateLimit < 0 || limits.RateLimit > jetflow.MaxQueueLimit, fmt.Sprintf("must be 0 to %d", jetflow.MaxQueueLimit)),
		when("max-running-per-key", *fanout, notFanout),
		when("rate-limit", *fanout, notFanout),
		when("priorities", *fanout, notFanout),
		when("unique", *fanout || *workflow != "", "not with --fanout or --workflow"),
		when("max-queued", limits.MaxQueued < 0 || limits.MaxQueued > jetflow.MaxQueueLimit, fmt.Sprintf("must be 0 to %d", jetflow.MaxQueueLimit)),
		when("max-queued", *fanout, notFanout),
		when("workflow", !slices.Contains(workflowShapes, *workflow), "want chain or wide"),
		when("workflow", *fanout, "not with --fanout"),
		when("jobs", *workflow != "" && jobs > jetflow.MaxWorkflowSteps, fmt.Sprintf("must be at most %d with --workflow", jetflow.MaxWorkflowSteps)),
		when("layers", *layers < 1 || *layers > jetflow.MaxWorkflowSteps, fmt.Sprintf("must be 1 to %d", jetflow.MaxWorkflowSteps)),
		when("layers", *workflow != "wide", "only with --workflow wide"),
		when("cpu-split", *workflow != "" || *fanout, "only for plain jobs (not with --workflow or --fanout)"),
		when("verify", *fanout || *workflow != "", "not with --fanout or --workflow"),
	) || !c.natsCredsOnlyWith(url != "", "only with --nats URL") {
		return exitUsage
	}
	if *workflow != "" && !c.given("jobs") {
		jobs = map[string]int{"chain": 1000, "wide": 10000}[*workflow]
	}
	var auth []nats.Option
	if url != "" {
		var ok bool
		if auth, ok = c.natsOptions(); !ok {
			return exitUsage
		}
	}
	ctx, stop := signalContext()
	defer stop()
	spans := func() int64 { return 0 }
	if *traced {
		var stopTracing func()
		spans, stopTracing = benchTracing()
		defer stopTracing()
	}

	connect := func(name string) (*nats.Conn, error) {
		return nats.Connect(url, append([]nats.Option{nats.Name(name)}, auth...)...)
	}
	storage := "external"
	if url == "" {
		dir, err := os.MkdirTemp("", "jetflow-bench-")
		if err != nil {
			c.errorOf(err, "%v", err)
			return exitUsage
		}
		defer os.RemoveAll(dir)
		cfg := jetflow.ServerConfig{Dir: dir}
		if syncMode == "always" {
			cfg.SyncAlways = true
		} else if cfg.SyncInterval, err = parseDuration(syncMode); err != nil {
			c.errorf("--sync %q: %v", syncMode, err)
			return exitUsage
		}
		srv, err := jetflow.StartServer(cfg)
		if err != nil {
			c.errorOf(err, "%v", err)
			return exitUsage
		}
		defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
		connect = func(name string) (*nats.Conn, error) { return jetflow.ConnectInProcess(srv, name) }
		storage = "file, sync " + syncMode
	}
	// The submitter, the workers and the engine each have a connection of
	// their own, as they would in separate processes.
	open := func(name string) (*jetflow.Client, bool) {
		nc, err := connect(name)
		if err != nil {
			c.errorf("connect: %v", err)
			return nil, false
		}
		cl, err := jetflow.NewClient(ctx, nc, jetflow.ClientOptions{Name: name, Logger: c.logger(), Sync: serverSync(url == "", syncMode)})
		if err != nil {
			nc.Close()
			c.errorOf(err, "%v", err)
			return nil, false
		}
		return cl, true
	}
	subCl, ok1 := open("bench-submit")
	workCl, ok2 := open("bench-work")
	engCl, ok3 := open("bench-engine")
	if !ok1 || !ok2 || !ok3 {
		return exitUsage
	}
	defer subCl.Conn().Close()
	defer workCl.Conn().Close()
	defer engCl.Conn().Close()
	eng := jetflow.NewEngine(engCl, jetflow.EngineConfig{Logger: c.logger()})
	if err := eng.Start(ctx); err != nil {
		c.errorOf(err, "%v", err)
		return exitFailed
	}
	defer eng.Stop(context.Background())

	queue := fmt.Sprintf("bench%08x", rand.Uint32()) // fresh queue per run against a shared server
	if *workflow != "" {
		return benchWorkflow(c, ctx, eng, subCl, workCl, queue, *workflow, jobs, min(*layers, jobs), workers, storage, *cpuprofile)
	}
	if *fanout {
		return benchFanout(c, ctx, subCl, workCl, queue, jobs, workers, storage, *cpuprofile)
	}
	const jobType = "bench.noop"

	// Completions, as the worker runtime records them.
	var (
		mu        sync.Mutex
		startLat  []time.Duration
		doneLat   []time.Duration
		done      atomic.Int64
		firstDone time.Time
		lastDone  time.Time
		allDone   = make(chan struct{})
		target    atomic.Int64
	)
	target.Store(int64(jobs))
	onOutcome := func(j *jetflow.JobInfo) {
		if j.State != jetflow.Succeeded || j.StartedAt == nil || j.FinishedAt == nil {
			return
		}
		now := time.Now()
		mu.Lock()
		startLat = append(startLat, j.StartedAt.Sub(j.CreatedAt))
		doneLat = append(doneLat, j.FinishedAt.Sub(j.CreatedAt))
		if firstDone.IsZero() {
			firstDone = now
		}
		lastDone = now
		mu.Unlock()
		if done.Add(1) == target.Load() {
			close(allDone)
		}
	}
	var submitted atomic.Int64
	request := func() *jetflow.SubmitRequest {
		r := &jetflow.SubmitRequest{Type: jobType, Queue: queue, Payload: []byte(`{"n":1}`)}
		n := submitted.Add(1)
		if users > 1 {
			r.User = fmt.Sprintf("user%d", n%int64(users))
		}
		if keys > 0 {
			r.ConcurrencyKey = fmt.Sprintf("key%d", n%int64(keys))
		}
		if limits.Priorities {
			r.Priority = int(n % 10)
		}
		if *uniq {
			r.UniqueKey = fmt.Sprintf("bench-%d", n)
		}
		return r
	}
	if limits.RateLimit == 0 {
		limits.RatePeriod, limits.RateKey = 0, ""
	}
	if limits != (jetflow.QueueLimits{}) {
		// Every job then goes through admission: pending, then admitted as
		// slots free (the processing rate is the admission rate).
		if err := subCl.SetQueueLimits(ctx, queue, limits); err != nil {
			c.errorOf(err, "%v", err)
			return exitFailed
		}
	}

	// Phase 1: enqueue.
	fmt.Fprintf(c.errw, "enqueueing %d jobs...\n", jobs)
	var profFile io.Writer
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			c.errorf("--cpuprofile: %v", err)
			return exitFailed
		}
		defer f.Close()
		profFile = f
	}
	var rec *cpuRecorder
	if *cpuSplitOn || profFile != nil {
		rec = startCPURecorder(profFile)
		defer rec.stop() // on an early return; a no-op once stopped
	}
	cpu0, wall0 := cpuTime(), time.Now()
	writes0 := streamWrites(ctx, subCl.Conn())
	group0 := groupStats(subCl, workCl, engCl)
	t0 := time.Now()
	err := submitInBatches(ctx, subCl, jobs, batch, request)
	enqDur := time.Since(t0)
	if err != nil {
		c.errorf("enqueue: %v", err)
		return exitFailed
	}

	// Phase 2: drain with C handlers.
	fmt.Fprintf(c.errw, "draining with %d handlers...\n", workers)
	var started atomic.Bool
	var startT time.Time
	w := jetflow.NewWorker(workCl, jetflow.WorkerConfig{ID: "bench-worker", Logger: c.logger(), OnOutcome: onOutcome,
		Queues: map[string]jetflow.QueueConfig{queue: {Concurrency: workers}}})
	w.Handle(jobType, jetflow.HandlerFunc(func(context.Context, *jetflow.RawJob) (json.RawMessage, error) {
		if started.CompareAndSwap(false, true) {
			mu.Lock()
			startT = time.Now()
			mu.Unlock()
		}
		return nil, nil
	}), jetflow.OnQueue(queue))
	if err := w.Start(ctx); err != nil {
		c.errorOf(err, "%v", err)
		return exitFailed
	}
	defer w.Stop(context.Background())
	select {
	case <-allDone:
	case <-ctx.Done():
		return exitFailed
	}
	cpuUsed, wallUsed := cpuTime()-cpu0, time.Since(wall0) // before the profile is stopped and parsed
	split, splitOK := rec.stop()
	mu.Lock()
	procDur := lastDone.Sub(startT)
	res := benchResult{Jobs: jobs, Workers: workers, Storage: storage, Limits: limits, Users: users, Keys: keys,
		EnqueuePerSec: float64(jobs) / enqDur.Seconds(), ProcessPerSec: float64(jobs) / procDur.Seconds()}
	res.StartP50Ms, res.StartP99Ms = pct(startLat)
	res.CompleteP50Ms, res.CompleteP99Ms = pct(doneLat)
	startLat, doneLat = nil, nil
	mu.Unlock()
	res.CPUCores = cpuUsed.Seconds() / wallUsed.Seconds()
	res.CPUMicrosPerJob = float64(cpuUsed.Microseconds()) / float64(jobs)
	if sum := split.Server + split.Engine + split.Runtime; splitOK && sum > 0 {
		share := func(d time.Duration) float64 { return res.CPUMicrosPerJob * float64(d) / float64(sum) }
		res.CPUServerMicrosPerJob, res.CPUEngineMicrosPerJob, res.CPURuntimeMicrosPerJob = share(split.Server), share(split.Engine), share(split.Runtime)
	}
	if writes0 >= 0 {
		res.WritesPerJob = float64(streamWrites(ctx, subCl.Conn())-writes0) / float64(jobs)
	}
	g := groupStats(subCl, workCl, engCl)
	res.GroupBatches, res.GroupBatched = g.Batches-group0.Batches, g.Batched-group0.Batched
	res.GroupResent, res.GroupAlone = g.Resent-group0.Resent, g.Alone-group0.Alone

	// Settle: the consumers that follow the log (2 s behind it, the
	// Projector) read what the burst wrote, so that the latency phase
	// measures the steady state rather than the burst's tail.
	settleCPU0, settle0 := cpuTime(), time.Now()
	sctx, cancelSettle := context.WithTimeout(ctx, 2*time.Minute)
	err = eng.CaughtUp(sctx)
	cancelSettle()
	if err != nil {
		c.errorf("settle after the drain: %v", err)
		return exitFailed
	}
	res.SettleMs = float64(time.Since(settle0).Microseconds()) / 1000
	res.CPUSettleMicrosPerJob = float64((cpuTime() - settleCPU0).Microseconds()) / float64(jobs)

	if *memprofile != "" {
		if err := writeHeapProfile(*memprofile); err != nil {
			c.errorf("--memprofile: %v", err)
			return exitFailed
		}
	}

	// Phase 3: latency at a steady rate, workers idle-waiting.
	if rate > 0 && latDur > 0 {
		n := int(float64(rate) * latDur.Seconds())
		fmt.Fprintf(c.errw, "latency: %d jobs at %d/s...\n", n, rate)
		allDone = make(chan struct{})
		target.Store(int64(jobs + n))
		var sendErr atomic.Pointer[error] // the first submit that failed
		tick := time.NewTicker(time.Second / time.Duration(rate))
		for i := 0; i < n; i++ {
			<-tick.C
			go func() {
				if _, _, err := subCl.Send(ctx, request()); err != nil {
					sendErr.CompareAndSwap(nil, &err)
				}
			}()
		}
		tick.Stop()
		select {
		case <-allDone:
		case <-time.After(30 * time.Second):
			why := ""
			if err := sendErr.Load(); err != nil {
				why = fmt.Sprintf(" (a submit failed: %v)", *err)
			}
			c.errorf("latency phase: only %d of %d jobs finished%s", done.Load()-int64(jobs), n, why)
			return exitFailed
		}
		mu.Lock()
		res.LatencyRate = rate
		res.LatStartP50Ms, res.LatStartP99Ms = pct(startLat)
		res.LatCompleteP50, res.LatCompleteP99 = pct(doneLat)
		mu.Unlock()
	}
	res.ProjectorRepair = eng.Repairs()
	res.Spans = spans()
	if *verifyAfter {
		fmt.Fprintf(c.errw, "replay --verify...\n")
		t0 := time.Now()
		rep, err := subCl.Verify(ctx, 0)
		if err != nil {
			c.errorf("replay --verify: %v", err)
			return exitFailed
		}
		res.VerifyEvents, res.VerifyDiffs = int(rep.LastSeq), len(rep.Diffs)
		res.VerifyPerSec = float64(rep.LastSeq) / time.Since(t0).Seconds()
	}

	if c.json {
		c.printJSON(res)
		return exitOK
	}
	fmt.Fprintf(c.out, "jetflow bench: %d jobs, %d handlers, %s\n", jobs, workers, storage)
	if limits != (jetflow.QueueLimits{}) {
		fmt.Fprintf(c.out, "  queue limits     max_running %d, max_running_per_user %d, max_running_per_key %d, rate_limit %s, priorities %s; %d users, %d keys: every job admitted from pending\n",
			limits.MaxRunning, limits.MaxRunningPerUser, limits.MaxRunningPerKey, rateText(limits.RateLimit, limits.RatePeriod, limits.RateKey),
			prioritiesText(limits.Priorities, limits.MaxQueued), users, keys)
	}
	fmt.Fprintf(c.out, "  enqueue          %8.0f jobs/s\n", res.EnqueuePerSec)
	fmt.Fprintf(c.out, "  processing       %8.0f jobs/s\n", res.ProcessPerSec)
	fmt.Fprintf(c.out, "  burn-down   submit->start p50 %.1f ms  p99 %.1f ms; submit->complete p50 %.1f ms  p99 %.1f ms\n",
		res.StartP50Ms, res.StartP99Ms, res.CompleteP50Ms, res.CompleteP99Ms)
	if res.LatencyRate > 0 {
		fmt.Fprintf(c.out, "  at %d jobs/s  submit->start p50 %.2f ms  p99 %.2f ms; submit->complete p50 %.2f ms  p99 %.2f ms\n",
			res.LatencyRate, res.LatStartP50Ms, res.LatStartP99Ms, res.LatCompleteP50, res.LatCompleteP99)
	}
	fmt.Fprintf(c.out, "  cpu              %8.2f cores (server and engine, enqueue+drain), %.0f µs per job\n", res.CPUCores, res.CPUMicrosPerJob)
	if res.CPUServerMicrosPerJob+res.CPUEngineMicrosPerJob > 0 {
		fmt.Fprintf(c.out, "  cpu per job      server %.0f µs, engine %.0f µs, Go runtime alone %.0f µs (GC, scheduler; by a CPU profile)\n",
			res.CPUServerMicrosPerJob, res.CPUEngineMicrosPerJob, res.CPURuntimeMicrosPerJob)
	}
	fmt.Fprintf(c.out, "  settle           %8.0f ms after the drain until the Projector and the statistics read the log's end, %.0f µs CPU per job\n", res.SettleMs, res.CPUSettleMicrosPerJob)
	fmt.Fprintf(c.out, "  writes           %8.1f per job (messages stored in every stream, enqueue+drain)\n", res.WritesPerJob)
	if res.GroupBatches+res.GroupAlone > 0 {
		fmt.Fprintf(c.out, "  group commit     %8d atomic batches of %.1f appends on average (%d appends; one fsync each), %d appends alone, %d sent again alone\n",
			res.GroupBatches, float64(res.GroupBatched)/float64(max(res.GroupBatches, 1)), res.GroupBatched, res.GroupAlone, res.GroupResent)
	}
	if *traced {
		fmt.Fprintf(c.out, "  tracing          %8d spans recorded (exported to nowhere)\n", res.Spans)
	}
	if *verifyAfter {
		fmt.Fprintf(c.out, "  replay --verify  %8.0f events/s (%d events, %d differ)\n", res.VerifyPerSec, res.VerifyEvents, res.VerifyDiffs)
	}
	return exitOK
}

func pct(d []time.Duration) (p50, p99 float64) {
	if len(d) == 0 {
		return 0, 0
	}
	sort.Slice(d, func(i, k int) bool { return d[i] < d[k] })
	ms := func(x time.Duration) float64 { return float64(x) / 1e6 }
	return ms(d[len(d)*50/100]), ms(d[min(len(d)-1, len(d)*99/100)])
}

// groupStats sums what the group commits of the clients' stores did
// (zero without one: sync is not always).
func groupStats(clients ...*jetflow.Client) streams.GroupStats {
	var sum streams.GroupStats
	for _, cl := range clients {
		if st := clientstore.Of(cl); st != nil && st.GroupCommit() != nil {
			g := st.GroupCommit().Stats()
			sum.Batches, sum.Batched, sum.Resent, sum.Alone = sum.Batches+g.Batches, sum.Batched+g.Batched, sum.Resent+g.Resent, sum.Alone+g.Alone
		}
	}
	return sum
}

// streamWrites is the sum of every stream's last sequence: the messages
// ever stored in them; -1 if the streams cannot be listed.
func streamWrites(ctx context.Context, nc *nats.Conn) int64 {
	js, err := jetstream.New(nc)
	if err != nil {
		return -1
	}
	var n int64
	l := js.ListStreams(ctx)
	for info := range l.Info() {
		n += int64(info.State.LastSeq)
	}
	if l.Err() != nil {
		return -1
	}
	return n
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type fanoutResult struct {
	Batches       int     `json:"batches"`
	Workers       int     `json:"workers"`
	Storage       string  `json:"storage"`
	FanOutSeconds float64 `json:"fanout_seconds"`  // the coordinator making its batches
	BatchesPerSec float64 `json:"batches_per_sec"` // first batch started -> parent completed
	TotalSeconds  float64 `json:"total_seconds"`   // parent submitted -> parent completed
	CompleteLagMs float64 `json:"complete_lag_ms"` // last batch done -> parent completed
	ParentState   string  `json:"parent_state"`
	Succeeded     int     `json:"succeeded"`
	CPUCores      float64 `json:"cpu_cores"`
}

// benchFanout measures one parent fanning out to n batches drained by c
// handlers, completed by the fan-in counter.
func benchFanout(c *cli, ctx context.Context, subCl, workCl *jetflow.Client, queue string, n, workers int, storage, cpuprofile string) int {
	const coordType, batchType = "bench.coord", "bench.piece"
	var (
		mu                    sync.Mutex
		fanStart, fanDone     time.Time
		firstBatch, lastBatch time.Time
	)
	payloads := make([]any, n)
	for i := range payloads {
		payloads[i] = json.RawMessage(`{"n":1}`)
	}
	w := jetflow.NewWorker(workCl, jetflow.WorkerConfig{ID: "bench-worker", Logger: c.logger(),
		Queues: map[string]jetflow.QueueConfig{queue: {Concurrency: workers}},
		OnOutcome: func(j *jetflow.JobInfo) {
			if j.State == jetflow.Waiting {
				mu.Lock()
				fanDone = time.Now()
				mu.Unlock()
			}
		}})
	w.Handle(coordType, jetflow.HandlerFunc(func(context.Context, *jetflow.RawJob) (json.RawMessage, error) {
		mu.Lock()
		fanStart = time.Now()
		mu.Unlock()
		return nil, jetflow.FanOut(jetflow.FanOutSpec{BatchType: batchType, Batches: payloads})
	}), jetflow.OnQueue(queue))
	jetflow.RegisterBatch(w, batchType, func(context.Context, *jetflow.Batch[json.RawMessage]) error {
		now := time.Now()
		mu.Lock()
		if firstBatch.IsZero() {
			firstBatch = now
		}
		lastBatch = now
		mu.Unlock()
		return nil
	}, jetflow.OnQueue(queue))
	if cpuprofile != "" {
		if f, err := os.Create(cpuprofile); err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	cpu0 := cpuTime()
	t0 := time.Now()
	if err := w.Start(ctx); err != nil {
		c.errorOf(err, "%v", err)
		return exitFailed
	}
	defer w.Stop(context.Background())
	fmt.Fprintf(c.errw, "fanning out to %d batches with %d handlers...\n", n, workers)
	job, err := subCl.Submit(ctx, coordType, nil, jetflow.Queue(queue))
	if err != nil {
		c.errorOf(err, "%v", err)
		return exitFailed
	}
	parent, err := subCl.Wait(ctx, job.ID)
	if err != nil {
		c.errorf("wait for the parent: %v", err)
		return exitFailed
	}
	end := time.Now()
	mu.Lock()
	out := fanoutResult{Batches: n, Workers: workers, Storage: storage, ParentState: string(parent.State),
		FanOutSeconds: fanDone.Sub(fanStart).Seconds(), BatchesPerSec: float64(n) / end.Sub(firstBatch).Seconds(),
		TotalSeconds: end.Sub(t0).Seconds(), CompleteLagMs: float64(end.Sub(lastBatch)) / 1e6,
		CPUCores: (cpuTime() - cpu0).Seconds() / time.Since(t0).Seconds()}
	mu.Unlock()
	if parent.Fanout != nil {
		out.Succeeded = parent.Fanout.Succeeded
	}
	if c.json {
		c.printJSON(out)
	} else {
		fmt.Fprintf(c.out, "jetflow bench --fanout: %d batches, %d handlers, %s\n", n, workers, storage)
		fmt.Fprintf(c.out, "  fan-out (make the batches)  %8.2f s\n", out.FanOutSeconds)
		fmt.Fprintf(c.out, "  batches                     %8.0f batches/s (first batch -> parent completed)\n", out.BatchesPerSec)
		fmt.Fprintf(c.out, "  parent                      %s, %d succeeded, completed %.0f ms after the last batch\n",
			out.ParentState, out.Succeeded, out.CompleteLagMs)
		fmt.Fprintf(c.out, "  total                       %8.2f s, cpu %.2f cores\n", out.TotalSeconds, out.CPUCores)
	}
	if parent.State != jetflow.Succeeded || out.Succeeded != n {
		return exitFailed
	}
	return exitOK
}

// submitInBatches submits n jobs that request makes, from 4 submitters at
// once, in pipelined batches of batch (SubmitMany), and returns the first
// error.
func submitInBatches(ctx context.Context, cl *jetflow.Client, n, batch int, request func() *jetflow.SubmitRequest) error {
	const submitters = 4
	errs := make([]error, submitters) // each submitter's first
	var wg sync.WaitGroup
	per := (n + submitters - 1) / submitters
	for s := range submitters {
		lo, hi := s*per, min((s+1)*per, n)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i += batch {
				reqs := make([]*jetflow.SubmitRequest, min(batch, hi-i))
				for k := range reqs {
					reqs[k] = request()
				}
				_, es := cl.SubmitMany(ctx, reqs)
				for _, err := range es {
					if err != nil && errs[s] == nil {
						errs[s] = err
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// writeHeapProfile writes the heap profile as of the last GC to path (no
// GC is forced: that would change what the phase after it measures).
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
