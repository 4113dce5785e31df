package streams_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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

// A direct get that is never answered (its server died after taking the
// request: a reconnect does not fail it) ends with context.DeadlineExceeded
// whatever the caller's context: after answerWait without a deadline,
// after answerWaitLong under a longer one, at a shorter one. A
// worker checking a child's parent just as serve was SIGKILLed used to
// wait for ever, holding the child running (tests/soak, 2026-11-29).
func TestDirectGetUnansweredEnds(t *testing.T) {
	defer streams.SetAnswerWait(200*time.Millisecond, 600*time.Millisecond)()
	srv := testkit.Server(t)
	nc := testkit.Conn(t, srv)
	taken := make(chan struct{}, 16)
	sub, err := nc.Subscribe("$JS.API.DIRECT.GET.MUTE", func(*nats.Msg) { taken <- struct{}{} }) // takes, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, read := range map[string]func() error{
		"NextMsg": func() error {
			_, _, _, err := streams.NextMsg(ctx, nc, "MUTE", "n.a", 1)
			return err
		},
		"MultiLast": func() error {
			_, err := streams.MultiLast(ctx, nc, "MUTE", []string{"n.a", "n.b"})
			return err
		},
		"ReadSubject": func() error {
			_, err := streams.ReadSubject(ctx, nc, "MUTE", "n.a", 1, func(uint64, []byte) error { return nil })
			return err
		},
	} {
		done := make(chan error, 1)
		go func() { done <- read() }()
		select {
		case err := <-done:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: err %v, want context.DeadlineExceeded", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: an unanswered direct get still waits after 10 s", name)
		}
		select {
		case <-taken:
		default:
			t.Fatalf("%s: the request never reached the server", name)
		}
	}
	// A caller's shorter deadline is kept; a longer one (a handler's, under
	// a job timeout of an hour) is cut to answerWaitLong.
	for _, c := range []struct{ deadline, min, max time.Duration }{
		{50 * time.Millisecond, 0, 400 * time.Millisecond},
		{time.Hour, 600 * time.Millisecond, 5 * time.Second},
	} {
		dctx, cancel := context.WithTimeout(ctx, c.deadline)
		began := time.Now()
		_, _, _, err := streams.NextMsg(dctx, nc, "MUTE", "n.a", 1)
		took := time.Since(began)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || took < c.min || took > c.max {
			t.Fatalf("NextMsg with a deadline in %v: err %v after %v, want context.DeadlineExceeded after %v to %v", c.deadline, err, took, c.min, c.max)
		}
	}
}
