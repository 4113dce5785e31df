package streams_test

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

func TestSubjectMatches(t *testing.T) {
	for _, c := range []struct {
		filter, subject string
		want            bool
	}{
		{"a.b", "a.b", true},
		{"a.b", "a.c", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.*", "a", false},
		{"a.>", "a.b.c", true},
		{"a.>", "a", false},
		{">", "a", true},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.b.d", false},
		{"a.b", "a.b.c", false},
	} {
		if got := streams.SubjectMatches(c.filter, c.subject); got != c.want {
			t.Errorf("SubjectMatches(%q, %q) = %v", c.filter, c.subject, got)
		}
	}
}

// A queue made now has a queue stream and a batch stream, each capturing
// its own subjects; one made before batch streams (its queue stream
// captures everything of the queue) is its own batch stream, and gets no
// other.
func TestQueueStreams(t *testing.T) {
	js, err := jetstream.New(testkit.Conn(t, testkit.Server(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Ctx(t)
	topo := streams.Topology{}
	if err := topo.Ensure(ctx, js); err != nil {
		t.Fatal(err)
	}
	if _, err := streams.QueueStreams(ctx, js, "new"); err == nil {
		t.Fatal("the streams of a queue never used")
	}
	if err := streams.NewQueues(js, topo).Ensure(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	set, err := streams.QueueStreams(ctx, js, "new")
	if err != nil {
		t.Fatal(err)
	}
	if set.Run.CachedInfo().Config.Name != streams.QueueStream("new") || set.Batches == nil ||
		set.Batches.CachedInfo().Config.Name != streams.BatchStream("new") || len(set.All()) != 2 {
		t.Fatalf("new queue: %+v", set)
	}
	for _, c := range []struct {
		subject  string
		run, bat bool
	}{
		{streams.RunSubject("new", "t"), true, false},
		{streams.RunFilter("new"), true, false},
		{streams.SchedSubject("new", "J"), true, false},
		{streams.DueSubject("new"), true, false},
		{streams.BatchSubject("new", "b", "P"), false, true},
		{streams.BatchesFilter("new"), false, true},
	} {
		if streams.Captures(set.Run, c.subject) != c.run || streams.Captures(set.Batches, c.subject) != c.bat {
			t.Errorf("%s: run stream %v, batch stream %v", c.subject, streams.Captures(set.Run, c.subject), streams.Captures(set.Batches, c.subject))
		}
	}

	cfg := topo.QueueConfig("old")
	cfg.Subjects = []string{streams.LegacyQueueSubject("old")}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	q := streams.NewQueues(js, topo)
	if name, err := q.BatchStream(ctx, "old"); err != nil || name != streams.QueueStream("old") {
		t.Fatalf("old queue's batches in %q (%v)", name, err)
	}
	set, err = streams.QueueStreams(ctx, js, "old")
	if err != nil || set.Batches != set.Run || len(set.All()) != 1 || !streams.Captures(set.Run, streams.BatchSubject("old", "b", "P")) {
		t.Fatalf("old queue: %+v %v", set, err)
	}
	if _, err := js.Stream(ctx, streams.BatchStream("old")); err == nil {
		t.Fatal("a batch stream made beside a queue stream that holds its batches")
	}
}
