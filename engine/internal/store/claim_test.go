package store_test

import (
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/natsserver"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/engine/internal/storetest"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// A claim whose answer was lost is read back from the log. When the server
// is away for longer than a lease (a restart of serve that takes a while),
// the read-back waits for it to come back instead of giving the item up:
// the claim landed, the worker's heartbeats list the job, and giving it up
// would leave the job to run out its lease under a live worker (the long
// sync-always soak's lost lease). Before the fix the read-back gave up
// once a lease had passed, here after 500 ms, while the server was down.
// Once the server is back, the claim is run only after a heartbeat of the
// worker lists the job: its lease, counted from the claim, ran out.
func TestClaimReadBackOutlastsAServerRestart(t *testing.T) {
	dir, addr := t.TempDir(), testkit.FreeAddr(t)
	start := func() *server.Server {
		srv, err := natsserver.Start(natsserver.Config{Dir: dir, Listen: addr, Name: "readback"})
		if err != nil {
			t.Fatal(err)
		}
		return srv
	}
	srv := start()
	nc, err := nats.Connect("nats://"+addr, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st := storetest.Open(t, nc, "test")
	ctx := testkit.Ctx(t)
	sub, err := st.Submit(ctx, &commands.SubmitRequest{Type: "readback"})
	if err != nil {
		t.Fatal(err)
	}
	const worker, item = "w1", uint64(1)
	if _, _, err := st.Apply(ctx, "claim", sub.Snapshot, func(j *domain.Job) (*domain.Event, error) {
		return commands.Start(j, worker, item, time.Now().UTC())
	}); err != nil {
		t.Fatal(err)
	}

	srv.Shutdown()
	srv.WaitForShutdown()
	type answer struct {
		snap store.Snapshot
		ok   bool
	}
	got := make(chan answer, 1)
	go func() {
		snap, ok := store.HeldAfterError(st, ctx, sub.Job, worker, item, 500*time.Millisecond, time.Minute)
		got <- answer{snap, ok}
	}()
	// Away for longer than the lease, and than a request's own timeout.
	select {
	case a := <-got:
		t.Fatalf("read back while the server was down: ok %v", a.ok)
	case <-time.After(6 * time.Second):
	}
	srv = start()
	defer func() { srv.Shutdown(); srv.WaitForShutdown() }()
	// Once the job can be read again, the read-back reads it at least
	// twice in 2 s (its pauses are at most 1 s), and must not take it.
	testkit.WaitFor(t, 20*time.Second, func() error {
		_, err := st.Current(ctx, sub.Job.ID)
		return err
	})
	select {
	case a := <-got:
		t.Fatalf("a claim whose lease ran out taken before a heartbeat listed it: ok %v", a.ok)
	case <-time.After(2 * time.Second):
	}
	// The worker beats, every lease/3 as a runtime does, listing the job.
	beats, stop := make(chan struct{}), make(chan struct{})
	defer close(stop)
	go func() {
		var once sync.Once
		for {
			if err := st.Workers().Put(ctx, &domain.WorkerRecord{ID: worker, Claims: []string{sub.Job.ID}}); err == nil {
				once.Do(func() { close(beats) })
			}
			select {
			case <-stop:
				return
			case <-time.After(150 * time.Millisecond):
			}
		}
	}()
	select {
	case <-beats:
	case <-time.After(10 * time.Second):
		t.Fatal("no heartbeat written")
	}
	select {
	case a := <-got:
		if !a.ok || a.snap.Job == nil || a.snap.Job.Worker != worker || a.snap.Job.State != domain.StateRunning {
			t.Fatalf("the claim that landed was not read back: ok %v, %+v", a.ok, a.snap.Job)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no answer 20 s after the heartbeat")
	}
}
