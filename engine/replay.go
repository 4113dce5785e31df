package engine

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/engine/internal/replay"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// Rebuild folds the event log, up to and including sequence upTo (0: the
// last one now), into job records: the state of every job as the log says
// it is.
func Rebuild(ctx context.Context, js jetstream.JetStream, upTo uint64) (map[string]*domain.Job, uint64, error) {
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
