package engine

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/engine/internal/cmdservice"
	"github.com/jetflow/jetflow/engine/internal/replay"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// The facade of history (docs/audit.md): the log folded at any scope and
// instant.

// LogScope selects part of the event log: one job, a namespace, queue and/or
// type, a time range (replay.Scope).
type LogScope = replay.Scope

// AtFilter selects the jobs of JobsAt.
type AtFilter = replay.AtFilter

// MaxListAt is the most jobs JobsAt returns.
const MaxListAt = replay.MaxListAt

// CountScope folds the scope's events and counts its jobs by state
// (jetflow replay --job/--namespace/...).
func CountScope(ctx context.Context, js jetstream.JetStream, sc LogScope) (map[domain.State]int, uint64, error) {
	return replay.Counts(ctx, js, sc)
}

// VerifyScope is Verify on a scope: only the scope's records are compared.
func VerifyScope(ctx context.Context, js jetstream.JetStream, sc LogScope, settle time.Duration) (*projections.Report, error) {
	return replay.VerifyScope(ctx, js, sc, settle)
}

// JobAt is job id as of at, folded from the log.
func JobAt(ctx context.Context, js jetstream.JetStream, id string, at time.Time) (*domain.Job, error) {
	return replay.JobAt(ctx, js, "", id, at)
}

// JobsAt is the jobs in a state at an instant, folded from the log.
func JobsAt(ctx context.Context, js jetstream.JetStream, at time.Time, f AtFilter) ([]*domain.Job, bool, error) {
	return replay.JobsAt(ctx, js, at, f)
}

// parseInstant parses an instant of history (RFC 3339, "": none); a bad
// one is an InputError naming field.
func parseInstant(field, s string) (time.Time, error) { return cmdservice.ParseInstant(field, s) }
