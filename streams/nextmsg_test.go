package streams_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// NextMsg answers the first message of a subject at or after a sequence,
// skipping other subjects, and "none" past the subject's last.
func TestNextMsg(t *testing.T) {
	srv := testkit.Server(t)
	nc := testkit.Conn(t, srv)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Ctx(t)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "NEXT", Subjects: []string{"n.>"}, AllowDirect: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"n.a", "n.b", "n.b", "n.a", "n.b"} { // seqs 1..5
		if _, err := js.Publish(ctx, s, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		subject string
		from    uint64
		seq     uint64 // 0: none
	}{
		{"n.a", 1, 1}, {"n.a", 2, 4}, {"n.a", 5, 0}, {"n.b", 1, 2}, {"n.b", 4, 5}, {"n.b", 6, 0}, {"n.c", 1, 0},
	} {
		seq, data, found, err := streams.NextMsg(ctx, nc, "NEXT", c.subject, c.from)
		if err != nil || found != (c.seq != 0) || seq != c.seq || (found && string(data) != c.subject) {
			t.Fatalf("%s from %d: seq %d %q found %v err %v, want seq %d", c.subject, c.from, seq, data, found, err, c.seq)
		}
	}
	if _, _, _, err := streams.NextMsg(ctx, nc, "NONE", "n.a", 1); err == nil {
		t.Fatal("a stream that does not exist answered")
	}
}
