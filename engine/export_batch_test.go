package engine

import "time"

// ParseBatchID exposes what a batch id says, for tests.
func ParseBatchID(id string) (claimed time.Time, parent, stream string, seq uint64, delivered int, err error) {
	ref, err := parseBatchID(id)
	return ref.claimed, ref.parent, ref.stream, ref.seq, ref.delivered, err
}

// MakeBatchID makes a batch id, for tests.
func MakeBatchID(claimed time.Time, parent, ack string) string { return batchID(claimed, parent, ack) }
