package jetflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jetflow/jetflow/engine"
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
	Info      *JobInfo // the job as it was claimed

	task *engine.Task
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
	Concurrency int           // handlers running at once in this process (default 10)
	Lease       time.Duration // a silent worker's jobs are requeued after this (default 30s)
}

// WorkerConfig configures a Worker. The zero value means defaults.
type WorkerConfig struct {
	// ID names this worker in the events it writes (default host-pid).
	ID string
	// Queues configures queues by name; a queue a handler is registered on
	// but which is not listed gets the defaults.
	Queues map[string]QueueConfig
	// ShutdownGrace is how long Stop lets running handlers finish before it
	// hands their jobs to other workers (default 10s).
	ShutdownGrace time.Duration
	Logger        *slog.Logger
}

// Worker runs handlers for job types. Register handlers, then Start (or Run).
type Worker struct {
	client *Client
	cfg    WorkerConfig

	mu       sync.Mutex
	mws      []Middleware
	handlers map[string]map[string]Handler             // queue -> type -> handler
	batches  map[string]map[string]engine.BatchHandler // queue -> batch type -> handler
	runtimes []*engine.Runtime
	started  bool
}

// NewWorker returns a Worker that uses client's connection.
func NewWorker(client *Client, cfg WorkerConfig) *Worker {
	if cfg.ID == "" {
		cfg.ID = defaultName() + "-" + streams.NewID()[20:]
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Worker{client: client, cfg: cfg, handlers: map[string]map[string]Handler{},
		batches: map[string]map[string]engine.BatchHandler{}}
}

// ID is the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// HandlerOption sets an option of a registration.
type HandlerOption func(*handlerOpts)

type handlerOpts struct{ queue string }

// OnQueue registers the handler on queue q (default "default").
func OnQueue(q string) HandlerOption { return func(o *handlerOpts) { o.queue = q } }

// Handle registers h for jobType. Registering after Start has no effect.
func (w *Worker) Handle(jobType string, h Handler, opts ...HandlerOption) {
	o := handlerOpts{queue: streams.DefaultQueue}
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
			Attempt: raw.Attempt, Tags: raw.Tags, Info: raw.Info, task: raw.task}
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
}

// Start starts claiming jobs on every queue a handler is registered on.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return nil
	}
	if len(w.handlers) == 0 && len(w.batches) == 0 {
		return errors.New("jetflow: worker has no handlers")
	}
	queues := map[string]bool{}
	for q := range w.handlers {
		queues[q] = true
	}
	for q := range w.batches {
		queues[q] = true
	}
	for queue := range queues {
		qc := w.cfg.Queues[queue]
		hs := make(map[string]engine.Handler, len(w.handlers[queue]))
		for jobType, h := range w.handlers[queue] {
			for i := len(w.mws) - 1; i >= 0; i-- {
				h = w.mws[i](h)
			}
			hs[jobType] = adapt(h)
		}
		rt, err := engine.NewRuntime(w.client.store, engine.RuntimeConfig{
			Queue: queue, Handlers: hs, Batches: w.batches[queue], Concurrency: qc.Concurrency, Lease: qc.Lease,
			ShutdownGrace: w.cfg.ShutdownGrace, WorkerID: w.cfg.ID, Log: w.cfg.Logger,
		})
		if err == nil {
			err = rt.Start(ctx)
		}
		if err != nil {
			for _, r := range w.runtimes {
				r.Stop(ctx)
			}
			w.runtimes = nil
			return err
		}
		w.runtimes = append(w.runtimes, rt)
	}
	w.started = true
	return nil
}

// adapt turns a public Handler into the engine's.
func adapt(h Handler) engine.Handler {
	return func(ctx context.Context, t *engine.Task) ([]byte, error) {
		j := t.Job
		raw := &RawJob{ID: j.ID, Type: j.Spec.Type, Queue: j.Spec.Queue, Namespace: j.Spec.Namespace,
			Attempt: j.Attempt, Tags: j.Spec.Tags, Payload: json.RawMessage(j.Spec.Payload), task: t}
		raw.Info = viewOf(j)
		return h.Work(ctx, raw)
	}
}

// Stop stops claiming, lets running handlers finish within the shutdown
// grace, and hands the rest to other workers (job.requeued).
func (w *Worker) Stop(ctx context.Context) {
	w.mu.Lock()
	rts := w.runtimes
	w.runtimes = nil
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, rt := range rts {
		wg.Add(1)
		go func() { defer wg.Done(); rt.Stop(ctx) }()
	}
	wg.Wait()
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

// Running is the number of handlers running.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, rt := range w.runtimes {
		n += rt.Running()
	}
	return n
}
