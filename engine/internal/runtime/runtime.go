package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/pull"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
	"github.com/jetflow/jetflow/streams"
)

// Handler runs one attempt of a job and returns its JSON result. The
// control-flow errors are *PermanentError, *RetryLaterError and codedError;
// any other error is retried with backoff while retries are left.
type Handler func(ctx context.Context, t *Task) ([]byte, error)

// Defaults of Config.
const (
	DefaultConcurrency   = 10
	DefaultLease         = store.DefaultLease
	DefaultShutdownGrace = 10 * time.Second
	DefaultMaxAckPending = store.DefaultMaxAckPending
	// DefaultProgressInterval bounds progress writes to four a second a job.
	DefaultProgressInterval = 250 * time.Millisecond
)

// Config configures the worker runtime of one queue.
type Config struct {
	Queue         string
	Handlers      map[string]Handler      // by job type
	Batches       map[string]BatchHandler // by batch type
	Concurrency   int                     // handlers running at once in this process (jobs may be claimed ahead of them: ahead.go)
	Lease         time.Duration           // how long a silent worker keeps a job (the consumer's AckWait)
	ShutdownGrace time.Duration           // how long Stop lets running handlers finish
	MaxAckPending int                     // jobs of one type in flight across all workers of the queue
	WorkerID      string
	// Namespace is the worker's namespace, shown on its record in the
	// worker registry (its category:name handlers are of it); "": default.
	Namespace string
	// Kind is what the worker is, on its record (default domain.WorkerSDK;
	// domain.WorkerShell for jetflow worker --exec).
	Kind string
	Log  *slog.Logger
	// OnOutcome, if set, is called after an attempt's outcome was recorded
	// (the job's new record and the event), once its work item was settled.
	OnOutcome func(j *domain.Job, ev *domain.Event)
	// ProgressInterval is the least time between two progress events of one
	// job (default 250ms): a handler may report progress as often as it
	// likes; the last value in each interval is written.
	ProgressInterval time.Duration
}

func (c Config) withDefaults() Config {
	if c.Queue == "" {
		c.Queue = domain.DefaultQueue
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Lease == 0 {
		c.Lease = DefaultLease
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}
	if c.MaxAckPending == 0 {
		c.MaxAckPending = DefaultMaxAckPending
	}
	if c.ProgressInterval == 0 {
		c.ProgressInterval = DefaultProgressInterval
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	if !domain.ValidQueue(c.Queue) {
		return fmt.Errorf("worker: invalid queue %q", c.Queue)
	}
	if len(c.Handlers) == 0 && len(c.Batches) == 0 {
		return fmt.Errorf("worker: queue %s has no handlers", c.Queue)
	}
	for t := range c.Handlers {
		if !domain.ValidType(t) {
			return fmt.Errorf("worker: invalid job type %q", t)
		}
	}
	for t := range c.Batches {
		if !domain.ValidType(t) {
			return fmt.Errorf("worker: invalid batch type %q", t)
		}
	}
	if c.WorkerID == "" {
		return errors.New("worker: no worker id")
	}
	if c.Lease < 300*time.Millisecond {
		return &commands.InputError{Field: "lease", Value: c.Lease.String(), Reason: "too short (minimum 300ms)"}
	}
	switch {
	case c.Concurrency < 1:
		return &commands.InputError{Field: "concurrency", Value: fmt.Sprint(c.Concurrency), Reason: "must be 1 or more"}
	case c.ShutdownGrace < 0:
		return &commands.InputError{Field: "shutdown_grace", Value: c.ShutdownGrace.String(), Reason: "must not be negative"}
	case c.MaxAckPending < 1:
		return &commands.InputError{Field: "max_ack_pending", Value: fmt.Sprint(c.MaxAckPending), Reason: "must be 1 or more"}
	case c.ProgressInterval < 0:
		return &commands.InputError{Field: "progress_interval", Value: c.ProgressInterval.String(), Reason: "must not be negative"}
	}
	return nil
}

// Runtime runs the handlers of one queue: it claims work items, runs them
// with a renewed lease, and records how they ended.
type Runtime struct {
	cfg   Config
	store *store.Store
	log   *slog.Logger
	qs    jetstream.Stream

	// seats: the items being processed (Concurrency, and those claimed
	// ahead besides) and the handler slots (Concurrency), given in fetch
	// order (ahead.go).
	seats *seats
	// completing: attempts whose handler returned and whose outcome is
	// being recorded. A handler's slot is free once its outcome is handed
	// here, so the next claim does not wait for the last outcome's write
	// (under sync always, a group commit); at most completingFactor ×
	// Concurrency wait, and of them at most Concurrency with a result
	// larger than bigResult (completingBig).
	completing    chan struct{}
	completingBig chan struct{}
	claimTime     meanTime     // how long a claim takes to land
	ends          endRate      // handlers' ends per second, over the last second or two
	unseatedUntil atomic.Int64 // a job claimed ahead found no slot in time: none is until then (UnixNano)
	fixedAhead    atomic.Int32 // set by tests: claimed ahead in place of the estimate
	slowClaims    bool         // a claim waits for a group commit (sync always) or a replicated write (a cluster): claims may be made ahead
	stopping      chan struct{}
	wg            sync.WaitGroup // running process() calls

	mu        sync.Mutex
	started   bool
	starting  bool          // Start is making its consumers (without the lock)
	startDone chan struct{} // closed when that Start ends
	stopped   bool          // claiming stopped (Quiet)
	stopBegun bool
	graceEnd  bool // Stop's grace is over: it has taken the runs it cancels
	pullers   []*pull.Puller
	inflight  map[string]*run      // by job id
	held      sync.Map             // job id -> struct{}: the keys of inflight, read without mu (heartbeats)
	batches   map[string]*batchRun // by parent/piece
	parents   *parentCache
	cancelSb  *nats.Subscription
	tickStop  chan struct{}
	tickDone  chan struct{}
}

// claimedHook, when set (by tests, before a runtime starts), is called
// with a job's id after its claim lands, and with a batch's parent/piece as
// its handler is about to run, before the runtime looks whether Stop's
// grace is over.
var claimedHook func(id string)

// run is one attempt in progress.
type run struct {
	rt      *Runtime
	msg     jetstream.Msg
	id      string
	lease   uint64
	number  int
	cancel  context.CancelCauseFunc
	since   time.Time
	done    chan struct{} // closed when process() returns
	settled bool          // Stop wrote the outcome itself; process() must not (guarded by Runtime.mu)
	// finishing: the handler returned and process() records its outcome;
	// Stop waits for it rather than requeue over it (guarded by Runtime.mu).
	finishing bool

	// The attempt's own writes (progress, events, the outcome) go one at a
	// time, each on the snapshot the previous one left.
	wmu  sync.Mutex
	snap store.Snapshot
	// The claim's record, left behind (snap.Behind), is written by
	// recordTimer after store.ClaimRecordAfter unless the outcome was
	// written first (ended, under wmu).
	recordTimer *time.Timer
	ended       bool

	// Progress is coalesced: the last value waits there for its turn.
	pmu      sync.Mutex
	progress *Coalescer // made at the first report

	span    trace.Span // the attempt's span; nil with tracing off (set once, before the run is shared)
	spanEnd sync.Once
}

// New returns a runtime for one queue.
func New(s *store.Store, cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	r := &Runtime{cfg: cfg, store: s, log: cfg.Log.With("queue", cfg.Queue, "worker", cfg.WorkerID),
		completing: make(chan struct{}, completingFactor*cfg.Concurrency), completingBig: make(chan struct{}, cfg.Concurrency),
		stopping: make(chan struct{}), inflight: map[string]*run{}, batches: map[string]*batchRun{}, parents: &parentCache{store: s}}
	r.seats = newSeats(r, cfg.Concurrency)
	r.slowClaims = s.GroupCommit() != nil || s.Topology().Replicas > 1
	return r, nil
}

// Start begins claiming. It is idempotent while the runtime runs; once
// it was quieted or stopped it starts no more (an error wrapping
// ErrShutdown). A Start called while another is under way waits for it,
// then does the same. Quiet or Stop called while Start makes its consumers
// return at once: Start then ends before its first fetch, releases what it
// made, and returns ErrShutdown.
func (r *Runtime) Start(ctx context.Context) error {
	r.mu.Lock()
	for r.starting {
		done := r.startDone
		r.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		r.mu.Lock()
	}
	if r.stopped || r.stopBegun {
		r.mu.Unlock()
		return r.notAgain()
	}
	if r.started {
		r.mu.Unlock()
		return nil
	}
	// The network calls below run without the lock, so that Quiet and
	// Stop, called meanwhile, return at once.
	r.starting, r.startDone = true, make(chan struct{})
	r.mu.Unlock()
	qs, sub, sources, err := r.connect(ctx)
	r.mu.Lock()
	abort := err == nil && (r.stopped || r.stopBegun)
	if err == nil && !abort {
		r.qs, r.cancelSb = qs, sub
		for _, s := range sources {
			r.pullers = append(r.pullers, pull.Start(s.cons, s.size, s.cb, r.log))
		}
		r.tickStop, r.tickDone = make(chan struct{}), make(chan struct{})
		go r.renewLeases(r.tickStop, r.tickDone)
		r.started = true
	}
	r.starting = false
	close(r.startDone)
	r.mu.Unlock()
	if abort { // quieted or stopped meanwhile: release what connect made
		_ = sub.Unsubscribe()
		leavePresence(ctx, r) // may write the worker's record: not under the lock
		return r.notAgain()
	}
	return err
}

func (r *Runtime) notAgain() error {
	return fmt.Errorf("runtime of queue %s: quieted or stopped, it does not start again: %w", r.cfg.Queue, ErrShutdown)
}

// connectHook, when set (tests), is called as Start begins to make its
// consumers, without the runtime's lock.
var connectHook func(r *Runtime)

// source is a consumer a runtime pulls from, and what receives its items.
type source struct {
	cons jetstream.Consumer
	size func() int // how many to fetch
	cb   func(jetstream.Msg)
}

// connect makes what Start needs: the queue's streams, the worker's
// presence, the cancel subscription and every consumer (all first: pulling
// starts only once none can fail).
func (r *Runtime) connect(ctx context.Context) (jetstream.Stream, *nats.Subscription, []source, error) {
	if h := connectHook; h != nil {
		h(r)
	}
	if err := r.store.Queues().Ensure(ctx, r.cfg.Queue); err != nil {
		return nil, nil, nil, err
	}
	qs, err := r.store.JS().Stream(ctx, streams.QueueStream(r.cfg.Queue))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("queue stream: %w", err)
	}
	if err := joinPresence(ctx, r); err != nil {
		return nil, nil, nil, err
	}
	sub, err := r.store.NC().Subscribe(streams.CancelSubject, r.onCancel)
	if err != nil {
		leavePresence(ctx, r)
		return nil, nil, nil, fmt.Errorf("subscribe cancels: %w", err)
	}
	var sources []source
	for jobType := range r.cfg.Handlers {
		cons, err := r.store.EnsureRunConsumer(ctx, r.cfg.Queue, jobType, r.cfg.Lease, r.cfg.MaxAckPending)
		if err != nil {
			_ = sub.Unsubscribe()
			leavePresence(ctx, r)
			return nil, nil, nil, err
		}
		sources = append(sources, source{cons, func() int { return r.seats.fetchSize(true) }, r.receive})
	}
	for batchType := range r.cfg.Batches {
		cons, err := r.store.EnsureConsumer(ctx, r.cfg.Queue, store.BatchConsumerConfig(r.cfg.Queue, batchType, r.cfg.Lease, r.cfg.MaxAckPending))
		if err != nil {
			_ = sub.Unsubscribe()
			leavePresence(ctx, r)
			return nil, nil, nil, err
		}
		sources = append(sources, source{cons, func() int { return r.seats.fetchSize(false) }, r.receiveBatch})
	}
	return qs, sub, sources, nil
}

// claims are the jobs this runtime holds now: what its worker's heartbeat
// lists.
func (r *Runtime) claims() []string {
	var ids []string
	r.held.Range(func(id, _ any) bool {
		ids = append(ids, id.(string))
		return true
	})
	return ids
}

// receive is the consume callback of job consumers.
func (r *Runtime) receive(msg jetstream.Msg) {
	p, ok := r.acquire(msg, true)
	if !ok {
		return
	}
	go r.run(msg, p, r.process)
}

// run calls process with msg in the place acquire took, and gives it back
// when process freed it (handOver) or returned.
func (r *Runtime) run(msg jetstream.Msg, p *place, process func(msg jetstream.Msg, p *place)) {
	defer func() {
		p.free()
		r.wg.Done()
	}()
	process(msg, p)
}

// handOver is called when a handler returned with a result of size bytes:
// once its outcome has a place among those being recorded, its slot is
// freed for the next item. The caller calls the returned func when the
// outcome is recorded.
func (r *Runtime) handOver(free func(), size int) (recorded func()) {
	r.completing <- struct{}{}
	big := size > bigResult
	if big {
		r.completingBig <- struct{}{}
	}
	free()
	return func() {
		if big {
			<-r.completingBig
		}
		<-r.completing
	}
}

// acquire waits for a place for msg (ahead.go: claimed ahead, with
// mayAhead, if one is allowed); it returns false (after letting another
// worker have the message) when the runtime is stopping.
func (r *Runtime) acquire(msg jetstream.Msg, mayAhead bool) (*place, bool) {
	for {
		p, freed := r.seats.take(mayAhead)
		if p == nil {
			select {
			case <-r.stopping:
				_ = pull.GiveBack(msg) // for another worker
				return nil, false
			case <-freed:
				continue
			}
		}
		r.mu.Lock()
		if r.stopped { // claiming stopped while we waited for a place
			r.mu.Unlock()
			p.free()
			_ = pull.GiveBack(msg)
			return nil, false
		}
		r.wg.Add(1) // under mu, so never after Stop's Wait began
		r.mu.Unlock()
		return p, true
	}
}

// isStopping reports whether Stop began.
func (r *Runtime) isStopping() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// process takes one work item from claim to its outcome. It frees its
// place once the handler returned and its outcome has a place among those
// being recorded: the handler's slot is then another item's.
func (r *Runtime) process(msg jetstream.Msg, p *place) {
	ctx := context.Background()
	d := store.DecodeDelivery(msg, r.log)
	if d == nil {
		return
	}
	h := r.cfg.Handlers[d.Item.Job.Spec.Type]
	if h == nil { // a consumer is per type, so this is a misrouted item
		r.log.Error("work item for a type this worker does not run", "type", d.Item.Job.Spec.Type)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if r.isStopping() {
		_ = pull.GiveBack(msg) // arrived as the runtime began to stop: for another worker
		return
	}
	// Listed in this worker's heartbeats while it claims: a claim whose
	// answer is slow (a cluster losing a node) is not taken for a lost lease.
	r.held.Store(d.Item.Job.ID, struct{}{})
	var span trace.Span // the attempt's, with tracing on; one whose claim fails is never ended (nothing recorded)
	if tr := tracing.Tracer(); tr != nil {
		ctx, span = tracing.StartAttempt(ctx, tr, &d.Item.Job)
	}
	claimStart := time.Now()
	snap, ok := r.store.Claim(ctx, r.qs, d, r.cfg.WorkerID, false, r.cfg.Lease, r.log)
	r.claimTime.add(min(time.Since(claimStart), maxClaimSample))
	if !ok {
		r.mu.Lock()
		if r.inflight[d.Item.Job.ID] == nil { // not a duplicate of a job this runtime runs
			r.held.Delete(d.Item.Job.ID)
		}
		r.mu.Unlock()
		return
	}
	meta := d.Meta
	store.Crash("claim:done")
	if claimedHook != nil {
		claimedHook(d.Item.Job.ID)
	}
	spec := &snap.Job.Spec
	if span != nil {
		tracing.Claimed(span, snap.Job.Attempt, r.cfg.WorkerID)
	} else {
		ctx = tracing.WithRemote(ctx, spec.TraceParent, spec.TraceState) // a fan-out's pieces continue the job's trace
	}

	hctx, cancel := context.WithCancelCause(tracing.HandlerContext(context.Background(), span, spec.TraceParent, spec.TraceState))
	hctx, cancelTimeout := context.WithTimeoutCause(hctx, snap.Job.Spec.Timeout, ErrTimeout)
	rn := &run{rt: r, msg: msg, id: snap.Job.ID, lease: meta.Sequence.Stream, number: snap.Job.Attempt,
		cancel: cancel, since: time.Now(), done: make(chan struct{}), snap: snap, span: span}
	r.mu.Lock()
	if old := r.inflight[snap.Job.ID]; old != nil {
		// This runtime ran the job before under an item whose lease lapsed
		// (cut off from NATS, it missed the notice): that run lost the job.
		old.cancel(errLeaseLost)
	}
	if snap.Behind {
		rn.recordTimer = time.AfterFunc(store.ClaimRecordAfter, rn.writeClaimRecord)
	}
	r.inflight[snap.Job.ID] = rn
	r.held.Store(snap.Job.ID, struct{}{})
	late := r.graceEnd
	r.mu.Unlock()

	var result []byte
	var herr error
	seated := false // seat took it out of those claiming, started or not
	switch {
	case late:
		// The claim landed after Stop's grace, when Stop had already
		// cancelled the runs it knew of: given back at once, not started.
		// A claim landing before that runs like any other (the record
		// says running): Stop cancels it when the grace ends.
		cancel(ErrShutdown)
		herr = ErrShutdown
	case r.parentGone(ctx, rn):
		herr = store.ErrParentGone
	case errors.Is(context.Cause(hctx), ErrShutdown):
		// Stop's grace ended while the parent was asked about.
		herr = ErrShutdown
	default:
		seated = true
		if err := p.seat(hctx, snap.Job.Spec.Timeout); err != nil {
			// Claimed ahead, and no slot came first: it ends as a handler
			// that returned at once on its context's end.
			cancel(err) // (keeps the cause of a context ended already)
			herr = hctx.Err()
			break
		}
		began := time.Now()
		result, herr = callHandler(func() ([]byte, error) { return h(hctx, &Task{Job: snap.Job, run: rn}) })
		end := time.Now()
		r.handlerEnded(end, end.Sub(began))
	}
	if !seated {
		p.leave() // it will not start: no slot waits for its claim
	}
	cause := context.Cause(hctx)
	cancelTimeout()
	cancel(nil)
	rn.stopProgress()

	r.mu.Lock()
	settled := rn.settled
	rn.finishing = !settled
	r.mu.Unlock()
	defer close(rn.done)
	// The job stays held (heartbeats list it, renewals extend its item)
	// until its outcome is recorded: making a coordinator's pieces can take
	// longer than a lease.
	if !settled { // else Stop requeued it after the grace period; our result is void
		func() {
			defer r.handOver(p.free, len(result))()
			r.complete(ctx, rn, result, herr, cause)
		}()
	}
	r.mu.Lock()
	if r.inflight[rn.id] == rn { // else a newer run of the job holds it
		delete(r.inflight, rn.id)
		r.held.Delete(rn.id)
	}
	r.mu.Unlock()
}

// complete records how an attempt ended (classifyOutcome, then
// Store.RecordOutcome)
// and settles its work item.
func (r *Runtime) complete(ctx context.Context, rn *run, result []byte, herr, cause error) {
	rn.flushProgress(ctx) // the last progress is recorded before the outcome
	rn.wmu.Lock()
	defer rn.wmu.Unlock()
	rn.ended = true // the outcome's record folds in the claim's, if it was left behind
	if rn.recordTimer != nil {
		rn.recordTimer.Stop()
	}
	o, fo := classifyOutcome(result, herr, cause, rn.snap.Job.Spec.Timeout)
	if fo != nil || len(result) > commands.MaxInlineResult {
		// Making pieces, or storing a large result, can take a while
		// before the outcome is written: the claim's record first.
		rn.writeClaimRecordLocked()
	}
	children := 0 // children this attempt made, or may have made
	if fo != nil {
		children = len(fo.Children)
		plan, err := r.fanOut(ctx, rn, fo)
		if err != nil {
			o, _ = classifyOutcome(nil, err, nil, 0) // making the pieces failed: an ordinary failed attempt
		} else {
			store.Crash("fanout:made") // the pieces made, the parent not waiting for them yet
			o.Plan = &plan
		}
	}
	op := "complete"
	if o.Kind == commands.GivenBack {
		op = "requeue"
	}
	var failing time.Time // when writing the outcome first failed
	for try := 0; ; try++ {
		next, ev, err := r.store.RecordOutcome(ctx, op, rn.snap, rn.guard(), o)
		if errors.Is(err, commands.ErrNotClaimant) || errors.Is(err, commands.ErrInvalidTransition) {
			// Cancelled, or the lease went to another worker: what this
			// attempt produced is discarded.
			r.log.Info("attempt result discarded", "job", rn.id, "reason", err)
			rn.endSpan(nil, err)
			r.store.CancelMadeChildren(ctx, next.Job, children)
			r.release(rn, next.Job)
			return
		}
		if err != nil {
			if failing.IsZero() {
				failing = time.Now()
			}
			if !streams.IsUnavailable(err) {
				// The outcome's retries may last a while: the claim's record
				// meanwhile. (Not when the server did not answer: that write
				// would wait for nothing, holding up the retries.)
				rn.writeClaimRecordLocked()
			}
			if wait, ok := r.retryOutcome(try, failing, err); ok {
				var stopping <-chan struct{} // the first tries go on while the runtime stops, as before
				if try >= outcomeTries {
					stopping = r.stopping
				}
				t := time.NewTimer(wait)
				select {
				case <-t.C:
					continue
				case <-ctx.Done():
				case <-stopping:
				}
				t.Stop()
			}
			// Leave the item to be redelivered: the lease expires and the job
			// is requeued.
			r.log.Error("could not record the outcome of an attempt", "job", rn.id, "err", err)
			rn.endSpan(nil, err)
			return
		}
		rn.endSpan(ev, nil)
		r.store.CancelMadeChildren(ctx, next.Job, children)
		if r.cfg.OnOutcome != nil {
			r.cfg.OnOutcome(next.Job, ev)
		}
		return
	}
}

// writeClaimRecord writes the record of the attempt's claim, left behind
// (store.DeferRecord), unless the outcome or another write of the attempt
// wrote the job's record first. A write that fails leaves it to the next
// write of the job, or to the Projector.
func (rn *run) writeClaimRecord() {
	rn.wmu.Lock()
	defer rn.wmu.Unlock()
	if rn.ended {
		return
	}
	rn.writeClaimRecordLocked()
}

// writeClaimRecordLocked writes the claim's record, if it was left behind,
// with wmu held.
func (rn *run) writeClaimRecordLocked() {
	if !rn.snap.Behind {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	next, err := rn.rt.store.WriteRecord(ctx, rn.snap)
	if err != nil {
		if !rn.rt.isStopping() {
			rn.rt.log.Warn("write the record of a claim; left to the job's next write", "job", rn.id, "err", err)
		}
		return
	}
	if next.Job.Seq != rn.snap.Job.Seq || rn.guard().Holds(next.Job) != nil {
		return // read again after a race, and the job moved on: the outcome's write finds out
	}
	// The job is the same (its last event is): only where its record is
	// changes (rn.snap.Job is read outside wmu).
	rn.snap.Rev, rn.snap.Behind = next.Rev, false
	store.Crash("claim:recorded")
}

// retryOutcome says whether, and after how long, an outcome whose write
// failed try+1 times, the first at since, is written again: outcomeTries
// times in about 3 s whatever the error; then, while the server or the
// stream does not answer (streams.IsUnavailable: a node lost, a stream
// leader being elected, which on a cluster outlasts 3 s), once a second
// for as long as a lease, unless the runtime is quieted or stopping (a
// worker told to stop does not wait a lease for a cluster; the job then
// waits out its lease, as it did before). The job stays held meanwhile
// (its heartbeats renew its lease); an outcome that comes after its lease
// went to another worker is refused (ErrNotClaimant) and discarded. One
// write can itself wait for the publisher's timeout (30 s), so the last
// one may end past the lease.
func (r *Runtime) retryOutcome(try int, since time.Time, err error) (time.Duration, bool) {
	if try < outcomeTries {
		return time.Duration(100<<try) * time.Millisecond, true
	}
	select {
	case <-r.stopping:
		return 0, false
	default:
	}
	if !streams.IsUnavailable(err) || time.Since(since) >= r.cfg.Lease {
		return 0, false
	}
	return time.Second, true
}

// outcomeTries is how many times an outcome's write is tried again
// whatever its error.
const outcomeTries = 5

// onCancel cancels the handler of a job that was just cancelled.
func (r *Runtime) onCancel(m *nats.Msg) {
	id := string(m.Data)
	r.parents.forget(id) // its next batches find it cancelled
	r.mu.Lock()
	rn := r.inflight[id]
	var batches []*batchRun
	for _, br := range r.batches {
		if br.parent == id {
			batches = append(batches, br)
		}
	}
	r.mu.Unlock()
	if rn != nil {
		go r.checkRun(rn)
	}
	if len(batches) > 0 {
		go r.cancelBatchesIfEnded(id, batches)
	}
}

// checkRun cancels a handler whose job is no longer held by its attempt.
func (r *Runtime) checkRun(rn *run) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// As the log says (a record behind it would look like a lost lease).
	snap, err := r.store.Current(ctx, rn.id)
	if err != nil {
		return
	}
	j := snap.Job
	if rn.guard().Holds(j) == nil {
		return
	}
	if commands.WasCancelled(j.State) {
		rn.cancel(ErrJobCancelled)
	} else {
		rn.cancel(errLeaseLost)
	}
}

// cancelBatchesIfEnded cancels running batches of parent if it ended: one
// look at the parent for all of them.
func (r *Runtime) cancelBatchesIfEnded(parent string, batches []*batchRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if r.parents.terminal(ctx, parent) {
		for _, br := range batches {
			br.cancel(ErrJobCancelled)
		}
	}
}

// renewLeases keeps the work items of running attempts from being
// redelivered, and notices attempts whose job was cancelled or taken over
// when a cancel notification was missed.
func (r *Runtime) renewLeases(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	every := r.cfg.Lease / 3
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		r.mu.Lock()
		runs := make([]*run, 0, len(r.inflight))
		for _, rn := range r.inflight {
			runs = append(runs, rn)
		}
		byParent := map[string][]*batchRun{}
		for _, br := range r.batches {
			if time.Since(br.since) >= every/2 {
				byParent[br.parent] = append(byParent[br.parent], br)
			}
		}
		r.mu.Unlock()
		for _, rn := range runs {
			if time.Since(rn.since) < every/2 {
				continue
			}
			_ = rn.msg.InProgress()
			go r.checkRun(rn)
		}
		for parent, batches := range byParent {
			for _, br := range batches {
				_ = br.msg.InProgress()
			}
			go r.cancelBatchesIfEnded(parent, batches)
		}
	}
}

// Quiet makes the runtime claim nothing more: what its current fetches
// still bring is handed back, for other workers. Running handlers go on,
// their leases renewed, until Stop. Stop quiets the runtime first.
func (r *Runtime) Quiet() {
	r.mu.Lock()
	if !r.started || r.stopped {
		r.stopped = true
		r.mu.Unlock()
		return
	}
	r.stopped = true
	close(r.stopping)
	pullers := r.pullers
	r.mu.Unlock()
	for _, p := range pullers {
		p.Signal() // what the current fetch still brings, receive naks
	}
}

// Stop stops claiming, lets running handlers finish for the grace period,
// then cancels the rest and requeues their jobs (job.requeued) so that
// another worker takes them over at once. A claim that lands before the
// grace ends runs like the others; one that lands after it is given back
// without running. It is idempotent. Stop called while Start makes its
// consumers returns at once; that Start releases what it made as it ends.
func (r *Runtime) Stop(ctx context.Context) {
	r.mu.Lock()
	if !r.started || r.stopBegun {
		r.stopped, r.stopBegun = true, true
		r.mu.Unlock()
		return
	}
	r.stopBegun = true
	r.mu.Unlock()
	r.Quiet()

	grace := time.NewTimer(r.cfg.ShutdownGrace)
	defer grace.Stop()
	drained := make(chan struct{})
	go func() { r.wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-grace.C:
	case <-ctx.Done():
	}
	r.mu.Lock()
	r.graceEnd = true // a claim registered from here on is given back
	runs := make([]*run, 0, len(r.inflight))
	for _, rn := range r.inflight {
		runs = append(runs, rn)
	}
	for _, br := range r.batches {
		br.cancel(ErrShutdown) // a batch that stops is handed to another worker
	}
	r.mu.Unlock()
	for _, rn := range runs {
		rn.cancel(ErrShutdown) // a handler that honours its context requeues itself
	}
	wctx, cancelWait := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelWait()
	for _, rn := range runs {
		select {
		case <-rn.done:
			continue
		case <-wctx.Done():
		}
		r.mu.Lock()
		finishing := rn.finishing
		rn.settled = !finishing
		r.mu.Unlock()
		if finishing {
			// Its outcome is being recorded: let it be.
			select {
			case <-rn.done:
			case <-ctx.Done():
			}
			continue
		}
		// The handler ignores its context: requeue the job over its head.
		// Whatever it reports later is refused (it no longer holds the job).
		r.requeue(context.Background(), rn)
	}
	select {
	case <-drained:
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
	r.mu.Lock()
	wait := r.stopLocked()
	r.mu.Unlock()
	wait()
	leavePresence(ctx, r)
}

func (r *Runtime) requeue(ctx context.Context, rn *run) {
	snap, err := r.store.Current(ctx, rn.id)
	if err != nil {
		r.log.Error("requeue on shutdown", "job", rn.id, "err", err)
		return
	}
	next, ev, err := r.store.RecordOutcome(ctx, "requeue", snap, rn.guard(),
		commands.Outcome{Kind: commands.GivenBack, Reason: "worker shut down; handler did not stop"})
	rn.endSpan(ev, err)
	if err != nil {
		if !errors.Is(err, commands.ErrNotClaimant) {
			r.log.Error("requeue on shutdown", "job", rn.id, "err", err)
		}
		r.release(rn, next.Job)
	}
}

// release settles the work item of an attempt that no longer holds its job.
// If a newer attempt holds the job under this same item (the server
// redelivered it when our lease lapsed, perhaps to this very process), the
// item is that attempt's now: an ack from us would delete it under it, so it
// is left alone.
func (r *Runtime) release(rn *run, j *domain.Job) {
	if j != nil && j.LeaseItem == rn.lease && commands.Held(j) {
		return
	}
	_ = rn.msg.Ack()
}

// stopLocked ends pulling, cancel notifications and lease renewal. The
// caller holds r.mu, so it only tells them to stop; it calls the returned
// wait once it released r.mu (the pullers' callbacks and the renewal loop
// take r.mu).
func (r *Runtime) stopLocked() (wait func()) {
	pullers, tickStop, tickDone := r.pullers, r.tickStop, r.tickDone
	r.pullers, r.tickStop = nil, nil
	for _, p := range pullers {
		p.Signal()
	}
	if r.cancelSb != nil {
		_ = r.cancelSb.Unsubscribe()
		r.cancelSb = nil
	}
	if tickStop != nil {
		close(tickStop)
	}
	return func() {
		for _, p := range pullers {
			p.Stop()
		}
		if tickStop != nil {
			<-tickDone
		}
	}
}

// Running is the number of attempts this runtime holds: claimed ahead of
// the handlers, handlers running, and outcomes being recorded.
func (r *Runtime) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.inflight)
}
