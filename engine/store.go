package engine

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/auth"
	"github.com/jetflow/jetflow/engine/internal/registry"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Store is the write path and the reads of jetflow's records (the
// internal store), with the type registry and the tokens built on it.
type Store struct {
	*store.Store
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
	return &Store{Store: st, NC: st.NC(), JS: st.JS(), KV: st.KV(), Events: st.Events(), Queues: st.Queues(),
		Topo: st.Topology(), Workers: st.Workers(), Types: reg, Tokens: toks, Actor: st.Actor(), Repairs: st.Repairs()}, nil
}

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
	return auth.CheckRefs(ctx, s.Store, p, req)
}

// Expired lists the ids of terminal jobs older than the retention of their
// namespace (ns: only that one, if not empty), oldest first, at most max.
func Expired(ctx context.Context, s *Store, retention func(ns string) time.Duration, ns string, max int) ([]string, error) {
	return s.Store.Expired(ctx, retention, ns, max)
}

// Violation is one way a payload breaks its type's schema.
type Violation = commands.Violation

// SchemaViolationError is a payload refused by its type's schema.
type SchemaViolationError = commands.SchemaViolationError

// CanonicalSchema checks that b is a JSON Schema and returns it compacted,
// with object keys in order.
func CanonicalSchema(b []byte) ([]byte, error) { return registry.CanonicalSchema(b) }
