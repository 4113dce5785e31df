// Package storetest opens the engine's internal store for the tests of the
// rooms under engine/internal, which work on it directly (engine.Store, the
// facade the rest of jetflow uses, does not hand it out).
package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// Open opens a store on nc writing as actor, logging to the test.
func Open(t testing.TB, nc *nats.Conn, actor string) *store.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(ctx, nc, streams.Topology{}, actor)
	if err != nil {
		t.Fatal(err)
	}
	st.Log = testkit.Logger(t)
	return st
}
