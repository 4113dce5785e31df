package store

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

	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Snapshot is a job record and the KV revision it was read or written at.
type Snapshot struct {
	Job *domain.Job
	Rev uint64
	// Behind: the bucket's record is at an earlier event of the job, at
	// revision Rev (a write with DeferRecord); its writer writes it
	// (WriteRecord), or the job's next write does.
	Behind bool
}

// Decider turns a job's current state into the event that changes it, or a
// refusal. The functions of package commands, bound to their arguments.
type Decider func(j *domain.Job) (*domain.Event, error)

// Types resolves the type of a submit (the type registry): the job's type,
// once the payload satisfies the type's schema.
type Types interface {
	Resolve(ctx context.Context, ns, jobType string, payload []byte) (string, error)
}

// Store is the write path. Every transition of every job goes through
// Apply (or SubmitBatch for the first one):
//
//  1. decide: the Decider, with the lifecycle table, produces one event;
//  2. append: the event goes to the job's subject on the condition that the
//     subject's last sequence is the one the decision was made on, so of two
//     racing writers exactly one succeeds;
//  3. project: the fold of the event goes to the KV bucket, revision-checked;
//  4. dispatch, if the job became runnable: a work item, or a schedule.
//
// A crash between any two steps leaves the log ahead of the KV bucket or a
// runnable job without a work item; Current and the Projector repair both.
type Store struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	w       streams.Writer
	events  jetstream.Stream
	queues  *streams.Queues
	topo    streams.Topology
	workers *Workers
	limits  *Limits
	actor   string
	types   Types

	jobs      *Aggregate[domain.Job]
	queueRecs *Aggregate[domain.QueueRecord]

	// Log is where the store, and the components built on it, log. It may
	// be set right after Open.
	Log *slog.Logger

	repairs atomic.Int64 // records rebuilt from the log (missing or behind)

	kindsMu sync.Mutex
	kinds   []repairer // the aggregates of registry records, for Repair

	cascading sync.Map    // parent id -> struct{}: cascades in flight in this process
	parents   parentHeads // parents' states as ParentEnded last saw them
	parentRd  parentReads // ParentEnded's reads under way, shared

	followedUp *followUps // jobs whose event's work item or piece event this process saw acknowledged

	connected atomic.Int64 // unix nanos: when the connection was opened or last came back

	filesMu sync.Mutex
	files   *files.Store // opened by Files, once
}

// Open connects a Store to JetStream, provisioning the topology.
func Open(ctx context.Context, nc *nats.Conn, topo streams.Topology, actor string) (*Store, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096),
		jetstream.WithPublishAsyncTimeout(30*time.Second))
	if err != nil {
		return nil, err
	}
	if topo.Replicas <= 0 {
		if topo.Replicas, err = autoReplicas(ctx, nc, js); err != nil {
			return nil, err
		}
	}
	topo = topo.ResolveSync(ctx, js)
	if err := topo.Ensure(ctx, js); err != nil {
		return nil, err
	}
	evs, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	workers, err := openWorkers(ctx, js)
	if err != nil {
		return nil, err
	}
	s := &Store{nc: nc, js: js, w: streams.Writer{JS: js}, events: evs, workers: workers,
		queues: streams.NewQueues(js, topo), topo: topo, actor: actor, Log: slog.Default(), followedUp: followUpsOf(evs)}
	if topo.Sync == streams.SyncAlways {
		s.w.Group = streams.NewGroupCommit(js) // one fsync for many appends
	}
	if s.jobs, err = NewAggregate(ctx, s, jobKind(s)); err != nil {
		return nil, err
	}
	s.limits = &Limits{records: map[string]domain.QueueRecord{}, changed: make(chan struct{})}
	if s.queueRecs, err = NewAggregate(ctx, s, queueKind(s.limits)); err != nil {
		return nil, err
	}
	s.limits.recs = s.queueRecs
	s.watchReconnects()
	return s, nil
}

// UseTypes makes SubmitBatch resolve types with t (the registry, which is
// built on the Store and so comes after it). Without it a submit's type is
// taken as it is.
func (s *Store) UseTypes(t Types) { s.types = t }

// NC is the store's connection.
func (s *Store) NC() *nats.Conn { return s.nc }

// JS is the store's JetStream context, for consumers and streams: events
// and records are written through the Store only.
func (s *Store) JS() jetstream.JetStream { return s.js }

// Events is the event log's stream.
func (s *Store) Events() jetstream.Stream { return s.events }

// KV is the jobs bucket.
func (s *Store) KV() jetstream.KeyValue { return s.jobs.kv }

// Queues creates queues' streams.
func (s *Store) Queues() *streams.Queues { return s.queues }

// GroupCommit is the group commit the log's appends go through (the
// server fsyncs every write: Topology.Sync is streams.SyncAlways), or nil.
func (s *Store) GroupCommit() *streams.GroupCommit { return s.w.Group }

// Topology is what the Store provisioned.
func (s *Store) Topology() streams.Topology { return s.topo }

// Actor is who this process writes as, on the events it writes for itself.
func (s *Store) Actor() string { return s.actor }

// Workers is the worker registry: who is alive, and which jobs each holds,
// for the lease rules.
func (s *Store) Workers() *Workers { return s.workers }

// Limits are the queues' limits (quotas), from a watch.
func (s *Store) Limits() *Limits { return s.limits }

// Repairs counts the records this Store rebuilt from the log because they
// were missing or behind it.
func (s *Store) Repairs() *atomic.Int64 { return &s.repairs }

// Files is the object store of jobs' files (docs/files.md), opened (and
// created if need be) at the first call, again after a failure.
func (s *Store) Files(ctx context.Context) (*files.Store, error) {
	s.filesMu.Lock()
	defer s.filesMu.Unlock()
	if s.files == nil {
		fs, err := files.Open(ctx, s.js, s.topo)
		if err != nil {
			return nil, err
		}
		s.files = fs
	}
	return s.files, nil
}

// ConnectedSince is when this Store's connection was opened, or last came
// back after it was lost: before it, nothing this process saw of other
// workers' heartbeats can be trusted to be recent.
func (s *Store) ConnectedSince() time.Time { return time.Unix(0, s.connected.Load()) }

// watchReconnects keeps ConnectedSince current, calling any reconnect
// handler the connection had before.
func (s *Store) watchReconnects() {
	s.connected.Store(time.Now().UnixNano())
	prev := s.nc.Opts.ReconnectedCB
	s.nc.SetReconnectHandler(func(c *nats.Conn) {
		s.connected.Store(time.Now().UnixNano())
		// A server that restarted may have lost its last acknowledged
		// writes (fsync every second): what this process saw done is
		// verified again (followUps), when the connection is lost and
		// again when it comes back.
		s.followedUp.clear()
		if prev != nil {
			prev(c)
		}
	})
	prevLost := s.nc.Opts.DisconnectedErrCB
	s.nc.SetDisconnectErrHandler(func(c *nats.Conn, err error) {
		s.followedUp.clear()
		if prevLost != nil {
			prevLost(c, err)
		}
	})
}

// autoReplicas is the replica count of a process that was not told one: the
// count of the system it joins (its event log's), so that every process
// provisions queues alike whichever started first; on a new system, 3 on a
// cluster and 1 on a single server.
func autoReplicas(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (int, error) {
	s, err := js.Stream(ctx, streams.EventsStream)
	if err == nil {
		return max(s.CachedInfo().Config.Replicas, 1), nil
	}
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, fmt.Errorf("events stream: %w", err)
	}
	if nc.ConnectedClusterName() != "" {
		return 3, nil
	}
	return 1, nil
}

// lastMsg is the last event on subject, nil if none.
func (s *Store) lastMsg(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	m, err := s.events.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last event on %s: %w", subject, err)
	}
	return m, nil
}
