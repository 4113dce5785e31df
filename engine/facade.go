package engine

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/auth"
	"github.com/jetflow/jetflow/engine/internal/cmdservice"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/natsserver"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/engine/internal/registry"
	"github.com/jetflow/jetflow/engine/internal/remote"
	"github.com/jetflow/jetflow/engine/internal/replay"
	"github.com/jetflow/jetflow/engine/internal/runtime"
	"github.com/jetflow/jetflow/engine/internal/schedules"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// The facade: machinery for jetflow's own packages (the root package, the
// gateway, cmd/jetflow, the tests), not for users, who use the root
// package. Each name here is a room's under engine/internal, as an alias
// or a thin wrapper; the rooms export only what other rooms use.

// Store is the write path and the reads of jetflow's records (the
// internal store), with the type registry and the tokens built on it.
// Of the internal store it shows only storeAPI: the rest is the engine's.
type Store struct {
	storeAPI
	st      *store.Store
	NC      *nats.Conn
	JS      jetstream.JetStream
	KV      jetstream.KeyValue // the jobs bucket
	Events  jetstream.Stream
	Queues  *streams.Queues
	Topo    streams.Topology
	Workers *Workers
	// Types is the type registry and the namespaces' settings.
	Types *registry.Registry
	// Tokens are the access tokens.
	Tokens *auth.Tokens
	Actor  string // who writes: recorded on the events of this process
	// Repairs counts job records this Store rebuilt from the log because
	// they were missing or behind it.
	Repairs *atomic.Int64

	// Schedules are the schedules (cron and intervals).
	Schedules *schedules.Schedules
}

// storeAPI is what the rest of jetflow (the root package, the gateway,
// cmd/jetflow, the tests) uses of the internal store; a method of
// store.Store not listed here is the engine's own.
type storeAPI interface {
	ActorOf(ctx context.Context) string
	AdmissionCountsOf(ctx context.Context, queue string) (map[string]commands.Counts, error)
	Apply(ctx context.Context, op string, cur store.Snapshot, decide store.Decider, opts ...store.Option) (store.Snapshot, *domain.Event, error)
	Cancel(ctx context.Context, id string, reason string) (store.Snapshot, error)
	ChangeQueueLimits(ctx context.Context, queue string, change func(domain.QueueLimits) domain.QueueLimits) (*domain.QueueRecord, error)
	Children(ctx context.Context, id string, after int, fn func(piece int, child *domain.Job) bool) error
	Current(ctx context.Context, id string) (store.Snapshot, error)
	Files(ctx context.Context) (*files.Store, error)
	GroupCommit() *streams.GroupCommit
	History(ctx context.Context, id string, after uint64, live bool, fn func(*domain.Event) error) error
	List(ctx context.Context, f store.Filter) ([]*domain.Job, error)
	Purge(ctx context.Context, id string, reason string) (int, error)
	PurgePage(ctx context.Context, olderThan time.Duration, ns string, afterEnd time.Time, afterID string, limit int, dryRun bool) (store.PurgePage, error)
	Queue(ctx context.Context, queue string) (*domain.QueueRecord, error)
	QueueInfo(ctx context.Context, queue string) (*store.QueueInfo, error)
	QueueInfos(ctx context.Context) ([]*store.QueueInfo, error)
	QueueList(ctx context.Context) ([]*domain.QueueRecord, error)
	Read(ctx context.Context, id string) (store.Snapshot, error)
	ReadSeen(ctx context.Context, p *commands.Principal, id string) (store.Snapshot, error)
	NotSeen(ctx context.Context, id string) error
	Record(ctx context.Context, id string) (store.Snapshot, error)
	Reprioritize(ctx context.Context, id string, priority int) (store.Snapshot, error)
	Retry(ctx context.Context, id string, idempotencyKey string, failedPieces bool) (store.Submitted, error)
	RetryWorkflow(ctx context.Context, id string) (store.WorkflowSubmitted, error)
	Scan(ctx context.Context, fn func(j *domain.Job)) error
	SetQueueLimits(ctx context.Context, queue string, lim domain.QueueLimits) (*domain.QueueRecord, error)
	SetQueuePaused(ctx context.Context, queue string, paused bool) (*domain.QueueRecord, error)
	StatsSeries(ctx context.Context, rng string, d projections.StatsDim, now time.Time) (*projections.StatsSeries, error)
	StepInputs(ctx context.Context, j *domain.Job, budget int) (map[string][]byte, error)
	Submit(ctx context.Context, req *commands.SubmitRequest) (store.Submitted, error)
	SubmitBatch(ctx context.Context, reqs []*commands.SubmitRequest) []store.Submitted
	SubmitWorkflow(ctx context.Context, req *commands.WorkflowRequest) (store.WorkflowSubmitted, error)
	Tail(ctx context.Context, filter string, after uint64, since time.Time, limit int, wait time.Duration) ([]store.TailEvent, uint64, error)
	View(ctx context.Context, j *domain.Job) *projections.JobView
	ViewWorkflow(ctx context.Context, id string) (*projections.WorkflowView, error)
	WaitTerminal(ctx context.Context, id string, d time.Duration, shown *domain.Job) (*domain.Job, error)
}

// OpenStore connects a Store to JetStream, provisioning the topology.
func OpenStore(ctx context.Context, nc *nats.Conn, topo streams.Topology, actor string) (*Store, error) {
	st, err := store.Open(ctx, nc, topo, actor)
	if err != nil {
		return nil, err
	}
	reg, err := registry.Open(ctx, st)
	if err != nil {
		return nil, err
	}
	toks, err := auth.Open(ctx, st)
	if err != nil {
		return nil, err
	}
	sch, err := schedules.Open(ctx, st, reg)
	if err != nil {
		return nil, err
	}
	return &Store{storeAPI: st, st: st, NC: st.NC(), JS: st.JS(), KV: st.KV(), Events: st.Events(), Queues: st.Queues(),
		Topo: st.Topology(), Workers: st.Workers(), Types: reg, Tokens: toks, Schedules: sch, Actor: st.Actor(), Repairs: st.Repairs()}, nil
}

// SetLogger makes l the logger of what the store does in the background.
func (s *Store) SetLogger(l *slog.Logger) { s.st.Log = l }

// Snapshot is a job record and the KV revision it was read or written at.
type Snapshot = store.Snapshot

// Submitted is the outcome of one submit.
type Submitted = store.Submitted

// Filter selects jobs; empty fields match everything.
type Filter = store.Filter

// QueueInfo is a queue as clients see it.
type QueueInfo = store.QueueInfo

// Workers is the worker registry.
type Workers = store.Workers

// Worker is a worker's record as read.
type Worker = store.Worker

// WorkerView is a registered worker as clients see it.
type WorkerView = store.WorkerView

// ViewWorker renders a worker's record for clients, judged live by lease.
func ViewWorker(rec *domain.WorkerRecord, lease time.Duration) *WorkerView {
	return store.ViewWorker(rec, lease)
}

// ErrWorkerNotFound: no worker of that id is registered.
var ErrWorkerNotFound = store.ErrWorkerNotFound

// ChildID is the id of piece n (1-based) of parent's fan-out of children.
func ChildID(ns, parent string, piece int) string { return store.ChildID(ns, parent, piece) }

// ConsumerName is the durable consumer that all workers of one job type on a
// queue share.
func ConsumerName(jobType string) string { return store.ConsumerName(jobType) }

// BatchConsumerName is the durable consumer that all workers of one batch
// type on a queue share.
func BatchConsumerName(batchType string) string { return store.BatchConsumerName(batchType) }

// Principal is who a request acts for: a token's holder.
type Principal = commands.Principal

// WithPrincipal returns a context of a request made with p's token.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return store.WithPrincipal(ctx, p)
}

// PrincipalOf is the principal of a request's context (nil: none).
func PrincipalOf(ctx context.Context) *Principal { return store.PrincipalOf(ctx) }

// CheckRefs refuses a submit of a namespaced principal whose parent or
// retry_of names a job it may not see.
func (s *Store) CheckRefs(ctx context.Context, p *Principal, req *commands.SubmitRequest) error {
	return auth.CheckRefs(ctx, s.st, p, req)
}

// Expired lists the ids of terminal jobs older than the retention of their
// namespace (ns: only that one, if not empty), oldest first, at most max.
func Expired(ctx context.Context, s *Store, retention func(ns string) time.Duration, ns string, max int) ([]string, error) {
	return s.st.Expired(ctx, retention, ns, max)
}

// Violation is one way a payload breaks its type's schema.
type Violation = commands.Violation

// CanonicalSchema checks that b is a JSON Schema and returns it compacted,
// with object keys in order.
func CanonicalSchema(b []byte) ([]byte, error) { return registry.CanonicalSchema(b) }

// The worker runtime (runtime): handlers, their tasks and the control flow
// they return.
type (
	Runtime         = runtime.Runtime
	RuntimeConfig   = runtime.Config
	Handler         = runtime.Handler
	Task            = runtime.Task
	BatchHandler    = runtime.BatchHandler
	BatchTask       = runtime.BatchTask
	FanOut          = runtime.FanOut
	PermanentError  = runtime.PermanentError
	RetryLaterError = runtime.RetryLaterError
)

// Defaults of RuntimeConfig.
const (
	DefaultConcurrency      = runtime.DefaultConcurrency
	DefaultLease            = runtime.DefaultLease
	DefaultShutdownGrace    = runtime.DefaultShutdownGrace
	DefaultProgressInterval = runtime.DefaultProgressInterval
)

// Causes of a handler's context being cancelled by the runtime.
var (
	ErrJobCancelled = runtime.ErrJobCancelled
	ErrShutdown     = runtime.ErrShutdown
	ErrTimeout      = runtime.ErrTimeout
)

// NewRuntime returns a runtime for one queue.
func NewRuntime(s *Store, cfg RuntimeConfig) (*Runtime, error) { return runtime.New(s.st, cfg) }

// ProgressCoalescer holds back progress reports so that at most one
// job.progress per job per interval is written, the last value reported:
// the runtime's for handlers in process, and the gateway's for remote
// workers.
type ProgressCoalescer = runtime.Coalescer

// NewProgressCoalescer returns a coalescer whose held values flush writes
// at the end of their job's interval.
func NewProgressCoalescer(interval time.Duration, flush func(id, worker string, p domain.Progress)) *ProgressCoalescer {
	return runtime.NewCoalescer(interval, flush)
}

// Remote serves workers that run outside any jetflow process: the HTTP
// worker protocol.
type Remote = remote.Remote

// Limits of what one remote worker serves.
const (
	MaxRemoteTypes  = remote.MaxRemoteTypes
	MaxRemoteQueues = remote.MaxRemoteQueues
)

// What a remote worker serves, what its claim got, what its heartbeat's
// renewal found, its batches and their reports.
type (
	Scope       = remote.Scope
	Renewal     = remote.Renewal
	RemoteBatch = remote.RemoteBatch
	BatchReport = remote.BatchReport
)

// MaxBatchIDLen bounds a batch id.
const MaxBatchIDLen = remote.MaxBatchIDLen

// IsBatchID reports whether id names a batch rather than a job.
func IsBatchID(id string) bool { return remote.IsBatchID(id) }

// BatchParent is the parent of the batch id names ("" if it names none).
func BatchParent(id string) string { return remote.BatchParent(id) }

// ClaimsSeen are the claims of a worker that p may see (remote.ClaimsSeen).
func ClaimsSeen(p *Principal, claims []string, nsOf func(job string) (string, bool)) []string {
	return remote.ClaimsSeen(p, claims, nsOf)
}

// CheckRemoteScope refuses a worker scope over the limits.
func CheckRemoteScope(queues, types []string) error { return remote.CheckRemoteScope(queues, types) }

// NewRemote returns a Remote whose claims hold a lease of lease (0:
// DefaultLease).
func NewRemote(s *Store, lease time.Duration, log *slog.Logger) *Remote {
	return remote.New(s.st, lease, log)
}

// PurgerConfig configures retention: how long terminal jobs are kept.
type PurgerConfig = maintenance.PurgerConfig

// Defaults of the background components.
const (
	DefaultProjectorLag      = maintenance.DefaultProjectorLag
	DefaultPurgeMax          = maintenance.DefaultPurgeMax
	DefaultTypeSweepInterval = maintenance.DefaultTypeSweepInterval
)

// LeaderBucket is the KV bucket of every election (maintenance.LeaderBucket).
const LeaderBucket = maintenance.LeaderBucket

// NewPurger returns a purger of the terminal jobs older than their
// retention (one pass: Pass).
func NewPurger(s *Store, cfg PurgerConfig) *maintenance.Purger {
	if cfg.Namespaces == nil {
		cfg.Namespaces = s.Types
	}
	return maintenance.NewPurger(s.st, cfg)
}

// NewFileSweeper returns a sweeper of the files of jobs that do not exist,
// with the grace (0: the default), looking every interval (0: the
// default).
func NewFileSweeper(s *Store, grace, interval time.Duration, log *slog.Logger) *maintenance.FileSweeper {
	return maintenance.NewFileSweeper(s.st, maintenance.FileSweeperConfig{Grace: grace, Interval: interval, Log: log})
}

// AuthHeader is the header of a command that carries its token.
const AuthHeader = cmdservice.AuthHeader

// FieldOf finds the field of v (a pointer to a struct) whose value in body
// does not decode, and that value's error.
func FieldOf(body []byte, asJSON bool, v any) (string, error) {
	return cmdservice.FieldOf(body, asJSON, v)
}

// EncodeCursor is the cursor of the page of a list after the job created
// at with id: the command protocol's and the HTTP API's.
func EncodeCursor(at time.Time, id string) string { return cmdservice.EncodeCursor(at, id) }

// DecodeCursor reads a cursor of EncodeCursor; anything else is a
// bad-cursor problem.
func DecodeCursor(s string) (time.Time, string, error) { return cmdservice.DecodeCursor(s) }

// Problem is an RFC 9457 problem detail: the error of a command and the
// body of every error the HTTP API answers.
type Problem = problems.Problem

// Problem type slugs.
const (
	ProblemInvalidInput         = problems.InvalidInput
	ProblemNotFound             = problems.NotFound
	ProblemInvalidTransition    = problems.InvalidTransition
	ProblemNotClaimant          = problems.NotClaimant
	ProblemMalformedRequest     = problems.MalformedRequest
	ProblemPayloadTooLarge      = problems.PayloadTooLarge
	ProblemBadCursor            = problems.BadCursor
	ProblemMethodNotAllowed     = problems.MethodNotAllowed
	ProblemUnavailable          = problems.Unavailable
	ProblemRegistrationTooLarge = problems.RegistrationTooLarge
	ProblemConcurrencyLimit     = problems.ConcurrencyLimit
	ProblemOverloaded           = problems.Overloaded
	ProblemCrossOrigin          = problems.CrossOrigin
	ProblemNoArchive            = problems.NoArchive
	ProblemGone                 = problems.Gone
)

// NewProblem returns a problem of a slug, with its title.
func NewProblem(slug string, status int, detail string) *Problem {
	return problems.New(slug, status, detail)
}

// ProblemOf turns any error into a problem.
func ProblemOf(err error) *Problem { return problems.Of(err) }

// NATS roles: what a NATS user of a jetflow system may do
// (docs/security.md).
const (
	NATSRoleEngine = auth.NATSRoleEngine
	NATSRoleWorker = auth.NATSRoleWorker
	NATSRoleClient = auth.NATSRoleClient
)

// NATSUsersFile is the file in an embedded server's data directory that
// holds its users when it requires credentials.
const NATSUsersFile = auth.NATSUsersFile

// NATSUser is a user of the embedded server and the role it has.
type NATSUser = auth.NATSUser

// NATSUsers are the users of an embedded server that requires credentials.
type NATSUsers = auth.NATSUsers

// NATSInboxPrefix is the inbox prefix a user of role must connect with.
func NATSInboxPrefix(role string) string { return auth.NATSInboxPrefix(role) }

// NATSWorkerInboxPrefix is the inbox prefix of a worker bound to a
// namespace.
func NATSWorkerInboxPrefix(ns string) string { return auth.NATSWorkerInboxPrefix(ns) }

// NATSPermissions are the subject permissions of a role; nil for an
// unknown role.
func NATSPermissions(role string) *server.Permissions { return auth.NATSPermissions(role) }

// LoadOrCreateNATSUsers reads the users of path, or creates one user per
// role with a random password and writes them there.
func LoadOrCreateNATSUsers(path string) (NATSUsers, bool, error) {
	return auth.LoadOrCreateNATSUsers(path)
}

// AddNATSWorkers adds a worker user bound to each namespace that has none.
func AddNATSWorkers(path string, users NATSUsers, namespaces []string) (NATSUsers, []string, error) {
	return auth.AddNATSWorkers(path, users, namespaces)
}

// ServerConfig configures an embedded NATS server with JetStream.
type ServerConfig = natsserver.Config

// DefaultSyncInterval bounds what a power loss can take from the embedded
// server.
const DefaultSyncInterval = natsserver.DefaultSyncInterval

// StartServer starts an embedded NATS server with JetStream and waits until
// it accepts connections.
func StartServer(cfg ServerConfig) (*server.Server, error) { return natsserver.Start(cfg) }

// ConnectInProcess connects to an embedded server without a socket.
func ConnectInProcess(s *server.Server, name string, opts ...nats.Option) (*nats.Conn, error) {
	return natsserver.ConnectInProcess(s, name, opts...)
}

// rebuild folds the event log, up to and including sequence upTo (0: the
// last one now), into job records: the state of every job as the log says
// it is.
func rebuild(ctx context.Context, js jetstream.JetStream, upTo uint64) (map[string]*domain.Job, uint64, error) {
	return replay.Rebuild(ctx, js, upTo)
}

// Verify rebuilds every job (and the registry) from the log and compares
// it with its record (jetflow replay --verify).
func Verify(ctx context.Context, js jetstream.JetStream, settle time.Duration) (*projections.Report, error) {
	return replay.Verify(ctx, js, settle)
}

// CountPieces counts what became of a fan-out parent's pieces from its
// piece events in the log up to sequence upTo (0: all).
func CountPieces(ctx context.Context, nc *nats.Conn, parent string, upTo uint64) (domain.FanoutCounts, error) {
	return store.CountPieces(ctx, nc, parent, upTo)
}
