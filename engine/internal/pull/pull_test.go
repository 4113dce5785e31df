package pull_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/engine/internal/pull"
	"github.com/jetflow/jetflow/internal/testkit"
)

// A puller told to stop (Signal) fetches nothing new, but what the server
// sends its current fetch still reaches the callback, which gives it back
// (GiveBack), after the fetch ended: it is not delivered to it again. Cancelling the fetch instead dropped a
// message in flight, which then came again only after the AckWait (30 s).
func TestSignalKeepsTheCurrentFetch(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	js, err := jetstream.New(testkit.Conn(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "work", Subjects: []string{"work.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(ctx, "work", jetstream.ConsumerConfig{Durable: "w", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	fetches := func() int { return 8 } // room for the message to come back, if it did
	p := pull.Start(cons, fetches, func(m jetstream.Msg) {
		mu.Lock()
		got = append(got, string(m.Data()))
		mu.Unlock()
		_ = pull.GiveBack(m)
	}, testkit.Logger(t))
	defer p.Stop()
	// The fetch is out once the consumer has a waiting pull request.
	testkit.WaitFor(t, 5*time.Second, func() error {
		ci, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if ci.NumWaiting == 0 {
			return testkit.Errorf("no pull request yet")
		}
		return nil
	})
	p.Signal()
	if _, err := js.Publish(ctx, "work.a", []byte("after the signal")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(got) == 0 {
			return testkit.Errorf("the message sent after the signal has not reached the callback")
		}
		return nil
	})
	p.Stop()
	// Given back, it is pending for the next consumer at once, not after the AckWait.
	ci, err := cons.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ci.NumPending+uint64(ci.NumRedelivered) == 0 && ci.NumAckPending == 0 {
		t.Fatalf("the message is gone: %+v", ci)
	}
	mu.Lock()
	defer mu.Unlock()
	// Given back once: not to this fetch again (each delivery counts as an
	// attempt of a batch).
	if len(got) != 1 || got[0] != "after the signal" {
		t.Fatalf("got %q", got)
	}
}
