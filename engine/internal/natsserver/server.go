// Package natsserver starts the embedded NATS server with JetStream that
// jetflow serve runs (and tests), and connects to it in process.
package natsserver

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/engine/internal/auth"
)

// Config configures an embedded NATS server with JetStream.
type Config struct {
	Dir    string // JetStream store directory
	Listen string // host:port for other processes; "" = in-process connections only
	// SyncAlways fsyncs before every acknowledgement. Otherwise the server
	// fsyncs every SyncInterval (default 1s), which loses nothing on a
	// process crash and at most the last interval on a power loss.
	SyncAlways   bool
	SyncInterval time.Duration
	Name         string
	Debug        bool
	// Users, if any, are the only ones who may connect, each limited to
	// its role's subjects (auth.NATSPermissions); none: anyone may.
	Users auth.NATSUsers
}

// DefaultSyncInterval bounds what a power loss can take from the embedded
// server (nats-server's own default is two minutes).
const DefaultSyncInterval = time.Second

// Start starts an embedded NATS server with JetStream and waits until
// it accepts connections.
func Start(cfg Config) (*server.Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("embedded server: no store directory")
	}
	if cfg.SyncInterval <= 0 {
		cfg.SyncInterval = DefaultSyncInterval
	}
	if cfg.SyncAlways && cfg.SyncInterval > DefaultSyncInterval {
		// The jobs bucket and the queue streams persist asynchronously in
		// that mode, fsynced every SyncInterval, and the Projector holds
		// what it vouches for that long (streams.AsyncDurableAfter).
		return nil, fmt.Errorf("embedded server: a sync interval of %s with SyncAlways: at most %s", cfg.SyncInterval, DefaultSyncInterval)
	}
	if cfg.Name == "" {
		cfg.Name = "jetflow"
	}
	opts := &server.Options{
		ServerName:   cfg.Name,
		JetStream:    true,
		StoreDir:     cfg.Dir,
		SyncAlways:   cfg.SyncAlways,
		SyncInterval: cfg.SyncInterval,
		NoSigs:       true,
		NoLog:        !cfg.Debug,
		MaxPayload:   8 << 20,
	}
	if len(cfg.Users) > 0 {
		users, err := cfg.Users.Server()
		if err != nil {
			return nil, fmt.Errorf("embedded server: %w", err)
		}
		opts.Users = users
	}
	if cfg.Listen == "" {
		opts.DontListen = true
	} else {
		host, port, err := net.SplitHostPort(cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("embedded server: listen address %q: %w", cfg.Listen, err)
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return nil, fmt.Errorf("embedded server: port %q: %w", port, err)
		}
		opts.Host, opts.Port = host, p
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	if cfg.Debug {
		s.ConfigureLogger()
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, errors.New("embedded server: not ready after 30s")
	}
	return s, nil
}

// ConnectInProcess connects to an embedded server without a socket, with
// opts (credentials: nats.UserInfo) after its own.
func ConnectInProcess(s *server.Server, name string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect("", append([]nats.Option{nats.InProcessServer(s), nats.Name(name), nats.MaxReconnects(-1)}, opts...)...)
}
