package engine

import (
	"log/slog"
	"time"

	"github.com/jetflow/jetflow/engine/internal/remote"
)

// Remote serves workers that run outside any jetflow process: the HTTP
// worker protocol.
type Remote = remote.Remote

// Limits of what one remote worker serves.
const (
	MaxRemoteTypes  = remote.MaxRemoteTypes
	MaxRemoteQueues = remote.MaxRemoteQueues
)

// CheckRemoteScope refuses a worker scope over the limits.
func CheckRemoteScope(queues, types []string) error { return remote.CheckRemoteScope(queues, types) }

// NewRemote returns a Remote whose claims hold a lease of lease (0:
// DefaultLease).
func NewRemote(s *Store, lease time.Duration, log *slog.Logger) *Remote {
	return remote.New(s.Store, lease, log)
}
