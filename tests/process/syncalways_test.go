package process

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// startSyncAlways is startSystem with serve --sync always: the log's
// appends are group-committed, the jobs bucket and the queue streams
// persist asynchronously.
func startSyncAlways(t *testing.T) *system {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	s := &system{t: t, addr: testkit.FreeAddr(t), data: t.TempDir()}
	s.url = "nats://" + s.addr
	s.startServeSync()
	s.client = testkit.Connect(t, s.url)
	ctx := testkit.Ctx(t)
	evs, err := testkit.StoreOf(t, s.client).JS.Stream(ctx, streams.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if got := evs.CachedInfo().Config.Metadata[streams.SyncMetadata]; got != streams.SyncAlways {
		t.Fatalf("the log records sync %q, want always", got)
	}
	// A process that was not told the mode takes it from the log.
	if st := testkit.StoreOf(t, s.client); st.Topo.Sync != streams.SyncAlways || st.GroupCommit() == nil {
		t.Fatalf("the client's store: sync %q, group commit %v", st.Topo.Sync, st.GroupCommit())
	}
	return s
}

func (s *system) startServeSync() {
	s.t.Helper()
	s.serve = testkit.StartProc(s.t, "serve", nil, binary, "serve", "--data", s.data, "--nats-listen", s.addr,
		"--projector-lag", "300ms", "--http", "off", "--sync", "always")
	s.serve.WaitOutput(s.t, 30*time.Second, "jetflow is running")
}

// serve --sync always killed (SIGKILL: the embedded server with it) while
// jobs are submitted and run, and fan-outs' batches run: every job whose
// submit was acknowledged is in the log after the restart and succeeds,
// whatever the jobs bucket and the queue stream (asynchronous) lost, each
// fan-out runs all its batches (their stream fsyncs), and the state rebuilt
// from the log equals the bucket.
func TestSyncAlwaysServeKilled(t *testing.T) {
	s := startSyncAlways(t)
	s.worker("B", nil, "--concurrency", "8")
	var fans []string
	for range 2 {
		job, err := s.client.Submit(testkit.Ctx(t), "demo.fanout", map[string]int{"batches": 300, "batch_ms": 50})
		if err != nil {
			t.Fatal(err)
		}
		fans = append(fans, job.ID)
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		for _, id := range fans {
			j, err := s.client.Get(testkit.Ctx(t), id)
			if err != nil {
				return err
			}
			if j.State != jetflow.Waiting {
				return testkit.Errorf("fan-out %s is %s", id, j.State)
			}
		}
		return nil
	})

	ctx, stop := context.WithCancel(testkit.Ctx(t))
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				job, err := s.client.Submit(sctx, "demo.echo", map[string]int{"g": g, "i": i})
				cancel()
				if err != nil {
					continue // not acknowledged: it may or may not be in the log
				}
				mu.Lock()
				acked = append(acked, job.ID)
				mu.Unlock()
			}
		}()
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(acked) < 200 {
			return testkit.Errorf("%d submits acknowledged", len(acked))
		}
		return nil
	})
	// 600 batches of 50 ms on 8 slots take about 4 s: they are running.
	for _, id := range fans {
		if j, err := s.client.Get(ctx, id); err != nil || j.State != jetflow.Waiting {
			t.Fatalf("fan-out %s before the kill: %v %v (its batches ran before the submits)", id, j, err)
		}
	}
	s.serve.Kill(t)
	wantKilled(t, s.serve)
	stop()
	wg.Wait()

	s.startServeSync()
	mu.Lock()
	ids := append([]string(nil), acked...)
	mu.Unlock()
	for _, id := range ids {
		done := testkit.WaitTerminal(t, s.client, id, 60*time.Second)
		if done.State != jetflow.Succeeded {
			t.Fatalf("job %s ended %s (%+v)", id, done.State, done.Error)
		}
	}
	for _, id := range fans {
		done := testkit.WaitTerminal(t, s.client, id, 60*time.Second)
		if done.State != jetflow.Succeeded || done.Fanout == nil || done.Fanout.Succeeded != 300 || done.Fanout.Total != 300 {
			t.Fatalf("fan-out %s ended %s (%+v), its batches %+v", id, done.State, done.Error, done.Fanout)
		}
	}
	s.waitDrained("default")
	s.verify()
}

// The CLI killed after its job.submitted is in the log under sync always
// (the append went through the group commit): the projector builds the
// record and sends the work item, and the job runs once.
func TestSyncAlwaysSubmitCrashPoint(t *testing.T) {
	s := startSyncAlways(t)
	s.worker("B", nil)
	const key = "order-43"
	_, sig, out := s.cli([]string{"JETFLOW_CRASH_AT=submit:appended"}, "submit", "demo.echo", `{"order":43}`, "--key", key)
	if sig != syscall.SIGKILL {
		t.Fatalf("submit was not killed at submit:appended:\n%s", out)
	}
	id := domain.KeyedID(domain.DefaultNS, key)
	done := testkit.WaitTerminal(t, s.client, id, 30*time.Second)
	if done.State != jetflow.Succeeded || string(done.Result) != `{"order":43}` {
		t.Fatalf("job %+v", done)
	}
	s.wantEvents(id, evSubmitted, evStarted, evSucceeded)
	s.waitDrained("default")
	s.verify()
}
