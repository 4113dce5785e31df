package streams

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Statistics (projections.StatsFold): one KV bucket per resolution,
// jetflow_stats_<res>, a key per series and slot,
// <namespace>.<queue>.<slot start, unix seconds>, "=" standing for every
// namespace or every queue (no name has it). The bucket's MaxAge drops a
// slot after its resolution's range. The StatsKeeper's checkpoint (how far
// it folded the log) is the key StatsCursorKey of the hour bucket.

// StatsBucket is the bucket of resolution res ("1m", "10m", "1h").
func StatsBucket(res string) string { return "jetflow_stats_" + res }

// StatsCursorKey is the key of the StatsKeeper's checkpoint.
const StatsCursorKey = "cursor"

// StatsAll stands for every namespace or every queue in a stats key.
const StatsAll = "="

// StatsKey is the key of the slot of namespace ns and queue q ("": all)
// that starts at start.
func StatsKey(ns, q string, start time.Time) string {
	if ns == "" {
		ns = StatsAll
	}
	if q == "" {
		q = StatsAll
	}
	return ns + "." + q + "." + strconv.FormatInt(start.Unix(), 10)
}

// statsConfig is the bucket of resolution res, whose slots are kept for
// keep.
func (t Topology) statsConfig(res string, keep time.Duration) jetstream.KeyValueConfig {
	t = t.withDefaults()
	return jetstream.KeyValueConfig{Bucket: StatsBucket(res), Description: "jetflow statistics per " + res + ", folded from the event log",
		History: 1, TTL: keep, Storage: t.storage(), Replicas: t.Replicas}
}

// EnsureStats creates the statistics buckets that are missing.
func (t Topology) EnsureStats(ctx context.Context, js jetstream.JetStream, keeps map[string]time.Duration) error {
	for res, keep := range keeps {
		if err := EnsureBucket(ctx, js, t.statsConfig(res, keep)); err != nil {
			return err
		}
	}
	return nil
}

// StatsConsumerPrefix begins the names of the statistics keeper's
// consumers of the event log (ordered, so not durable: a reader of the
// server's consumers tells them from a read's by it); a session's name
// goes on with "_", an id of its own, "_" and the consumer's serial.
const StatsConsumerPrefix = "jetflow_stats"
