package jetflow

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
)

// ServerConfig configures an embedded NATS server with JetStream.
type ServerConfig struct {
	Dir    string // JetStream store directory
	Listen string // host:port for other processes; "" = in-process connections only
	// SyncAlways fsyncs before every acknowledgement. Otherwise the server
	// fsyncs every SyncInterval (default DefaultSyncInterval), which loses
	// nothing on a process crash and at most the last interval on a power
	// loss. With SyncAlways, the streams that persist asynchronously in
	// that mode (the jobs bucket, the queue streams) are fsynced every
	// SyncInterval, which may then be at most DefaultSyncInterval.
	SyncAlways   bool
	SyncInterval time.Duration
	Name         string
	Debug        bool
	// Users, if any, are the only ones who may connect, each limited to
	// its role's subjects (NATSPermissions); none: anyone may.
	Users NATSUsers
}

// Defaults of the engine and its workers.
const (
	DefaultLease         = engine.DefaultLease         // how long a silent worker keeps its jobs
	DefaultShutdownGrace = engine.DefaultShutdownGrace // how long Stop lets handlers finish
	DefaultConcurrency   = engine.DefaultConcurrency   // handlers at once per queue
	DefaultProjectorLag  = engine.DefaultProjectorLag  // how long the projector lets writers project their own events
	DefaultSyncInterval  = engine.DefaultSyncInterval  // the embedded server's fsync interval

	DefaultMaxRetries = commands.DefaultMaxRetries // retries of a failed attempt
	DefaultBackoff    = commands.DefaultBackoff    // delay before the first retry
	DefaultTimeout    = commands.DefaultTimeout    // execution timeout of an attempt
	MaxFanout         = commands.MaxFanout         // pieces of one fan-out
	MaxReasonBytes    = commands.MaxReasonBytes    // the reason of a cancel or a requeue
)

// StartServer starts an embedded NATS server with JetStream (data in
// cfg.Dir; listening on cfg.Listen, or in-process only) and waits until it
// accepts connections. Shut it down with Shutdown and WaitForShutdown.
func StartServer(cfg ServerConfig) (*server.Server, error) {
	return engine.StartServer(engine.ServerConfig{Dir: cfg.Dir, Listen: cfg.Listen, SyncAlways: cfg.SyncAlways,
		SyncInterval: cfg.SyncInterval, Name: cfg.Name, Debug: cfg.Debug, Users: cfg.Users.engine()})
}

// ConnectInProcess connects to an embedded server without a socket, with
// opts (credentials: nats.UserInfo) after its own.
func ConnectInProcess(s *server.Server, name string, opts ...nats.Option) (*nats.Conn, error) {
	return engine.ConnectInProcess(s, name, opts...)
}

// Component is the life every background component shares: the engine,
// an HTTP gateway, a worker.
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context)
}

// EngineConfig configures an Engine. The zero value means defaults.
type EngineConfig struct {
	// ProjectorLag is how long the projector lets writers project their
	// own events before it verifies them (default DefaultProjectorLag).
	ProjectorLag time.Duration
	// TypeGrace is how long a registered type may go without workers and
	// without jobs before it is soft-deleted (default 10 minutes).
	TypeGrace time.Duration
	// Retention is how long terminal jobs are kept before they are purged,
	// in namespaces that set none (default 7 days).
	Retention time.Duration
	// Auth makes the NATS command service check tokens, as the HTTP API
	// does with gateway.Config.Auth (docs/security.md).
	Auth   bool
	Logger *slog.Logger
	// MisfireGrace is how late a schedule's tick may fire and still count
	// as on time (default DefaultMisfireGrace); later, the schedule's
	// misfire policy decides (docs/schedules.md).
	MisfireGrace time.Duration
	// AuditKeyDir is the directory of the key that signs the event log's
	// checkpoints (its file audit.nk, created there if missing; keep its
	// public key elsewhere: docs/audit.md). Empty: no checkpoints.
	AuditKeyDir string
	// CheckpointInterval is how often the leader checkpoints the log, if
	// anything was appended (default 30s).
	CheckpointInterval time.Duration
}

// AuditKeyFile is the name of the checkpoint signing key's file in
// EngineConfig.AuditKeyDir.
const AuditKeyFile = engine.AuditKeyFile

// Engine runs the components that keep jetflow whole next to any number of
// workers and clients: on every engine the projector (which repairs what a
// crashed writer left), the promoter (delayed jobs that are due) and the
// NATS command service; on the one engine that leads, the fan-in counter,
// the lease sweeper and the reaper. Any number of engines may run against
// one NATS system.
type Engine struct {
	e        *engine.Engine
	auditKey string
}

// NewEngine returns an engine that writes through client's connection:
// a client with the engine's NATS permissions (made without
// ClientOptions.Token). An engine is no Client method: it runs on
// JetStream itself (its streams, consumers and buckets), which a token
// client's NATS user may not touch; NewEngine panics with one.
func NewEngine(client *Client, cfg EngineConfig) *Engine {
	if client.store == nil {
		panic("jetflow.NewEngine: " + errTokenClient.Error())
	}
	e, err := NewEngineE(client, cfg)
	if err != nil {
		panic("jetflow.NewEngine: " + err.Error())
	}
	return e
}

// NewEngineE is NewEngine that returns the error of a checkpoint key that
// cannot be read or created (EngineConfig.AuditKeyDir).
func NewEngineE(client *Client, cfg EngineConfig) (*Engine, error) {
	if client.store == nil {
		return nil, errTokenClient
	}
	ecfg := engine.EngineConfig{ProjectorLag: cfg.ProjectorLag,
		Purger:    engine.PurgerConfig{Retention: cfg.Retention},
		TypeGrace: cfg.TypeGrace, TypeSweepInterval: min(max(cfg.TypeGrace/4, time.Second), engine.DefaultTypeSweepInterval),
		Auth: cfg.Auth, Log: cfg.Logger, MisfireGrace: cfg.MisfireGrace}
	var pub string
	if cfg.AuditKeyDir != "" {
		kp, _, err := engine.LoadAuditKey(cfg.AuditKeyDir)
		if err != nil {
			return nil, err
		}
		ecfg.Checkpoints.Key, ecfg.Checkpoints.Interval = kp, cfg.CheckpointInterval
		pub = engine.AuditPublicKey(kp)
	}
	return &Engine{e: engine.NewEngine(client.store, ecfg), auditKey: pub}, nil
}

// AuditPublicKey is the public key the engine signs the event log's
// checkpoints with ("": it writes none).
func (e *Engine) AuditPublicKey() string { return e.auditKey }

// Add adds a component (an HTTP gateway) that starts after, and stops
// before, the engine's own.
func (e *Engine) Add(c Component) { e.e.Add(c) }

// Start starts every component; if one fails, those started are stopped.
func (e *Engine) Start(ctx context.Context) error { return e.e.Start(ctx) }

// Stop stops every component, last started first.
func (e *Engine) Stop(ctx context.Context) { e.e.Stop(ctx) }

// CaughtUp waits until the engine's consumers of the event log (the
// Projector, and the statistics when this engine leads) have read it up to
// its end as it is at the call.
func (e *Engine) CaughtUp(ctx context.Context) error { return e.e.CaughtUp(ctx) }

// Repairs is how many job records this engine rebuilt from the log
// because a writer had crashed before projecting its event.
func (e *Engine) Repairs() int64 { return e.e.Store.Repairs.Load() }
