package engine

import (
	"log/slog"
	"time"

	"github.com/jetflow/jetflow/engine/internal/maintenance"
)

// The background components the Engine exposes.
type (
	Projector   = maintenance.Projector
	FileSweeper = maintenance.FileSweeper
	Leader      = maintenance.Leader
)

// PurgerConfig configures retention: how long terminal jobs are kept.
type PurgerConfig = maintenance.PurgerConfig

// Defaults of the background components.
const (
	DefaultProjectorLag      = maintenance.DefaultProjectorLag
	DefaultPurgeMax          = maintenance.DefaultPurgeMax
	DefaultTypeSweepInterval = maintenance.DefaultTypeSweepInterval
	DefaultLeaderTTL         = maintenance.DefaultLeaderTTL
)

// LeaderBucket is the KV bucket of leaderships with the given TTL.
func LeaderBucket(ttl time.Duration) string { return maintenance.LeaderBucket(ttl) }

// NewFileSweeper returns a sweeper of the files of jobs that do not exist,
// with the grace (0: the default), looking every interval (0: the
// default).
func NewFileSweeper(s *Store, grace, interval time.Duration, log *slog.Logger) *FileSweeper {
	return maintenance.NewFileSweeper(s.Store, maintenance.FileSweeperConfig{Grace: grace, Interval: interval, Log: log})
}
