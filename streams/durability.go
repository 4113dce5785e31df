package streams

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The server's fsync modes, as Topology.Sync records them on the event log.
const (
	// SyncAlways: the server fsyncs before every acknowledgement (serve
	// --sync always). The log's appends go through a GroupCommit, and the
	// jobs bucket and the queue streams, if they are created in this mode,
	// persist asynchronously: what a crash takes from them is rebuilt from
	// the log (records, work items, schedules). The batch streams keep
	// fsyncing: a fan-out's batch items are sent before the parent's
	// job.waiting and nothing sends them again.
	SyncAlways = "always"
	// SyncInterval: the server fsyncs every interval (the default).
	SyncInterval = "interval"
	// SyncMetadata is the event log's metadata key the mode is recorded in.
	SyncMetadata = "jetflow_sync"
)

// ResolveSync returns t with its Sync taken from the event log's metadata
// when it is not set: a process that was not told the server's fsync mode
// (a worker, a client) writes as the one that started the server (serve)
// recorded it.
func (t Topology) ResolveSync(ctx context.Context, js jetstream.JetStream) Topology {
	if t.Sync != "" {
		return t
	}
	if s, err := js.Stream(ctx, EventsStream); err == nil {
		t.Sync = s.CachedInfo().Config.Metadata[SyncMetadata]
	}
	return t
}

// AsyncDurableAfter bounds how long a write acknowledged by an asynchronous
// stream or bucket (AsyncDerived) may still be lost to a power loss: the
// embedded server's sync interval under sync always (one second, which it
// refuses to lengthen in that mode) and a margin.
const AsyncDurableAfter = 1500 * time.Millisecond

// AsyncDerived reports whether the jobs bucket and the queue streams
// created under t persist asynchronously: under sync always, on a single
// server's file storage (JetStream refuses the async persist mode on
// replicated streams).
func (t Topology) AsyncDerived() bool {
	return t.Sync == SyncAlways && t.Replicas <= 1 && !t.MemoryStorage
}

// ensureJobsBucket creates the jobs bucket's stream as jetstream's
// CreateKeyValue would, but with the async persist mode (which a bucket's
// config cannot say, and which cannot be changed once the stream exists).
// An existing bucket is left as it is.
func (t Topology) ensureJobsBucket(ctx context.Context, js jetstream.JetStream, kv jetstream.KeyValueConfig) {
	if !t.AsyncDerived() {
		return
	}
	if _, err := js.Stream(ctx, "KV_"+kv.Bucket); err == nil {
		return
	}
	_, _ = js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KV_" + kv.Bucket, Description: kv.Description, Subjects: []string{"$KV." + kv.Bucket + ".>"},
		MaxMsgsPerSubject: 1, MaxBytes: -1, MaxMsgs: -1, MaxConsumers: -1, MaxMsgSize: kv.MaxValueSize,
		Storage: kv.Storage, Replicas: kv.Replicas, AllowRollup: true, DenyDelete: true, AllowDirect: true,
		Duplicates: defaultDuplicateWindow, Discard: jetstream.DiscardNew,
		PersistMode: jetstream.AsyncPersistMode,
	})
	// A failure (another process created it first) leaves EnsureBucket
	// to find or create the bucket as usual.
}
