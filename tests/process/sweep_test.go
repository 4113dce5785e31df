package process

import (
	"bytes"
	"encoding/json"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// requeueBound is how soon a job whose worker died must be back in its
// queue: the lease plus ten seconds (the lease sweeper looks every 3 s and
// allows commands.LeaseGrace of 2 s).
const requeueBound = 1*time.Second + 10*time.Second

// waitQueuedAfter waits until the job is queued again after a lost lease
// and fails if that took longer than requeueBound from since.
func (s *system) waitQueuedAfter(id string, since time.Time) *jetflow.JobInfo {
	s.t.Helper()
	ctx := testkit.Ctx(s.t)
	var j *jetflow.JobInfo
	testkit.WaitFor(s.t, 30*time.Second, func() error {
		var err error
		if j, err = s.client.Get(ctx, id); err != nil {
			return err
		}
		if j.State != jetflow.Queued || j.LeaseRequeues == 0 {
			return testkit.Errorf("job is %s under %q, lease requeues %d", j.State, j.Worker, j.LeaseRequeues)
		}
		return nil
	})
	if took := time.Since(since); took > requeueBound {
		s.t.Errorf("requeued %s after its worker died, more than the lease + 10 s", took.Round(time.Millisecond))
	}
	return j
}

// The only worker of a type is killed mid-job: no other worker will ever
// receive the job's work item again, yet the job does not stay running.
// The engine requeues it within the lease + 10 s, and a worker started
// later runs it.
func TestOnlyWorkerKilledJobIsRequeued(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	a := s.worker("A", nil)
	job := s.sleep(30)
	s.waitRunning(job.ID, "A")
	a.Kill(t)
	s.waitQueuedAfter(job.ID, time.Now())
	evs := s.wantEvents(job.ID, evSubmitted, evStarted, evRequeue)
	if got := actors(evs)[2]; got != "engine" {
		t.Fatalf("lease written off by %q, want the engine", got)
	}
	// The job waits in its queue; a worker that comes later runs it.
	s.worker("B", nil)
	s.waitRunning(job.ID, "B")
	if _, err := s.client.Cancel(testkit.Ctx(t), job.ID, "done testing"); err != nil {
		t.Fatal(err)
	}
	s.wantEvents(job.ID, evSubmitted, evStarted, evRequeue, evStarted, domain.EvCancelled)
	s.waitDrained("default")
	s.verify()
}

// max_lease_requeues spent with no worker left at all: the second worker
// is killed too, and the job fails (job.lease_expired) with nobody to
// claim it.
func TestLeaseBudgetSpentWithNoWorkerLeft(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	job := s.sleep(600, jetflow.MaxLeaseRequeues(1))
	a := s.worker("A", nil)
	s.waitRunning(job.ID, "A")
	a.Kill(t)
	s.waitQueuedAfter(job.ID, time.Now())
	b := s.worker("B", nil)
	s.waitRunning(job.ID, "B")
	b.Kill(t)
	killed := time.Now()
	done := testkit.WaitTerminal(t, s.client, job.ID, 30*time.Second)
	if took := time.Since(killed); took > requeueBound {
		t.Errorf("failed %s after the last worker died", took.Round(time.Millisecond))
	}
	wantLeaseExpired(t, done)
	evs := s.wantEvents(job.ID, evSubmitted, evStarted, evRequeue, evStarted, domain.EvLeaseExpired)
	if got := actors(evs); got[2] != "engine" || got[4] != "engine" {
		t.Fatalf("actors %v: the leases were written off by the engine", got)
	}
	s.verify()
}

// httpDo sends a JSON request to serve's HTTP API and decodes the answer.
func (s *system) httpDo(method, path string, body, out any) int {
	s.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, "http://"+s.http+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			s.t.Fatalf("%s %s: %d: %v", method, path, resp.StatusCode, err)
		}
	}
	return resp.StatusCode
}

// An HTTP worker claims a job, reports it running and goes silent, with no
// other worker of its type registered: the job is requeued within its
// lease (serve --http-lease 1s) + 10 s, and the silent worker's late
// report is refused.
func TestSilentHTTPWorkerJobIsRequeued(t *testing.T) {
	t.Parallel()
	s := startSystemHTTP(t, true)
	var wk struct {
		ID string `json:"id"`
	}
	if code := s.httpDo("POST", "/api/v1/workers", map[string]any{"name": "py", "types": []string{"t.x"}}, &wk); code != 201 {
		t.Fatalf("register: %d", code)
	}
	var job jetflow.JobInfo
	if code := s.httpDo("POST", "/api/v1/jobs", map[string]any{"type": "t.x", "queue": "gpu"}, &job); code != 201 {
		t.Fatalf("submit: %d", code)
	}
	// The worker named no queue: it serves t.x in every queue, gpu too.
	var claim struct {
		Job *jetflow.JobInfo `json:"job"`
	}
	if code := s.httpDo("POST", "/api/v1/tasks/claim", map[string]any{"worker_id": wk.ID, "wait": 10}, &claim); code != 200 ||
		claim.Job == nil || claim.Job.ID != job.ID {
		t.Fatalf("claim: %d %+v", code, claim.Job)
	}
	if code := s.httpDo("PATCH", "/api/v1/jobs/"+job.ID, map[string]any{"worker_id": wk.ID, "state": "running"}, nil); code != 200 {
		t.Fatalf("running: %d", code)
	}
	silent := time.Now()
	s.waitQueuedAfter(job.ID, silent)
	evs := s.wantEvents(job.ID, evSubmitted, domain.EvClaimed, evStarted, evRequeue)
	if got := actors(evs)[3]; got != "engine" {
		t.Fatalf("lease written off by %q, want the engine", got)
	}
	var problem struct {
		Type string `json:"type"`
	}
	if code := s.httpDo("PATCH", "/api/v1/jobs/"+job.ID, map[string]any{"worker_id": wk.ID, "state": "succeeded", "result": 1}, &problem); code != 409 ||
		problem.Type != "not-claimant" {
		t.Fatalf("late report: %d %+v", code, problem)
	}
	s.wantEvents(job.ID, evSubmitted, domain.EvClaimed, evStarted, evRequeue)
	s.verify()
}

// SIGTERM: a worker that is stopping starts nothing new. A job submitted
// after the signal, while the worker's running job has its grace period,
// is not started by it; another worker runs it. (The grace is 5x the
// running job's 2 s: with 4 s, a CI machine under load once saw the job
// requeued at the end of its grace.)
func TestStoppingWorkerStartsNothingNew(t *testing.T) {
	t.Parallel()
	s, a, first := stopWhileSleeping(t, 2, "--grace", "10s", "--lease", "30s", "--concurrency", "4")
	ctx := testkit.Ctx(t)
	var late []string
	for i := 0; i < 5; i++ {
		j, err := s.client.Submit(ctx, "demo.echo", map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		late = append(late, j.ID)
	}
	if code, sig := a.WaitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("worker exited with code %d (signal %v)", code, sig)
	}
	if done, err := s.client.Get(ctx, first.ID); err != nil || done.State != jetflow.Succeeded || done.Worker != "A" {
		t.Fatalf("the running job within its grace: %v %+v", err, done)
	}
	for _, id := range late {
		if j, err := s.client.Get(ctx, id); err != nil || j.State != jetflow.Queued {
			t.Fatalf("job submitted after the signal: %v %+v", err, j)
		}
	}
	s.worker("B", nil, "--lease", "30s")
	for _, id := range late {
		if done := testkit.WaitTerminal(t, s.client, id, 15*time.Second); done.State != jetflow.Succeeded || done.Worker != "B" {
			t.Fatalf("job %s: %s under %s", id, done.State, done.Worker)
		}
		s.wantEvents(id, evSubmitted, evStarted, evSucceeded)
	}
	s.waitDrained("default")
	s.verify()
}

// serve is SIGKILLed and restarted while two workers run jobs longer than
// their lease: the server may deliver their work items again (under load it
// did: engine.TestRedeliveryOfALiveHoldersJobWaits shows the rule), but
// their holders are alive and beating, so no lease is written off and no
// job starts twice.
func TestServeRestartTakesNoLiveLease(t *testing.T) {
	t.Parallel()
	s := startSystem(t)
	s.worker("A", nil, "--lease", "3s", "--concurrency", "2")
	s.worker("B", nil, "--lease", "3s", "--concurrency", "2")
	ctx := testkit.Ctx(t)
	var ids []string
	for i := 0; i < 4; i++ {
		j, err := s.client.Submit(ctx, "demo.sleep", map[string]float64{"seconds": 12})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		for _, id := range ids {
			j, err := s.client.Get(ctx, id)
			if err != nil {
				return err
			}
			if j.State != jetflow.Running {
				return testkit.Errorf("job %s is %s", id, j.State)
			}
		}
		return nil
	})
	// Past their first lease (renewed since) before serve dies.
	time.Sleep(4 * time.Second) // the load's shape, not a wait for a condition
	s.serve.Kill(t)
	s.startServe()
	for _, id := range ids {
		if done := testkit.WaitTerminal(t, s.client, id, 60*time.Second); done.State != jetflow.Succeeded || done.Attempts != 1 {
			t.Fatalf("job %s: %s after %d attempts", id, done.State, done.Attempts)
		}
		s.wantEvents(id, evSubmitted, evStarted, evSucceeded)
	}
	s.waitDrained("default")
	s.verify()
}

// A second signal skips what is left of the grace: the worker cancels its
// running handler at once, requeues the job (no retry spent) and exits 0.
func TestSecondSignalSkipsTheGrace(t *testing.T) {
	t.Parallel()
	s, a, job := stopWhileSleeping(t, 600, "--grace", "10m", "--lease", "30s")
	ctx := testkit.Ctx(t)
	a.Signal(t, syscall.SIGTERM)
	a.WaitOutput(t, 10*time.Second, "the grace is skipped")
	if code, sig := a.WaitExit(t, 30*time.Second); code != 0 {
		t.Fatalf("worker exited with code %d (signal %v)", code, sig)
	}
	if j, err := s.client.Get(ctx, job.ID); err != nil || j.State != jetflow.Queued || j.Retries != 0 {
		t.Fatalf("the job after the worker left: %v %+v", err, j)
	}
	s.wantEvents(job.ID, evSubmitted, evStarted, domain.EvRequeued)
}

// stopWhileSleeping starts a system and its worker A with args, has A run
// a demo.sleep job of seconds, and sends A SIGTERM once the job runs; it
// returns when A says it is stopping.
func stopWhileSleeping(t *testing.T, seconds float64, args ...string) (*system, *testkit.Proc, *jetflow.JobInfo) {
	t.Helper()
	s := startSystem(t)
	a := s.worker("A", nil, args...)
	job, err := s.client.Submit(testkit.Ctx(t), "demo.sleep", map[string]float64{"seconds": seconds})
	if err != nil {
		t.Fatal(err)
	}
	s.waitRunning(job.ID, "A")
	a.Signal(t, syscall.SIGTERM)
	a.WaitOutput(t, 10*time.Second, "worker A stopping")
	return s, a, job
}
