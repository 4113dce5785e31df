package jetflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/invopop/jsonschema"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Job is a job as its handler sees it, with its payload decoded into T.
type Job[T any] struct {
	ID        string
	Type      string
	Queue     string
	Namespace string
	Attempt   int // 1 for the first attempt
	Tags      []string
	Payload   T

	task *engine.Task
}

// Record is the job as it was claimed (its whole record, as Client.Get
// returns it), rendered when asked for.
func (j *Job[T]) Record() *JobInfo {
	if j.task == nil {
		return nil
	}
	return viewOf(j.task.Job)
}

// Progress reports how far the handler got (current of total, with an
// optional message). Call it as often as you like: writes are coalesced to a
// few a second, the last value wins, and the last one is written before the
// job's outcome. Visible live in `jetflow get` and the job's event stream.
func (j *Job[T]) Progress(current, total int64, message string) error {
	if j.task == nil {
		return errors.New("jetflow: progress outside a handler")
	}
	return j.task.Progress(current, total, message)
}

// Emit appends a named event to the job's log (level info, warning or
// error) with a message and fields, e.g. Emit(ctx, "import.page_done",
// "info", "page 3 of 10", map[string]any{"rows": 500}).
func (j *Job[T]) Emit(ctx context.Context, name, level, message string, fields map[string]any) error {
	if j.task == nil {
		return errors.New("jetflow: emit outside a handler")
	}
	return j.task.Emit(ctx, name, level, message, fields)
}

// RawJob is a job whose payload is left as JSON: what a Handler gets.
type RawJob = Job[json.RawMessage]

// Handler runs one attempt of a job and returns its JSON result.
type Handler interface {
	Work(ctx context.Context, job *RawJob) (json.RawMessage, error)
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, job *RawJob) (json.RawMessage, error)

// Work calls f.
func (f HandlerFunc) Work(ctx context.Context, job *RawJob) (json.RawMessage, error) {
	return f(ctx, job)
}

// Middleware wraps a Handler: logging, metrics, tracing, recovery.
type Middleware func(Handler) Handler

// QueueConfig configures how a Worker runs one queue.
type QueueConfig struct {
	Concurrency int           // handlers running at once on this queue in this process (default: WorkerConfig.Concurrency)
	Lease       time.Duration // a silent worker's jobs are requeued after this (default: WorkerConfig.Lease)
}

// WorkerConfig configures a Worker. The zero value means defaults.
type WorkerConfig struct {
	// ID names this worker in the events it writes and in the worker
	// registry: 1-128 of [A-Za-z0-9_.-] (default host-pid-random).
	ID string
	// Queues configures queues by name; a queue that is not listed gets
	// Concurrency and Lease.
	Queues map[string]QueueConfig
	// Concurrency is how many handlers run at once on each queue not
	// listed in Queues (default 10). Under serve --sync always and on a
	// cluster, where a claim waits for an fsync or a replicated write,
	// while all of them are busy and they are fast next to a claim, the
	// worker claims the next jobs ahead of them (as many as are expected to
	// free during four claims, at most 8 × Concurrency; none with handlers
	// much slower than a claim): such a job is running in its
	// record a moment before its handler starts, and goes back to its
	// queue if no handler frees soon (docs/architecture.md, "Claims ahead").
	Concurrency int
	// Namespace is the worker's namespace: its handlers of category:name
	// types serve that namespace's types (default "default").
	Namespace string
	// Lease is how long a silent worker keeps the jobs of a queue not listed
	// in Queues (default 30s): after it, they are requeued for another
	// worker. The worker renews it by itself while it lives.
	Lease time.Duration
	// ShutdownGrace is how long Stop lets running handlers finish before it
	// hands their jobs to other workers (default 10s).
	ShutdownGrace time.Duration
	Logger        *slog.Logger
	// Kind says what the worker is in the worker registry: "sdk" (the
	// default) or "shell" (jobs run as shell commands, jetflow worker
	// --exec).
	Kind string
	// OnOutcome, if set, is called after an attempt's outcome was recorded,
	// with the job as recorded (for metrics and benchmarks). It runs in the
	// handler's slot: keep it fast.
	OnOutcome func(job *JobInfo)
}

// Worker runs handlers for job types. Register handlers, then Start (or Run).
type Worker struct {
	client *Client
	cfg    WorkerConfig

	mu       sync.Mutex
	mws      []Middleware
	handlers map[string]map[string]Handler             // queue ("": every queue) -> type -> handler
	schemas  map[string][]byte                         // registered type as given -> its payload's schema
	setupErr error                                     // a handler that cannot be registered: Start returns it
	batches  map[string]map[string]engine.BatchHandler // queue ("": every queue) -> batch type -> handler
	runtimes map[string]*engine.Runtime                // by queue
	starting map[string]*engine.Runtime                // by queue: new queues' runtimes being started, not yet in runtimes
	started  bool
	stopping bool               // quieted: it claims nothing more and serves no new queue
	stopped  bool               // Stop was called
	cancel   context.CancelFunc // ends the watch for new queues
	watching chan struct{}      // closed when that watch ended
}

// NewWorker returns a Worker that uses client's connection: a client with
// the engine's NATS permissions, or the worker role's (made without
// ClientOptions.Token). A worker is no Client method: it claims work items
// from JetStream and writes its jobs' events itself, which a token
// client's NATS user may not; Start refuses a token client. (Workers in
// other languages, or without those permissions, use the HTTP worker
// protocol.)
func NewWorker(client *Client, cfg WorkerConfig) *Worker {
	if cfg.ID == "" {
		cfg.ID = defaultName() + "-" + domain.NewID()[20:]
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Worker{client: client, cfg: cfg, handlers: map[string]map[string]Handler{}, schemas: map[string][]byte{},
		batches: map[string]map[string]engine.BatchHandler{}}
}

// ID is the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// HandlerOption sets an option of a registration.
type HandlerOption func(*handlerOpts)

type handlerOpts struct{ queue string }

// OnQueue registers the handler on queue q only. Without it, a handler
// serves its job type in every queue: those that exist when the worker
// starts, "default", and those created while it runs.
func OnQueue(q string) HandlerOption { return func(o *handlerOpts) { o.queue = q } }

// everyQueue is the key of the handlers registered without OnQueue.
const everyQueue = ""

// Handle registers h for jobType. Registering after Start has no effect.
func (w *Worker) Handle(jobType string, h Handler, opts ...HandlerOption) {
	o := handlerOpts{queue: everyQueue}
	for _, opt := range opts {
		opt(&o)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.handlers[o.queue] == nil {
		w.handlers[o.queue] = map[string]Handler{}
	}
	w.handlers[o.queue][jobType] = h
}

// Use adds middleware around every handler; the first added is outermost.
func (w *Worker) Use(mw ...Middleware) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.mws = append(w.mws, mw...)
}

// Register registers a typed handler: the payload is decoded into T (a
// payload that does not decode fails the job at once) and the result is
// encoded as JSON.
func Register[T, R any](w *Worker, jobType string, fn func(ctx context.Context, job *Job[T]) (R, error), opts ...HandlerOption) {
	w.Handle(jobType, HandlerFunc(func(ctx context.Context, raw *RawJob) (json.RawMessage, error) {
		job := &Job[T]{ID: raw.ID, Type: raw.Type, Queue: raw.Queue, Namespace: raw.Namespace,
			Attempt: raw.Attempt, Tags: raw.Tags, task: raw.task}
		if len(raw.Payload) > 0 && string(raw.Payload) != "null" {
			if err := json.Unmarshal(raw.Payload, &job.Payload); err != nil {
				return nil, Permanent(WithCode("BAD_PAYLOAD", fmt.Errorf("payload does not decode into %T: %w", job.Payload, err)))
			}
		}
		res, err := fn(ctx, job)
		if err != nil {
			return nil, err
		}
		return json.Marshal(res)
	}), opts...)
	if commands.Registered(jobType) {
		schema, err := schemaOf[T]()
		w.mu.Lock()
		w.schemas[jobType] = schema
		if err != nil {
			w.setupErr = errors.Join(w.setupErr, fmt.Errorf("jetflow: schema of %s's payload: %w", jobType, err))
		}
		w.mu.Unlock()
	}
}

// schemaOf is the JSON Schema of a handler's payload type T, generated from
// its Go type (nil for any payload: an interface, json.RawMessage, []byte).
// Fields are required unless omitempty; other properties are allowed, as
// encoding/json ignores them.
func schemaOf[T any]() ([]byte, error) {
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Interface || t == reflect.TypeFor[json.RawMessage]() || t == reflect.TypeFor[[]byte]() {
		return nil, nil
	}
	r := jsonschema.Reflector{AllowAdditionalProperties: true, DoNotReference: true}
	return json.Marshal(r.Reflect(new(T)))
}

// Start starts claiming jobs on every queue a handler is registered on;
// handlers registered without OnQueue serve every queue, including those
// created later (the worker watches the queue registry for them). A worker
// that was stopped does not start again: Start returns an error matching
// ErrShutdown.
func (w *Worker) Start(ctx context.Context) error {
	if w.client.store == nil {
		return fmt.Errorf("worker: %w", errTokenClient)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return fmt.Errorf("jetflow: worker %s was stopped; a stopped worker does not start again: %w", w.cfg.ID, ErrShutdown)
	}
	if w.started {
		return nil
	}
	if len(w.handlers) == 0 && len(w.batches) == 0 {
		return errors.New("jetflow: worker has no handlers")
	}
	if w.setupErr != nil {
		return w.setupErr
	}
	if !domain.ValidWorkerID(w.cfg.ID) {
		return fmt.Errorf("jetflow: worker id %q: want 1-128 of [A-Za-z0-9_.-]: %w", w.cfg.ID, ErrInvalidInput)
	}
	if err := w.registerTypesLocked(ctx); err != nil {
		return err
	}
	queues := map[string]bool{}
	for q := range w.handlers {
		queues[q] = true
	}
	for q := range w.batches {
		queues[q] = true
	}
	every := queues[everyQueue]
	delete(queues, everyQueue)
	if every {
		queues[domain.DefaultQueue] = true
		recs, err := w.client.store.QueueList(ctx)
		if err != nil {
			return fmt.Errorf("jetflow: list queues: %w", err)
		}
		for _, q := range recs {
			queues[q.Name] = true
		}
	}
	w.runtimes = map[string]*engine.Runtime{}
	w.starting = map[string]*engine.Runtime{}
	for queue := range queues {
		if err := w.startQueueLocked(ctx, queue); err != nil {
			w.stopRuntimesLocked(ctx)
			return err
		}
	}
	if every {
		wctx, cancel := context.WithCancel(context.Background())
		w.cancel, w.watching = cancel, make(chan struct{})
		go w.watchQueues(wctx, w.watching)
	}
	w.started = true
	return nil
}

// registerTypesLocked registers the worker's registered types (category:name
// in its namespace, or full names) in the type registry, with the schemas
// generated from their handlers' payload types, and keys their handlers by
// full name: what the jobs carry. Free-form types are left as they are.
func (w *Worker) registerTypesLocked(ctx context.Context) error {
	ns := w.cfg.Namespace
	if ns == "" {
		ns = domain.DefaultNS
	}
	// Every type is checked before any is written: a refused one leaves
	// nothing registered and the handlers as they were.
	defs := map[string]commands.TypeDef{} // by the type as given
	for _, byType := range w.handlers {
		for t := range byType {
			if !commands.Registered(t) {
				continue
			}
			names, err := commands.Candidates(ns, t)
			if err != nil {
				return fmt.Errorf("jetflow: handler of %s: %w", t, err)
			}
			def := commands.TypeDef{Name: names[0], Schema: w.schemas[t]}
			if err := w.client.store.Types.Check(ctx, def); err != nil {
				return fmt.Errorf("jetflow: register type %s: %w", def.Name, err)
			}
			defs[t] = def
		}
	}
	for _, def := range defs {
		if _, _, err := w.client.store.Types.Register(ctx, def, w.cfg.ID); err != nil {
			return fmt.Errorf("jetflow: register type %s: %w", def.Name, err)
		}
	}
	for q, byType := range w.handlers {
		renamed := make(map[string]Handler, len(byType))
		for t, h := range byType {
			if def, ok := defs[t]; ok {
				t = def.Name.String()
			}
			renamed[t] = h
		}
		w.handlers[q] = renamed
	}
	return nil
}

// startQueueLocked starts the runtime of one queue: its own handlers and
// those of every queue that it does not override.
func (w *Worker) startQueueLocked(ctx context.Context, queue string) error {
	if w.runtimes[queue] != nil {
		return nil
	}
	rt, err := w.newRuntimeLocked(queue)
	if err == nil {
		err = rt.Start(ctx)
	}
	if err != nil {
		return err
	}
	w.runtimes[queue] = rt
	return nil
}

// newRuntimeLocked makes the runtime of one queue, not started.
func (w *Worker) newRuntimeLocked(queue string) (*engine.Runtime, error) {
	hs := map[string]engine.Handler{}
	bs := map[string]engine.BatchHandler{}
	for _, key := range []string{everyQueue, queue} {
		for jobType, h := range w.handlers[key] {
			for i := len(w.mws) - 1; i >= 0; i-- {
				h = w.mws[i](h)
			}
			hs[jobType] = adapt(h)
		}
		maps.Copy(bs, w.batches[key])
	}
	qc, ok := w.cfg.Queues[queue]
	if !ok {
		qc = QueueConfig{Concurrency: w.cfg.Concurrency, Lease: w.cfg.Lease}
	}
	return engine.NewRuntime(w.client.store, engine.RuntimeConfig{
		Queue: queue, Handlers: hs, Batches: bs, Concurrency: qc.Concurrency, Lease: qc.Lease,
		ShutdownGrace: w.cfg.ShutdownGrace, WorkerID: w.cfg.ID, Namespace: w.cfg.Namespace, Kind: w.cfg.Kind, Log: w.cfg.Logger, OnOutcome: w.onOutcome(),
	})
}

func (w *Worker) onOutcome() func(*domain.Job, *domain.Event) {
	if w.cfg.OnOutcome == nil {
		return nil
	}
	return func(j *domain.Job, _ *domain.Event) { w.cfg.OnOutcome(viewOf(j)) }
}

// watchQueues starts a runtime for each queue created while the worker
// runs, for the handlers of every queue.
func (w *Worker) watchQueues(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	kv, err := w.client.store.JS.KeyValue(ctx, streams.QueuesBucket)
	if err != nil {
		w.cfg.Logger.Error("watch queues", "err", err)
		return
	}
	for ctx.Err() == nil {
		watch, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
		if err != nil {
			w.cfg.Logger.Warn("watch queues", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for e := range watch.Updates() {
			if e == nil {
				continue // the queues that existed: started already, or started now
			}
			w.serveNewQueue(ctx, e.Key())
		}
		_ = watch.Stop()
	}
}

// serveNewQueue starts the runtime of a queue created while the worker
// runs. Its start (network calls) is made without the worker's mutex, so
// that Quiet and Stop never wait behind it: a runtime that started while
// the worker went quiet is quieted at once, and Stop stops it with the
// others (Stop waits for this watch to end first).
func (w *Worker) serveNewQueue(ctx context.Context, queue string) {
	w.mu.Lock()
	if w.stopping || w.runtimes[queue] != nil {
		w.mu.Unlock()
		return
	}
	rt, err := w.newRuntimeLocked(queue)
	if err == nil {
		// Quiet and Stop reach it while it starts: it then claims nothing.
		w.starting[queue] = rt
	}
	w.mu.Unlock()
	if err == nil {
		err = rt.Start(ctx)
	}
	if err != nil {
		w.mu.Lock()
		delete(w.starting, queue)
		w.mu.Unlock()
		if ctx.Err() == nil && !errors.Is(err, ErrShutdown) {
			w.cfg.Logger.Error("serve a new queue", "queue", queue, "err", err)
		}
		return
	}
	if h := startedHook.Load(); h != nil {
		(*h)(queue)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.starting, queue)
	if w.runtimes == nil { // stopped (Stop waits for this watch: not reached)
		rt.Stop(context.Background())
		return
	}
	w.runtimes[queue] = rt
	if w.stopping {
		rt.Quiet()
	}
}

// startedHook, when set (by tests), is called when the queue watch started
// a new queue's runtime, before the worker registers it.
var startedHook atomic.Pointer[func(queue string)]

func (w *Worker) stopRuntimesLocked(ctx context.Context) {
	var wg sync.WaitGroup
	for _, rt := range w.runtimes {
		wg.Add(1)
		go func() { defer wg.Done(); rt.Stop(ctx) }()
	}
	wg.Wait()
	w.runtimes = nil
}

// adapt turns a public Handler into the engine's.
func adapt(h Handler) engine.Handler {
	return func(ctx context.Context, t *engine.Task) ([]byte, error) {
		j := t.Job
		raw := &RawJob{ID: j.ID, Type: j.Spec.Type, Queue: j.Spec.Queue, Namespace: j.Spec.Namespace,
			Attempt: j.Attempt, Tags: j.Spec.Tags, Payload: json.RawMessage(j.Spec.Payload), task: t}
		return h.Work(ctx, raw)
	}
}

// Quiet makes the worker claim nothing more: what its fetches still bring
// is handed back for other workers, and it serves no new queue. Running
// handlers go on, their leases renewed, until Stop (which quiets the
// worker first). A claim in flight when Quiet is called runs as well; a
// new queue's runtime starting as Quiet is called claims nothing. Quiet on
// a worker not started does nothing.
func (w *Worker) Quiet() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		w.quietLocked()
	}
}

func (w *Worker) quietLocked() {
	w.stopping = true
	for _, rt := range w.runtimes {
		rt.Quiet()
	}
	for _, rt := range w.starting {
		rt.Quiet() // at once: a runtime quieted as it starts ends its start unstarted
	}
}

// Stop stops claiming, lets running handlers finish within the shutdown
// grace, and hands the rest to other workers (job.requeued). A claim that
// was in flight when Stop began runs too, within the same grace; one that
// lands after the grace is handed back without running. When ctx ends,
// what is left of the grace is skipped. Stop is final; it may be called
// more than once, from several goroutines, and each call returns once the
// worker stopped.
func (w *Worker) Stop(ctx context.Context) {
	w.mu.Lock()
	w.stopped = true
	w.quietLocked()
	cancel, watching := w.cancel, w.watching
	w.mu.Unlock()
	// Every Stop waits for the queue watch to end (a second one too), so
	// that no runtime it is starting is left out of the stop below.
	if cancel != nil {
		cancel()
		<-watching
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopRuntimesLocked(ctx)
}

// Run starts the worker and stops it when ctx is done.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	w.Stop(context.Background())
	return nil
}

// Running is the number of attempts this worker holds: handlers running,
// and outcomes being recorded after their handler returned.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, rt := range w.runtimes {
		n += rt.Running()
	}
	return n
}
