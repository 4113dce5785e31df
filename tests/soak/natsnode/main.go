// Command natsnode runs one NATS server with JetStream, a node of the 3-node
// cluster that tests/soak starts and kills. It is built without the race
// detector, so that the cluster runs at the speed of a real one.
//
//	natsnode -name n1 -listen 127.0.0.1:4222 -cluster 127.0.0.1:6222 -routes nats-route://...,... -dir DIR [-sync-always]
//
// The README's cluster figures (Durability) run `jetflow bench --nats` against
// three of them.
//
// It prints "node <name> ready" once it accepts clients and runs until
// SIGTERM or SIGINT.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow/jetflow/engine"
)

func main() {
	name := flag.String("name", "n1", "server name")
	listen := flag.String("listen", "127.0.0.1:4222", "client address")
	cluster := flag.String("cluster", "127.0.0.1:6222", "cluster (route) address")
	routes := flag.String("routes", "", "comma-separated routes to every node")
	dir := flag.String("dir", "", "JetStream store directory")
	always := flag.Bool("sync-always", false, "fsync before every acknowledgement (default: every second, jetflow's)")
	flag.Parse()
	if err := run(*name, *listen, *cluster, *routes, *dir, *always); err != nil {
		fmt.Fprintln(os.Stderr, "natsnode:", err)
		os.Exit(1)
	}
}

func run(name, listen, cluster, routes, dir string, always bool) error {
	host, port, err := hostPort(listen)
	if err != nil {
		return err
	}
	chost, cport, err := hostPort(cluster)
	if err != nil {
		return err
	}
	opts := &server.Options{
		ServerName:   name,
		Host:         host,
		Port:         port,
		JetStream:    true,
		StoreDir:     dir,
		SyncInterval: engine.DefaultSyncInterval,
		SyncAlways:   always,
		Cluster:      server.ClusterOpts{Name: "jetflow-soak", Host: chost, Port: cport},
		Routes:       server.RoutesFromStr(routes),
		NoSigs:       true,
		NoLog:        true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return err
	}
	go s.Start()
	if !s.ReadyForConnections(60 * time.Second) {
		return fmt.Errorf("node %s not ready", name)
	}
	fmt.Printf("node %s ready\n", name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	s.Shutdown()
	s.WaitForShutdown()
	return nil
}

func hostPort(addr string) (string, int, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("address %q: %w", addr, err)
	}
	n, err := strconv.Atoi(p)
	return h, n, err
}
