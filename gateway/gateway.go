package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/clientstore"
)

// Defaults of Config.
const (
	DefaultAddr         = "127.0.0.1:8080"
	DefaultMaxBodyBytes = 1 << 20
	defaultMaxWait      = 60 * time.Second
	DefaultMaxStreams   = 1000
	defaultPageSize     = 50
	maxPageSize         = 1000
)

// Config configures a Gateway. The zero value of every field but Client
// means its default.
type Config struct {
	// Client is what the gateway serves the HTTP API with: a client of
	// the engine's NATS permissions (jetflow.Connect or NewClient without a
	// token); what the gateway writes names the client (ClientOptions.Name).
	Client *jetflow.Client
	// Categories, when not empty, are the only categories a type may be
	// registered under (400 invalid-category).
	Categories []string
	// Addr is the address to listen on; empty: Start listens nowhere, and
	// the Gateway is served as an http.Handler by its owner.
	Addr string
	// Lease is how long a remote worker's claim lasts without a heartbeat
	// (default engine.DefaultLease); workers are told to beat every Lease/3.
	Lease time.Duration
	// MaxBodyBytes bounds request bodies (default 1 MiB): more is 413.
	MaxBodyBytes int64
	// MaxUpload bounds the files of one multipart submit together
	// (default DefaultMaxUpload): more is 413. MaxFiles bounds how many
	// (default and at most commands.MaxFiles): more is 400.
	MaxUpload int64
	MaxFiles  int
	// MaxWait caps Prefer: wait=N and a claim's wait (default 60s).
	MaxWait time.Duration
	// ProgressInterval bounds progress events from a remote worker to one
	// per job per interval (default engine.DefaultProgressInterval): more
	// frequent reports are coalesced, the last value written.
	ProgressInterval time.Duration
	// MaxStreams bounds the requests that stay open: event streams (SSE)
	// and long polls (Prefer: wait, a claim's or a heartbeat's wait) together (default
	// 1000). Past it such a request is refused at once: 503 overloaded.
	MaxStreams int
	// TrustedOrigins are origins ("https://ops.example.com") whose pages
	// may send unsafe requests (POST, PUT, PATCH, DELETE) to the gateway
	// from a browser; every other cross-origin one is refused (CSRF).
	// Requests from non-browser clients (no Origin, no Sec-Fetch-Site) are
	// not affected.
	TrustedOrigins []string
	// Auth turns access control on: every request but /healthz, the login
	// page and static files needs a token (Authorization: Bearer, or the
	// dashboard's cookie), its role must allow what the route does, and
	// what it reads and writes is its namespace's (gateway/auth.go).
	Auth bool
	// AuditPublicKey is the public key the engine the gateway runs with
	// signs the event log's checkpoints with (GET /api/v1/audit/pubkey;
	// serve sets it); "": the key the newest checkpoint names.
	AuditPublicKey string
	// OpenOps, with Auth, serves /metrics and /readyz without a token
	// (otherwise /metrics needs a token good in every namespace).
	OpenOps bool
	// Registry receives the gateway's metrics and is what /metrics serves;
	// nil: a registry of its own, with the Go and process collectors.
	Registry *prometheus.Registry
	Log      *slog.Logger

	// flushTicks, if set, replaces the live stream's flush ticker: tests
	// send a tick when the changes they made are all in.
	flushTicks <-chan time.Time
}

func (c Config) withDefaults() Config {
	if c.Lease <= 0 {
		c.Lease = engine.DefaultLease
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.MaxUpload <= 0 {
		c.MaxUpload = DefaultMaxUpload
	}
	if c.MaxFiles <= 0 || c.MaxFiles > commands.MaxFiles {
		c.MaxFiles = DefaultMaxFiles
	}
	if c.MaxWait <= 0 {
		c.MaxWait = defaultMaxWait
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = engine.DefaultProgressInterval
	}
	if c.MaxStreams <= 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if c.Client == nil {
		return errors.New("gateway: no client")
	}
	if clientstore.Of(c.Client) == nil {
		return errors.New("gateway: the client has a token: the gateway needs a client with the engine's NATS permissions")
	}
	if c.Lease < 3*time.Millisecond {
		return errors.New("gateway: lease too short")
	}
	return nil
}

// Gateway serves the HTTP API, the worker protocol, the dashboard and the
// operations endpoints. It is an engine.Component (Start, Stop) and an
// http.Handler.
type Gateway struct {
	cfg      Config
	store    *engine.Store
	remote   *engine.Remote
	index    *index
	workers  *registry
	metrics  *metrics
	progress *engine.ProgressCoalescer // a remote worker's progress reports, coalesced as the runtime's
	cancels  *cancelHub                // the cancel broadcast, for heartbeats that wait
	handler  http.Handler
	log      *slog.Logger
	csrf     *http.CrossOriginProtection

	bulkOps    bulkOps // bulk operations in progress (bulk.go)
	qcache     sharedRead[[]*QueueInfo]
	wcache     sharedRead[[]*workerRecord]
	open       chan struct{} // a slot per open stream or long poll (Config.MaxStreams)
	logReads   chan struct{} // a slot per read of the event log (MaxLogReads)
	ctxMu      sync.Mutex
	baseCtx    context.Context // cancelled by Stop: ends long polls and streams
	baseCancel context.CancelFunc

	mu      sync.Mutex
	started bool
	srv     *http.Server
	ln      net.Listener
	served  chan struct{}
}

// New returns a Gateway; Start starts it.
func New(cfg Config) (*Gateway, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Log.With("component", "gateway")
	st := clientstore.Of(cfg.Client)
	if len(cfg.Categories) > 0 {
		st.Types.Categories = cfg.Categories
	}
	g := &Gateway{cfg: cfg, store: st, log: log,
		remote:   engine.NewRemote(st, cfg.Lease, cfg.Log),
		index:    newIndex(st.KV, cfg.Log),
		open:     make(chan struct{}, cfg.MaxStreams),
		logReads: make(chan struct{}, maxLogReads),
		qcache:   sharedRead[[]*QueueInfo]{ttl: sharedTTL},
		wcache:   sharedRead[[]*workerRecord]{ttl: sharedTTL},
	}
	g.workers = newRegistry(st, cfg.Lease)
	g.metrics = newMetrics(g, cfg.Registry)
	g.progress = engine.NewProgressCoalescer(cfg.ProgressInterval, g.flushProgress)
	g.cancels = &cancelHub{nc: st.NC}
	g.csrf = http.NewCrossOriginProtection()
	for _, o := range cfg.TrustedOrigins {
		if err := g.csrf.AddTrustedOrigin(o); err != nil {
			return nil, fmt.Errorf("gateway: trusted origin: %w", err)
		}
	}
	g.baseCtx, g.baseCancel = context.WithCancel(context.Background())
	g.handler = g.middleware(g.routes())
	return g, nil
}

// Start provisions the worker registry, loads the index, starts the
// metrics consumer and, with an Addr, listens. Idempotent.
func (g *Gateway) Start(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started {
		return nil
	}
	g.ctxMu.Lock()
	if g.baseCtx.Err() != nil { // started again after a Stop
		g.baseCtx, g.baseCancel = context.WithCancel(context.Background())
	}
	g.ctxMu.Unlock()
	if err := g.index.Start(ctx); err != nil {
		return err
	}
	if err := g.metrics.Start(ctx); err != nil {
		g.index.Stop(ctx)
		return err
	}
	if g.cfg.Addr != "" {
		ln, err := net.Listen("tcp", g.cfg.Addr)
		if err != nil {
			g.metrics.Stop(ctx)
			g.index.Stop(ctx)
			return fmt.Errorf("gateway: listen on %s: %w", g.cfg.Addr, err)
		}
		g.ln = ln
		g.srv = &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
			BaseContext: func(net.Listener) context.Context { return g.base() },
			ErrorLog:    slog.NewLogLogger(g.log.Handler(), slog.LevelDebug)}
		g.served = make(chan struct{})
		go func() {
			defer close(g.served)
			if err := g.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				g.log.Error("serve", "err", err)
			}
		}()
		g.log.Info("HTTP API and dashboard", "url", "http://"+ln.Addr().String()+"/")
	}
	g.started = true
	return nil
}

// base is the context of the gateway's current run: Stop cancels it.
func (g *Gateway) base() context.Context {
	g.ctxMu.Lock()
	defer g.ctxMu.Unlock()
	return g.baseCtx
}

// Addr is the address the gateway listens on, once started with an Addr.
func (g *Gateway) Addr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ln == nil {
		return ""
	}
	return g.ln.Addr().String()
}

// Stop ends long polls and streams, stops listening (waiting for requests
// in flight until ctx is done), and stops the index and the metrics
// consumer. Idempotent.
func (g *Gateway) Stop(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.started {
		return
	}
	g.started = false
	g.ctxMu.Lock()
	g.baseCancel()
	g.ctxMu.Unlock()
	if g.srv != nil {
		if err := g.srv.Shutdown(ctx); err != nil {
			_ = g.srv.Close()
		}
		<-g.served
		g.srv, g.ln = nil, nil
	}
	g.metrics.Stop(ctx)
	g.index.Stop(ctx)
	g.cancels.close()
}

// ServeHTTP serves the API, the dashboard and the operations endpoints.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) { g.handler.ServeHTTP(w, r) }

// hold takes a slot for a request that stays open (a stream, a long
// poll), or refuses it with an overloaded problem when all Config.MaxStreams
// are taken; release gives the slot back.
func (g *Gateway) hold(w http.ResponseWriter) (release func(), err error) {
	select {
	case g.open <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-g.open }) }, nil
	default:
		w.Header().Set("Retry-After", "1")
		return nil, newProblem(problemOverloaded, http.StatusServiceUnavailable, fmt.Sprintf(
			"the gateway holds its maximum of %d open streams and long polls; retry shortly", cap(g.open)))
	}
}

// methods maps HTTP methods to the handlers of one route.
type methods map[string]http.HandlerFunc

// route registers a path whose methods are dispatched here, so that a
// method the path does not have is a 405 problem with an Allow header.
func route(mux *http.ServeMux, pattern string, m methods) {
	allow := make([]string, 0, len(m)+1)
	for k := range m {
		allow = append(allow, k)
	}
	if m[http.MethodGet] != nil {
		allow = append(allow, http.MethodHead)
	}
	slices.Sort(allow)
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		h := m[r.Method]
		if h == nil && r.Method == http.MethodHead {
			h = m[http.MethodGet]
		}
		if h == nil {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeProblem(w, r, newProblem(problemMethodNotAllowed, http.StatusMethodNotAllowed,
				fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, strings.Join(allow, ", "))))
			return
		}
		h(w, r)
	})
}

func (g *Gateway) routes() http.Handler {
	mux := http.NewServeMux()
	const v1 = "/api/v1"
	read, work := commands.ActRead, commands.ActWork
	route(mux, v1+"/jobs", methods{"GET": g.act(read, g.listJobs), "POST": g.act(commands.ActSubmit, g.submitJob)})
	route(mux, v1+"/jobs/{id}", methods{"GET": g.jobAct(read, g.getJob), "DELETE": g.jobAct(commands.ActCancel, g.cancelJob),
		"PATCH": g.jobAct(work, g.patchJob)})
	route(mux, v1+"/jobs/{id}/cancel", methods{"POST": g.jobAct(commands.ActCancel, g.cancelJob)})
	route(mux, v1+"/jobs/{id}/retry", methods{"POST": g.jobAct(commands.ActRetry, g.retryJob)})
	route(mux, v1+"/jobs/{id}/priority", methods{"POST": g.jobAct(commands.ActSubmit, g.reprioritizeJob)})
	route(mux, v1+"/jobs/{id}/purge", methods{"POST": g.jobAct(commands.ActAdmin, g.purgeJob)})
	route(mux, v1+"/jobs/{id}/children", methods{"GET": g.jobAct(read, g.listChildren)})
	route(mux, v1+"/jobs/{id}/events", methods{"GET": g.jobAct(read, g.jobEvents)})
	route(mux, v1+"/jobs/{id}/files", methods{"GET": g.jobAct(read, g.listFiles)})
	route(mux, v1+"/jobs/{id}/download", methods{"GET": g.jobAct(read, g.download)})
	route(mux, v1+"/jobs/{id}/inputs/{name...}", methods{"GET": g.jobAct(work, g.workerInput)})
	route(mux, v1+"/jobs/{id}/result", methods{"GET": g.jobAct(read, g.getResult), "PUT": g.jobAct(work, g.workerResult)})
	route(mux, v1+"/jobs/{id}/step-inputs/{step}", methods{"GET": g.jobAct(work, g.stepInput)})
	route(mux, v1+"/workflows", methods{"POST": g.act(commands.ActSubmit, g.submitWorkflow)})
	route(mux, v1+"/workflows/{id}", methods{"GET": g.jobAct(read, g.getWorkflow)})
	route(mux, v1+"/workflows/{id}/retry", methods{"POST": g.jobAct(commands.ActRetry, g.retryWorkflow)})
	route(mux, v1+"/workers", methods{"GET": g.act(read, g.listWorkers), "POST": g.act(work, g.registerWorker)})
	route(mux, v1+"/workers/{id}", methods{"GET": g.act(read, g.getWorker), "DELETE": g.act(work, g.unregisterWorker)})
	route(mux, v1+"/workers/{id}/heartbeat", methods{"POST": g.act(work, g.heartbeat)})
	route(mux, v1+"/tasks/claim", methods{"POST": g.act(work, g.claim)})
	route(mux, v1+"/batches/{id}", methods{"PATCH": g.act(work, g.patchBatch)})
	route(mux, v1+"/queues", methods{"GET": g.act(read, g.listQueues)})
	route(mux, v1+"/queues/{queue}", methods{"PUT": g.act(commands.ActAdmin, everyNamespace(commands.ActAdmin, g.setQueueLimits))})
	route(mux, v1+"/queues/{queue}/pause", methods{"POST": g.act(commands.ActAdmin, g.pauseQueue)})
	route(mux, v1+"/queues/{queue}/resume", methods{"POST": g.act(commands.ActAdmin, g.resumeQueue)})
	route(mux, v1+"/types", methods{"GET": g.act(read, g.listTypes)})
	route(mux, v1+"/types/{scope}/{category}/{name}", methods{"GET": g.act(read, g.getType),
		"PUT": g.act(commands.ActRegisterType, g.putType)})
	route(mux, v1+"/namespaces", methods{"GET": g.act(read, g.listNamespaces)})
	route(mux, v1+"/namespaces/{ns}", methods{"PUT": g.act(commands.ActAdmin, g.putNamespace)})
	route(mux, v1+"/tokens", methods{"GET": g.act(commands.ActAdmin, g.listTokens), "POST": g.act(commands.ActAdmin, g.createToken)})
	route(mux, v1+"/tokens/{id}", methods{"DELETE": g.act(commands.ActAdmin, g.revokeToken)})
	route(mux, v1+"/stats", methods{"GET": g.act(read, g.stats)})
	route(mux, v1+"/stream", methods{"GET": g.act(read, g.stream)})
	route(mux, v1+"/audit/verify", methods{"GET": g.act(read, g.auditVerify)})
	route(mux, v1+"/audit/export", methods{"GET": g.act(read, g.auditExport)})
	route(mux, v1+"/audit/pubkey", methods{"GET": g.act(read, g.auditPubkey)})
	g.operatorRoutes(mux, v1)
	g.scheduleRoutes(mux)
	mux.HandleFunc(v1+"/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, newProblem(engine.ProblemNotFound, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path))
	})
	route(mux, "/healthz", methods{"GET": g.healthz})
	route(mux, "/readyz", methods{"GET": g.ops(g.readyz, false)})
	route(mux, "/metrics", methods{"GET": g.ops(g.metrics.ServeHTTP, true)})
	g.dashboardRoutes(mux)
	return mux
}

// middleware recovers panics into 500 problems, refuses cross-origin
// unsafe requests and logs requests at debug.
func (g *Gateway) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				g.log.Error("handler panicked", "method", r.Method, "path", r.URL.Path, "panic", p, "stack", string(debug.Stack()))
				if !rec.wrote {
					writeProblem(rec, r, newProblem("internal", http.StatusInternalServerError, "internal error"))
				}
			}
			g.log.Debug("http", "method", r.Method, "path", r.URL.Path, "status", rec.status, "took", time.Since(start))
		}()
		// Cross-site request forgery: a page of another origin can make a
		// browser send a simple POST (no preflight) to a gateway on
		// localhost. Unsafe methods from another origin (Sec-Fetch-Site
		// other than same-origin, or an Origin that is not this host) are
		// refused; the dashboard's own requests are same-origin, and
		// clients that are not browsers send neither header.
		if err := g.csrf.Check(r); err != nil {
			writeProblem(rec, r, newProblem(problemCrossOrigin, http.StatusForbidden, fmt.Sprintf(
				"%s from another origin (Origin %q, Sec-Fetch-Site %q) is refused: %v",
				r.Method, r.Header.Get("Origin"), r.Header.Get("Sec-Fetch-Site"), err)))
			return
		}
		ar, ok := g.authenticate(rec, r)
		if !ok {
			return
		}
		next.ServeHTTP(rec, ar)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush of the real writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// Flush passes flushes through (Server-Sent Events).
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
