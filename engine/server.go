package engine

import (
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/engine/internal/natsserver"
)

// ServerConfig configures an embedded NATS server with JetStream.
type ServerConfig = natsserver.Config

// DefaultSyncInterval bounds what a power loss can take from the embedded
// server.
const DefaultSyncInterval = natsserver.DefaultSyncInterval

// StartServer starts an embedded NATS server with JetStream and waits until
// it accepts connections.
func StartServer(cfg ServerConfig) (*server.Server, error) { return natsserver.Start(cfg) }

// ConnectInProcess connects to an embedded server without a socket.
func ConnectInProcess(s *server.Server, name string, opts ...nats.Option) (*nats.Conn, error) {
	return natsserver.ConnectInProcess(s, name, opts...)
}
