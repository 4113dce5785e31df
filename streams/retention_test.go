package streams_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// The event log's MaxAge is set by the process that asks for one (serve
// --events-retention) and left alone by every other that opens the topology.
func TestEventsMaxAgeSetByServeKeptByClients(t *testing.T) {
	ctx := testkit.Ctx(t)
	js, err := jetstream.New(testkit.Conn(t, testkit.Server(t)))
	if err != nil {
		t.Fatal(err)
	}
	maxAge := func() time.Duration {
		s, err := js.Stream(ctx, streams.EventsStream)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.MaxAge
	}
	for _, step := range []struct {
		set, want time.Duration
	}{
		{0, 0}, // a new log, no retention asked: forever
		{90 * 24 * time.Hour, 90 * 24 * time.Hour}, // serve's default
		{0, 90 * 24 * time.Hour},                   // a worker or CLI opening the store: unchanged
		{30 * 24 * time.Hour, 30 * 24 * time.Hour}, // serve with another retention
	} {
		if err := (streams.Topology{Replicas: 1, EventsMaxAge: step.set}).Ensure(ctx, js); err != nil {
			t.Fatal(err)
		}
		if got := maxAge(); got != step.want {
			t.Fatalf("after Ensure with %s: MaxAge %s, want %s", step.set, got, step.want)
		}
	}
}
