package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// racerEnv makes the test binary a racer: a worker process whose handler
// records each run in a file, for TestClaimRace16Processes.
const (
	racerEnv   = "JETFLOW_TEST_RACER"
	raceDirEnv = "JETFLOW_TEST_RACE_DIR"
	raceQueue  = "race"
	raceType   = "race.job"
)

// racer runs a worker for raceType until SIGTERM. Its handler appends the
// worker's id to <dir>/runs and holds the job until <dir>/release exists,
// so that the other racers' copies of the work item arrive while it runs.
func racer() int {
	id, dir := os.Getenv(racerEnv), os.Getenv(raceDirEnv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	client, err := jetflow.Connect(cctx, os.Getenv("JETFLOW_NATS"), jetflow.ClientOptions{Name: id})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer client.Close()
	w := jetflow.NewWorker(client, jetflow.WorkerConfig{ID: id,
		Queues: map[string]jetflow.QueueConfig{raceQueue: {Concurrency: 1, Lease: 10 * time.Second}}})
	jetflow.Register(w, raceType, func(ctx context.Context, job *jetflow.Job[struct{}]) (string, error) {
		f, err := os.OpenFile(filepath.Join(dir, "runs"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return "", err
		}
		_, err = fmt.Fprintln(f, id)
		f.Close()
		if err != nil {
			return "", err
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "release")); err == nil {
				return "won by " + id, nil
			}
			select {
			case <-ctx.Done():
				return "", context.Cause(ctx)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}, jetflow.OnQueue(raceQueue))
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("racer %s ready\n", id)
	<-ctx.Done()
	w.Stop(context.Background())
	return 0
}

// Sixteen worker processes, each handed its own copy of one job's work item
// at the same moment (a paused queue, resumed once all sixteen wait): one
// job.started is written, the handler runs once, the fifteen copies are
// dropped.
func TestClaimRace16Processes(t *testing.T) {
	s := startSystem(t)
	ctx := testkit.Ctx(t)
	st := testkit.StoreOf(t, s.client)
	dir := t.TempDir()
	if err := st.Queues.Ensure(ctx, raceQueue); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SetQueuePaused(ctx, raceQueue, true); err != nil {
		t.Fatal(err)
	}
	job, err := s.client.Submit(ctx, raceType, nil, jetflow.Queue(raceQueue))
	if err != nil {
		t.Fatal(err)
	}
	// Fifteen more copies of its work item, as a repair or a redelivery can
	// leave (published without a message id, so the stream keeps them all).
	snap, err := st.Record(ctx, job.ID)
	if err != nil {
		t.Fatal(err)
	}
	item, err := streams.Marshal(&domain.WorkItem{Rev: snap.Rev, Job: *snap.Job})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 15; i++ {
		if _, err := st.JS.Publish(ctx, streams.RunSubject(raceQueue, raceType), item); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	racers := make([]*testkit.Proc, 16)
	for i := range racers {
		id := fmt.Sprintf("racer%02d", i)
		racers[i] = testkit.StartProc(t, id, []string{racerEnv + "=" + id, raceDirEnv + "=" + dir, "JETFLOW_NATS=" + s.url}, self)
	}
	for _, r := range racers {
		r.WaitOutput(t, 30*time.Second, "ready")
	}
	cons, err := st.JS.Consumer(ctx, streams.QueueStream(raceQueue), engine.ConsumerName(raceType))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumWaiting < 16 || info.NumPending != 16 {
			return testkit.Errorf("%d racers waiting, %d items pending", info.NumWaiting, info.NumPending)
		}
		return nil
	})
	if _, err := st.SetQueuePaused(ctx, raceQueue, false); err != nil {
		t.Fatal(err)
	}
	// All copies but the winner's are dropped while the winner holds the job.
	qs, err := st.JS.Stream(ctx, streams.QueueStream(raceQueue))
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		info, err := qs.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 1 {
			return testkit.Errorf("%d work items left", info.State.Msgs)
		}
		return nil
	})
	held, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if held.Delivered.Consumer < 16 {
		t.Fatalf("only %d deliveries: the copies did not all race", held.Delivered.Consumer)
	}
	if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	done := testkit.WaitTerminal(t, s.client, job.ID, 20*time.Second)
	runs, err := os.ReadFile(filepath.Join(dir, "runs"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	lines := strings.Fields(string(runs))
	if len(lines) != 1 || done.State != jetflow.Succeeded || done.Worker != lines[0] || string(done.Result) != `"won by `+lines[0]+`"` {
		t.Fatalf("handler runs %v; job %s under %s, result %s", lines, done.State, done.Worker, done.Result)
	}
	s.wantEvents(job.ID, evSubmitted, evStarted, evSucceeded)
	s.verify()
}
