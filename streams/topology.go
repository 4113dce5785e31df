package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jetflow/jetflow/internal/domain"

	"github.com/nats-io/nats.go/jetstream"
)

// Topology says how jetflow's streams and buckets are provisioned. The zero
// value is the single-node default; a cluster sets Replicas to 3.
type Topology struct {
	Replicas      int  // 1 (default) or 3 on a cluster
	MemoryStorage bool // tests and benchmarks only: nothing survives a restart
	// EventsMaxAge is how long the event log keeps events (JetStream's
	// MaxAge, applied by the server). Zero leaves an existing log's as it
	// is (forever for a new one): only the process that sets it (serve
	// --events-retention) changes it, not every client that opens a Store.
	EventsMaxAge    time.Duration
	DuplicateWindow time.Duration // Nats-Msg-Id dedupe window of the queue streams (default 2 min)
	MaxPayload      int32         // largest record; default 4 MiB
	WorkerExpiry    time.Duration // how long a silent worker's record stays in WorkersBucket (default defaultWorkerExpiry)
	// Sync is the server's fsync mode (SyncAlways, SyncInterval) as the
	// process that started the server was told, recorded on the event
	// log; "" takes the recorded one (ResolveSync).
	Sync string
}

// Defaults of a Topology.
const (
	defaultDuplicateWindow = 2 * time.Minute
	defaultMaxPayload      = 4 << 20
)

func (t Topology) withDefaults() Topology {
	if t.Replicas <= 0 {
		t.Replicas = 1
	}
	if t.DuplicateWindow <= 0 {
		t.DuplicateWindow = defaultDuplicateWindow
	}
	if t.MaxPayload <= 0 {
		t.MaxPayload = defaultMaxPayload
	}
	if t.WorkerExpiry <= 0 {
		t.WorkerExpiry = defaultWorkerExpiry
	}
	return t
}

func (t Topology) storage() jetstream.StorageType {
	if t.MemoryStorage {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// EventsConfig is the configuration of the events stream: every job's log.
// Limits retention (events are never consumed away), per-subject sequences
// for optimistic appends, direct get for reading a job's history.
func (t Topology) EventsConfig() jetstream.StreamConfig {
	t = t.withDefaults()
	return jetstream.StreamConfig{
		Name:        EventsStream,
		Description: "jetflow event log: every transition of every job",
		Subjects:    []string{EventsPrefix + ".>", PiecesPrefix + ".>", RegistryPrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     t.storage(),
		Replicas:    t.Replicas,
		MaxAge:      t.EventsMaxAge,
		MaxMsgSize:  t.MaxPayload,
		Duplicates:  t.DuplicateWindow,
		AllowDirect: true,
		DenyDelete:  true,
		// The group commit of sync always (GroupCommit).
		AllowAtomicPublish: true,
		Metadata:           syncMetadata(t.Sync),
	}
}

func syncMetadata(sync string) map[string]string {
	if sync == "" {
		return nil
	}
	return map[string]string{SyncMetadata: sync}
}

// QueueConfig is the configuration of one queue's work-queue stream: run
// items (one consumer per job type), message schedules for delays, and the
// due subject their firing lands on. Under sync always on a single server
// it persists asynchronously, as the jobs bucket does: each of its items is
// derived from the log (a job's runnable event) and sent again by the
// Projector when a crash took it, so the two fsyncs per job its publish
// and its acknowledgement cost are not needed (docs/architecture.md).
func (t Topology) QueueConfig(queue string) jetstream.StreamConfig {
	t = t.withDefaults()
	cfg := jetstream.StreamConfig{
		Name:              QueueStream(queue),
		Description:       "jetflow work queue " + queue,
		Subjects:          queueSubjects(queue),
		Retention:         jetstream.WorkQueuePolicy,
		Storage:           t.storage(),
		Replicas:          t.Replicas,
		MaxMsgSize:        t.MaxPayload,
		Duplicates:        t.DuplicateWindow,
		AllowMsgSchedules: true,
		AllowDirect:       true,
	}
	if t.AsyncDerived() {
		cfg.PersistMode = jetstream.AsyncPersistMode
	}
	return cfg
}

// batchConfig is the configuration of one queue's batch stream: the work
// items of its fan-outs' batches (one consumer per batch type). It fsyncs
// as the server does in every mode: a batch item is sent once, before its
// parent's job.waiting, and nothing could send a lost one again.
func (t Topology) batchConfig(queue string) jetstream.StreamConfig {
	t = t.withDefaults()
	return jetstream.StreamConfig{
		Name:        BatchStream(queue),
		Description: "jetflow batches of queue " + queue,
		Subjects:    []string{BatchesFilter(queue)},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     t.storage(),
		Replicas:    t.Replicas,
		MaxMsgSize:  t.MaxPayload,
		Duplicates:  t.DuplicateWindow,
		AllowDirect: true,
	}
}

// Ensure creates the events stream and the buckets if they are missing, and
// updates the events stream only if its configuration differs from this
// build's. It is idempotent and cheap to run from every process at start
// (an update while other processes create consumers is both needless work
// and, in nats-server 2.15, a data race in the file store).
func (t Topology) Ensure(ctx context.Context, js jetstream.JetStream) error {
	t = t.withDefaults()
	events := t.EventsConfig()
	if events.MaxAge == 0 || t.Sync == "" {
		if s, err := js.Stream(ctx, EventsStream); err == nil {
			if events.MaxAge == 0 {
				events.MaxAge = s.CachedInfo().Config.MaxAge
			}
			if t.Sync == "" {
				events.Metadata = syncMetadata(s.CachedInfo().Config.Metadata[SyncMetadata])
			}
		}
	}
	if err := ensureStream(ctx, js, events); err != nil {
		return err
	}
	for _, kv := range []jetstream.KeyValueConfig{
		{Bucket: JobsBucket, Description: "jetflow job state, projected from the event log", History: 1,
			Storage: t.storage(), Replicas: t.Replicas, MaxValueSize: t.MaxPayload},
		{Bucket: QueuesBucket, Description: "jetflow queues and their settings", History: 1,
			Storage: t.storage(), Replicas: t.Replicas},
		{Bucket: WorkersBucket, Description: "jetflow workers and their heartbeats", History: 1,
			TTL: t.WorkerExpiry, Storage: t.storage(), Replicas: t.Replicas},
		{Bucket: TypesBucket, Description: "jetflow registered job types, projected from the event log", History: 1,
			Storage: t.storage(), Replicas: t.Replicas},
		{Bucket: NamespacesBucket, Description: "jetflow namespaces and their settings, projected from the event log", History: 1,
			Storage: t.storage(), Replicas: t.Replicas},
		{Bucket: TokensBucket, Description: "jetflow access tokens (hashes only), projected from the event log", History: 1,
			Storage: t.storage(), Replicas: t.Replicas},
		{Bucket: SchedulesBucket, Description: "jetflow schedules (cron and intervals), projected from the event log", History: 1,
			Storage: t.storage(), Replicas: t.Replicas},
	} {
		if kv.Bucket == JobsBucket {
			t.ensureJobsBucket(ctx, js, kv)
		}
		if err := EnsureBucket(ctx, js, kv); err != nil {
			return err
		}
	}
	return EnsureObjectStore(ctx, js, t.FilesConfig())
}

// ensureStream creates a stream, or updates it if the settings jetflow
// relies on differ.
func ensureStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	s, err := js.Stream(ctx, cfg.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err = js.CreateStream(ctx, cfg); err == nil || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("ensure stream %s: %w", cfg.Name, err)
	}
	have := s.CachedInfo().Config
	if slices.Equal(have.Subjects, cfg.Subjects) && have.MaxAge == cfg.MaxAge && have.Duplicates == cfg.Duplicates &&
		have.MaxMsgSize == cfg.MaxMsgSize && have.AllowDirect == cfg.AllowDirect &&
		have.AllowMsgSchedules == cfg.AllowMsgSchedules && have.Retention == cfg.Retention &&
		have.AllowAtomicPublish == cfg.AllowAtomicPublish && have.Metadata[SyncMetadata] == cfg.Metadata[SyncMetadata] {
		return nil
	}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("update stream %s: %w", cfg.Name, err)
	}
	return nil
}

// EnsureBucket creates a KV bucket if it is missing.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) error {
	_, err := js.KeyValue(ctx, cfg.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if _, err = js.CreateKeyValue(ctx, cfg); err == nil || errors.Is(err, jetstream.ErrBucketExists) ||
			errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return nil
		}
	}
	if err != nil {
		return fmt.Errorf("ensure bucket %s: %w", cfg.Bucket, err)
	}
	return nil
}

// Queues provisions queue streams on first use and remembers which exist, so
// that the submit path pays for the check once per queue and process.
type Queues struct {
	topo  Topology
	js    jetstream.JetStream
	mu    sync.Mutex
	known map[string]string // queue -> the stream its batches are in
}

// NewQueues returns a provisioner of queue streams.
func NewQueues(js jetstream.JetStream, t Topology) *Queues {
	return &Queues{topo: t.withDefaults(), js: js, known: map[string]string{}}
}

// Ensure makes sure the queue's streams exist and the queue is registered.
func (q *Queues) Ensure(ctx context.Context, queue string) error {
	_, err := q.BatchStream(ctx, queue)
	return err
}

// BatchStream returns the name of the stream that holds the queue's
// batches, making the queue's streams and registering the queue first if
// they are missing: the queue's batch stream, or its queue stream when that
// was made by a build before batch streams (it captures the batches
// itself, and a batch stream beside it would overlap).
func (q *Queues) BatchStream(ctx context.Context, queue string) (string, error) {
	q.mu.Lock()
	batches, ok := q.known[queue]
	q.mu.Unlock()
	if ok {
		return batches, nil
	}
	if !domain.ValidQueue(queue) {
		return "", fmt.Errorf("queue %q: invalid name", queue)
	}
	cfg := q.topo.QueueConfig(queue)
	batches = BatchStream(queue)
	s, err := q.js.Stream(ctx, cfg.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		// The batch stream first: a queue stream that exists has its
		// batch stream.
		if err := createStream(ctx, q.js, q.topo.batchConfig(queue)); err != nil {
			return "", err
		}
		if err := createStream(ctx, q.js, cfg); err != nil {
			return "", err
		}
	case err != nil:
		return "", fmt.Errorf("queue stream %s: %w", cfg.Name, err)
	case holdsBatches(s):
		batches = cfg.Name
	default:
		if _, err := q.js.Stream(ctx, batches); errors.Is(err, jetstream.ErrStreamNotFound) {
			err = createStream(ctx, q.js, q.topo.batchConfig(queue))
			if err != nil {
				return "", err
			}
		} else if err != nil {
			return "", fmt.Errorf("batch stream %s: %w", batches, err)
		}
	}
	kv, err := q.js.KeyValue(ctx, QueuesBucket)
	if err != nil {
		return "", fmt.Errorf("queues bucket: %w", err)
	}
	// Read before creating: a process that may not write the bucket (an
	// SDK worker's NATS user) serves a queue that exists.
	if _, err := kv.Get(ctx, queue); errors.Is(err, jetstream.ErrKeyNotFound) {
		rec, _ := Marshal(&domain.QueueRecord{Name: queue, CreatedAt: time.Now().UTC()})
		if _, err := kv.Create(ctx, queue, rec); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return "", fmt.Errorf("register queue %s: %w", queue, err)
		}
	} else if err != nil {
		return "", fmt.Errorf("queue %s: %w", queue, err)
	}
	q.mu.Lock()
	q.known[queue] = batches
	q.mu.Unlock()
	return batches, nil
}

// createStream creates a stream; one made meanwhile by another process is
// as good.
func createStream(ctx context.Context, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return fmt.Errorf("create stream %s: %w", cfg.Name, err)
	}
	return nil
}

// Consumers lists the consumers of a stream, each once. The server sends
// the list in pages by offset, and a consumer made or deleted while it is
// read (ordered consumers come and go) moves the others: one can stand on
// two pages, and would be counted twice.
func Consumers(ctx context.Context, s jetstream.Stream) ([]*jetstream.ConsumerInfo, error) {
	lister := s.ListConsumers(ctx)
	var out []*jetstream.ConsumerInfo
	seen := map[string]bool{}
	for ci := range lister.Info() {
		if !seen[ci.Name] {
			seen[ci.Name] = true
			out = append(out, ci)
		}
	}
	if err := lister.Err(); err != nil && !errors.Is(err, jetstream.ErrEndOfData) {
		return out, err
	}
	return out, nil
}

// QueueSet is a queue's streams: Run, its queue stream (run items,
// delays, fired schedules), and Batches, the stream that holds its
// batches: its batch stream, Run itself on a queue stream made before
// batch streams (LegacyQueueSubject), nil when the batch stream is missing.
type QueueSet struct{ Run, Batches jetstream.Stream }

// All lists the set's streams, each once (none for the zero set).
func (s QueueSet) All() []jetstream.Stream {
	var out []jetstream.Stream
	if s.Run != nil {
		out = append(out, s.Run)
	}
	if s.Batches != nil && s.Batches != s.Run {
		out = append(out, s.Batches)
	}
	return out
}

// QueueStreams returns a queue's streams as they are, making none. The
// queue stream's error is returned as is (jetstream.ErrStreamNotFound for
// a queue never used).
func QueueStreams(ctx context.Context, js jetstream.JetStream, queue string) (QueueSet, error) {
	qs, err := js.Stream(ctx, QueueStream(queue))
	if err != nil {
		return QueueSet{}, err
	}
	if holdsBatches(qs) {
		return QueueSet{Run: qs, Batches: qs}, nil
	}
	bs, err := js.Stream(ctx, BatchStream(queue))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return QueueSet{Run: qs}, nil
	}
	if err != nil {
		return QueueSet{}, err
	}
	return QueueSet{Run: qs, Batches: bs}, nil
}

// holdsBatches reports whether the queue stream qs holds its queue's
// batches itself (made before batch streams).
func holdsBatches(qs jetstream.Stream) bool {
	cfg := qs.CachedInfo().Config
	q, _ := QueueOfStream(cfg.Name)
	return slices.Contains(cfg.Subjects, LegacyQueueSubject(q))
}

// Captures reports whether stream s captures subject (one of its subjects
// matches it). subject may be a filter: its wildcards then match as
// tokens, so a filter that one of s's subjects covers is captured.
func Captures(s jetstream.Stream, subject string) bool {
	for _, f := range s.CachedInfo().Config.Subjects {
		if SubjectMatches(f, subject) {
			return true
		}
	}
	return false
}
