package jetflow_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// A sync mode other than "always", "interval" or none is refused before
// anything is provisioned.
func TestClientRefusesUnknownSyncMode(t *testing.T) {
	srv := testkit.Server(t)
	nc := testkit.Conn(t, srv)
	_, err := jetflow.NewClient(testkit.Ctx(t), nc, jetflow.ClientOptions{Sync: "sometimes"})
	if err == nil || !strings.Contains(err.Error(), `sync mode "sometimes"`) {
		t.Fatalf("NewClient with sync \"sometimes\": %v", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	l := js.StreamNames(testkit.Ctx(t))
	for n := range l.Name() {
		names = append(names, n)
	}
	if l.Err() != nil || len(names) != 0 {
		t.Fatalf("streams provisioned: %v (%v)", names, l.Err())
	}
}
