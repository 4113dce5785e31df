package process

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// Quotas across real processes: a slot is given back when the worker
// holding it is SIGKILLed (and kept while the job is requeued), the slot
// counts survive a SIGKILL of the engine that admits (rebuilt from the log
// by the next one), and two engines sharing one NATS system keep one limit
// while the leading one is SIGKILLed mid-run.

const quotaQueue = "quota"

// recordLag is how long the jobs bucket may show more slots held than the
// limits. A record follows its event: a writer appends, then writes the
// record (or, if it died between the two, the projector does, after its
// lag of 300 ms), so the record of a job that ended may land after the
// record of the job admitted into its slot. The log is never over.
const recordLag = 2 * time.Second

// slotFold is a queue's jobs as one source tells them, the most slots it
// ever showed held at once, in all and by one user, and the times it
// showed more than the limits.
type slotFold struct {
	name              string
	state             map[string]domain.State
	user              map[string]string
	maxTotal, maxUser int

	over     time.Time // since when it shows more than the limits (zero: it does not)
	overWhat string
	overs    int           // times it went over
	longest  time.Duration // the longest it stayed over
	reported bool
}

func newSlotFold(name string) slotFold {
	return slotFold{name: name, state: map[string]domain.State{}, user: map[string]string{}}
}

// holding counts the jobs holding a slot: queued (in a queue whose limits
// were set before its first job, every queued job was admitted), claimed or
// running.
func (f *slotFold) holding() (total int, byUser map[string]int) {
	byUser = map[string]int{}
	for id, s := range f.state {
		if s == domain.StateQueued || s == domain.StateClaimed || s == domain.StateRunning {
			total++
			byUser[f.user[id]]++
		}
	}
	return total, byUser
}

// slotWatch follows a queue's slots three ways and fails the test whenever
// one shows more held than the queue's limits: the log (each event of the
// queue folded in order, so every state the log went through: the truth
// the admitter must go by, not its word), the jobs bucket (each revision of
// the queue's records, in order), and the leading admitter's own counts
// (asked every 50 ms).
type slotWatch struct {
	t     *testing.T
	queue string
	lim   jetflow.QueueLimits

	mu      sync.Mutex
	log, kv slotFold
	asked   int // answers of an admitter

	stopOnce sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

func watchSlots(t *testing.T, s *system, queue string, lim jetflow.QueueLimits) *slotWatch {
	t.Helper()
	st := testkit.StoreOf(t, s.client)
	ctx, cancel := context.WithCancel(context.Background())
	w := &slotWatch{t: t, queue: queue, lim: lim, log: newSlotFold("log"), kv: newSlotFold("jobs bucket"), cancel: cancel}
	t.Cleanup(w.stop)

	cons, err := st.Events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{streams.EventsPrefix + ".*." + queue + ".>"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		ev, err := streams.DecodeEvent(m.Data())
		if err != nil {
			w.t.Errorf("event %s: %v", m.Subject(), err)
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		if ev.Spec != nil {
			w.log.user[ev.JobID] = ev.Spec.User
		}
		if ev.To != domain.StateNew {
			w.check(&w.log, ev.JobID, ev.To, fmt.Sprintf("%s of %s", ev.Type, ev.JobID))
		}
	})
	if err != nil {
		t.Fatal(err)
	}

	kw, err := st.KV.WatchAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w.wg.Add(2)
	go func() {
		defer w.wg.Done()
		<-ctx.Done()
		cc.Stop()
		_ = kw.Stop()
	}()
	go func() {
		defer w.wg.Done()
		for e := range kw.Updates() {
			if e == nil {
				continue // the initial values are in
			}
			w.mu.Lock()
			if e.Operation() != jetstream.KeyValuePut {
				delete(w.kv.state, e.Key())
			} else if j, err := streams.DecodeJob(e.Value()); err == nil && j.Spec.Queue == queue {
				w.kv.user[j.ID] = j.Spec.User
				w.check(&w.kv, j.ID, j.State, fmt.Sprintf("record of %s (revision %d)", j.ID, e.Revision()))
			}
			w.mu.Unlock()
		}
	}()

	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			w.mu.Lock()
			if f := &w.kv; !f.over.IsZero() && time.Since(f.over) > recordLag && !f.reported {
				f.reported = true
				w.t.Errorf("%s: more slots held than the limits for %s, since %s", f.name, time.Since(f.over).Round(time.Millisecond), f.overWhat)
			}
			w.mu.Unlock()
			counts, err := st.AdmissionCountsOf(ctx, queue)
			if err != nil {
				continue // no leader, or it is rebuilding
			}
			c, ok := counts[queue]
			if !ok {
				continue // the admitter does not know of the limits yet
			}
			w.mu.Lock()
			w.asked++
			if lim.MaxRunning > 0 && c.Holding > lim.MaxRunning {
				w.t.Errorf("the admitter says queue %s holds %d slots: limit %d", queue, c.Holding, lim.MaxRunning)
			}
			for u, uc := range c.Users {
				if lim.MaxRunningPerUser > 0 && uc.Holding > lim.MaxRunningPerUser {
					w.t.Errorf("the admitter says user %q holds %d slots: limit %d", u, uc.Holding, lim.MaxRunningPerUser)
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// check sets a job's state in f and notes whether the queue or a user now
// holds more slots than its limits: in the log, that fails the test at
// once; in the jobs bucket, if it lasts longer than recordLag (the
// sampler's look). w.mu is held.
func (w *slotWatch) check(f *slotFold, id string, s domain.State, what string) {
	f.state[id] = s
	total, byUser := f.holding()
	f.maxTotal = max(f.maxTotal, total)
	var over []string
	if w.lim.MaxRunning > 0 && total > w.lim.MaxRunning {
		over = append(over, fmt.Sprintf("%d jobs hold a slot: limit %d", total, w.lim.MaxRunning))
	}
	for u, n := range byUser {
		f.maxUser = max(f.maxUser, n)
		if w.lim.MaxRunningPerUser > 0 && n > w.lim.MaxRunningPerUser {
			over = append(over, fmt.Sprintf("user %q holds %d slots: limit %d", u, n, w.lim.MaxRunningPerUser))
		}
	}
	switch {
	case len(over) > 0 && f == &w.log:
		w.t.Errorf("%s: after the %s, %s", f.name, what, strings.Join(over, "; "))
	case len(over) > 0 && f.over.IsZero():
		f.over, f.overWhat = time.Now(), fmt.Sprintf("the %s: %s", what, strings.Join(over, "; "))
		f.overs++
	case len(over) == 0 && !f.over.IsZero():
		f.longest = max(f.longest, time.Since(f.over))
		f.over = time.Time{}
	}
}

func (w *slotWatch) stop() {
	w.stopOnce.Do(func() {
		w.cancel()
		w.wg.Wait()
	})
}

// answers is how many times an admitter answered so far.
func (w *slotWatch) answers() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.asked
}

// peakUser is the most slots one user held at once in the log so far.
func (w *slotWatch) peakUser() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.maxUser
}

// wantMax waits until the jobs bucket has caught up with the log (every
// job of the queue in the same state in both), stops the watch, and fails
// unless the log showed exactly these most slots held at once, in all and
// by one user (the limits were reached, so the test tested them; that they
// were never passed was checked all along), and the jobs bucket at least
// as many, and more only for a moment.
func (w *slotWatch) wantMax(total, user int) {
	w.t.Helper()
	testkit.WaitFor(w.t, 10*time.Second, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		if len(w.kv.state) != len(w.log.state) {
			return testkit.Errorf("%d jobs in the jobs bucket, %d in the log", len(w.kv.state), len(w.log.state))
		}
		for id, s := range w.log.state {
			if w.kv.state[id] != s {
				return testkit.Errorf("job %s is %s in the jobs bucket, %s in the log", id, w.kv.state[id], s)
			}
		}
		return nil
	})
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := &w.log; f.maxTotal != total || f.maxUser != user {
		w.t.Errorf("%s: at most %d slots held at once, %d by one user; want %d and %d", f.name, f.maxTotal, f.maxUser, total, user)
	}
	f := &w.kv
	if f.maxTotal < total || f.maxUser < user {
		w.t.Errorf("%s: at most %d slots held at once, %d by one user; want at least %d and %d", f.name, f.maxTotal, f.maxUser, total, user)
	}
	if !f.over.IsZero() {
		w.t.Errorf("%s: more slots held than the limits at the end, since %s", f.name, f.overWhat)
	}
	w.t.Logf("at most %d slots held at once in the log, %d by one user; %s: %d and %d, over the limits %d times while records caught up with the log, at most for %s",
		w.log.maxTotal, w.log.maxUser, f.name, f.maxTotal, f.maxUser, f.overs, f.longest.Round(time.Millisecond))
}

// setLimits sets the queue's limits and waits until the leading admitter
// follows the queue, so that no job is submitted before it can be held.
func (s *system) setLimits(queue string, lim jetflow.QueueLimits) {
	s.t.Helper()
	ctx := testkit.Ctx(s.t)
	if err := s.client.SetQueueLimits(ctx, queue, lim); err != nil {
		s.t.Fatal(err)
	}
	s.waitCounts(queue, 0, 0, nil, 30*time.Second)
}

// waitCounts waits until the leading admitter counts exactly holding jobs
// holding a slot and pending waiting for one in queue, and, if users is
// not nil, exactly these by user.
func (s *system) waitCounts(queue string, holding, pending int, users map[string]commands.Count, timeout time.Duration) {
	s.t.Helper()
	st := testkit.StoreOf(s.t, s.client)
	ctx := testkit.Ctx(s.t)
	testkit.WaitFor(s.t, timeout, func() error {
		counts, err := st.AdmissionCountsOf(ctx, queue)
		if err != nil {
			return err
		}
		c, ok := counts[queue]
		if !ok {
			return testkit.Errorf("the admitter does not follow queue %s: %v", queue, counts)
		}
		if c.Holding != holding || c.Pending != pending {
			return testkit.Errorf("the admitter counts %d holding, %d pending; want %d, %d", c.Holding, c.Pending, holding, pending)
		}
		if users != nil && fmt.Sprint(c.Users) != fmt.Sprint(users) {
			return testkit.Errorf("the admitter counts by user %v; want %v", c.Users, users)
		}
		return nil
	})
}

// waitState waits until the job's record is in state.
func (s *system) waitState(id string, state jetflow.State) {
	s.t.Helper()
	ctx := testkit.Ctx(s.t)
	testkit.WaitFor(s.t, 20*time.Second, func() error {
		j, err := s.client.Get(ctx, id)
		if err != nil {
			return err
		}
		if j.State != state {
			return testkit.Errorf("job %s is %s, want %s", id, j.State, state)
		}
		return nil
	})
}

// waitHeld waits until the pending job's record says why it waits (the
// admitter wrote job.pending).
func (s *system) waitHeld(id string) {
	s.t.Helper()
	ctx := testkit.Ctx(s.t)
	testkit.WaitFor(s.t, 20*time.Second, func() error {
		snap, err := testkit.StoreOf(s.t, s.client).Record(ctx, id)
		if err != nil {
			return err
		}
		if snap.Job.State != domain.StatePending || snap.Job.Hold == nil {
			return testkit.Errorf("job %s is %s, hold %+v", id, snap.Job.State, snap.Job.Hold)
		}
		return nil
	})
}

// wantState fails unless the job's record is in state now.
func (s *system) wantState(id string, state jetflow.State) {
	s.t.Helper()
	j, err := s.client.Get(testkit.Ctx(s.t), id)
	if err != nil {
		s.t.Fatal(err)
	}
	if j.State != state {
		s.t.Fatalf("job %s is %s, want %s", id, j.State, state)
	}
}

// stateEvents is a job's history without annotations (job.pending on a
// pending job: why it waits, written as often as the reason changes).
func (s *system) stateEvents(id string) []*jetflow.EventInfo {
	s.t.Helper()
	evs, err := s.client.Events(testkit.Ctx(s.t), id)
	if err != nil {
		s.t.Fatal(err)
	}
	var out []*jetflow.EventInfo
	for _, e := range evs {
		if e.To != "" {
			out = append(out, e)
		}
	}
	return out
}

// wantStateEvents fails unless the job's state changes are exactly these
// event types, and returns them.
func (s *system) wantStateEvents(id string, want ...string) []*jetflow.EventInfo {
	s.t.Helper()
	evs := s.stateEvents(id)
	got := make([]string, len(evs))
	for i, e := range evs {
		got[i] = e.Type
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		s.t.Fatalf("state changes of %s:\n got  %v\n want %v", id, got, want)
	}
	return evs
}

// verifySlots is verify, and fails unless an admitter answered and agreed
// with the slot counts rebuilt from the log.
func (s *system) verifySlots() {
	s.t.Helper()
	code, _, out := s.cli(nil, "replay", "--verify")
	if code != 0 || !strings.Contains(out, "the admitter agrees") {
		s.t.Fatalf("replay --verify exited %d:\n%s", code, out)
	}
}

// submitIn submits demo.sleep of that many seconds to queue for user.
func (s *system) submitIn(queue, user string, seconds float64, opts ...jetflow.SubmitOption) *jetflow.JobInfo {
	s.t.Helper()
	job := s.sleep(seconds, append([]jetflow.SubmitOption{jetflow.Queue(queue), jetflow.User(user)}, opts...)...)
	// Pending, or already admitted: an admitter that reads the submit from
	// the log before the submitter wrote the record admits it from the log
	// (the events of each test say it went through admission).
	if job.State != jetflow.Pending && job.State != jetflow.Queued && job.State != jetflow.Running {
		s.t.Fatalf("job %s submitted to a queue with limits is %s, want pending (or admitted)", job.ID, job.State)
	}
	return job
}

// startOnNATS starts a NATS server in the test process, which outlives
// every jetflow process of the test, and a client of it; engines are
// started with startEngine.
func startOnNATS(t *testing.T) *system {
	t.Helper()
	if testing.Short() {
		t.Skip("starts processes")
	}
	srv := testkit.Server(t, "127.0.0.1:-1")
	return &system{t: t, url: srv.ClientURL()}
}

// startEngine starts `jetflow serve --nats` on the system's NATS server,
// without HTTP, and waits until it runs.
func (s *system) startEngine(name string) *testkit.Proc {
	s.t.Helper()
	p := s.startEngineEnv(name, nil)
	p.WaitOutput(s.t, 30*time.Second, "jetflow is running")
	if s.client == nil {
		s.client = testkit.Connect(s.t, s.url)
	}
	return p
}

// startEngineEnv starts `jetflow serve --nats` as startEngine does, with
// env added to its environment, and does not wait for it (one started
// with a crash point may be gone before it says it runs).
func (s *system) startEngineEnv(name string, env []string) *testkit.Proc {
	s.t.Helper()
	return testkit.StartProc(s.t, name, env, binary, "serve", "--nats", s.url, "--http", "off", "--projector-lag", "300ms")
}

// leaderOf waits until one of engines leads and returns it.
func (s *system) leaderOf(engines ...*testkit.Proc) *testkit.Proc {
	s.t.Helper()
	ctx := testkit.Ctx(s.t)
	host, err := os.Hostname()
	if err != nil {
		s.t.Fatal(err)
	}
	var leader *testkit.Proc
	testkit.WaitFor(s.t, 30*time.Second, func() error {
		kv, err := testkit.StoreOf(s.t, s.client).JS.KeyValue(ctx, engine.LeaderBucket)
		if err != nil {
			return err
		}
		e, err := kv.Get(ctx, "engine")
		if err != nil {
			return err
		}
		for _, p := range engines {
			// The engine's id: engine-<host>-<pid>-<term suffix>.
			if strings.HasPrefix(string(e.Value()), fmt.Sprintf("engine-%s-%d-", host, p.Cmd.Process.Pid)) && !p.Exited() {
				leader = p
				return nil
			}
		}
		return testkit.Errorf("the leader is %q, none of the engines", e.Value())
	})
	return leader
}

// A worker SIGKILLed while its job holds the queue's only slot: with no
// lease requeue left the job fails LEASE_EXPIRED within its lease and the
// sweep, and its slot goes to the pending job; with one left, the job is
// requeued holding its slot, the pending job waits until it has finished.
func TestQuotaSlotOfKilledWorker(t *testing.T) {
	lim := jetflow.QueueLimits{MaxRunning: 1}
	const lease = 3 * time.Second

	t.Run("no-requeue-left", func(t *testing.T) {
		t.Parallel()
		s := startSystem(t)
		s.setLimits(quotaQueue, lim)
		w := watchSlots(t, s, quotaQueue, lim)
		a := s.submitIn(quotaQueue, "ann", 600, jetflow.MaxLeaseRequeues(0))
		s.waitState(a.ID, jetflow.Queued) // admitted: A has the slot before B exists
		b := s.submitIn(quotaQueue, "bob", 0.2)
		w1 := s.worker("W1", nil, "--lease", lease.String())
		s.waitRunning(a.ID, "W1")
		s.waitCounts(quotaQueue, 1, 1, map[string]commands.Count{commands.SlotUser(domain.DefaultNS, "ann"): {Holding: 1}, commands.SlotUser(domain.DefaultNS, "bob"): {Pending: 1}}, 20*time.Second)
		s.wantState(b.ID, jetflow.Pending)

		w1.Kill(t)
		killed := time.Now()
		done := testkit.WaitTerminal(t, s.client, a.ID, lease+10*time.Second)
		took := time.Since(killed)
		if done.State != jetflow.Failed || done.Error == nil || done.Error.Code != "LEASE_EXPIRED" || done.LeaseRequeues != 0 {
			t.Fatalf("job A %s, error %+v, lease requeues %d", done.State, done.Error, done.LeaseRequeues)
		}
		t.Logf("job A failed LEASE_EXPIRED %s after its worker's SIGKILL", took.Round(time.Millisecond))

		s.worker("W2", nil, "--lease", lease.String())
		if done := testkit.WaitTerminal(t, s.client, b.ID, 20*time.Second); done.State != jetflow.Succeeded || done.Worker != "W2" {
			t.Fatalf("job B %s under %q", done.State, done.Worker)
		}
		evA := s.wantStateEvents(a.ID, evSubmitted, domain.EvAdmitted, evStarted, domain.EvLeaseExpired)
		evB := s.wantStateEvents(b.ID, evSubmitted, domain.EvAdmitted, evStarted, evSucceeded)
		if evB[1].Seq < evA[3].Seq {
			t.Fatalf("B admitted at seq %d, before A gave its slot back at seq %d", evB[1].Seq, evA[3].Seq)
		}
		w.wantMax(1, 1)
		s.waitCounts(quotaQueue, 0, 0, nil, 10*time.Second)
		s.waitDrained(quotaQueue)
		s.verifySlots()
	})

	t.Run("requeue-left", func(t *testing.T) {
		t.Parallel()
		s := startSystem(t)
		s.setLimits(quotaQueue, lim)
		w := watchSlots(t, s, quotaQueue, lim)
		a := s.submitIn(quotaQueue, "ann", 3, jetflow.MaxLeaseRequeues(1))
		s.waitState(a.ID, jetflow.Queued)
		b := s.submitIn(quotaQueue, "bob", 0.2)
		w1 := s.worker("W1", nil, "--lease", lease.String())
		s.waitRunning(a.ID, "W1")
		w1.Kill(t)
		s.worker("W2", nil, "--lease", lease.String())
		s.waitRunning(a.ID, "W2")
		// Requeued and running again: it kept its slot all along (the
		// watch saw no second job holding one), B waits.
		s.wantState(b.ID, jetflow.Pending)
		s.waitCounts(quotaQueue, 1, 1, map[string]commands.Count{commands.SlotUser(domain.DefaultNS, "ann"): {Holding: 1}, commands.SlotUser(domain.DefaultNS, "bob"): {Pending: 1}}, 20*time.Second)

		done := testkit.WaitTerminal(t, s.client, a.ID, 20*time.Second)
		if done.State != jetflow.Succeeded || done.Worker != "W2" || done.Attempts != 2 || done.LeaseRequeues != 1 {
			t.Fatalf("job A %s under %q, attempts %d, lease requeues %d", done.State, done.Worker, done.Attempts, done.LeaseRequeues)
		}
		if done := testkit.WaitTerminal(t, s.client, b.ID, 20*time.Second); done.State != jetflow.Succeeded || done.Worker != "W2" {
			t.Fatalf("job B %s under %q", done.State, done.Worker)
		}
		evA := s.wantStateEvents(a.ID, evSubmitted, domain.EvAdmitted, evStarted, evRequeue, evStarted, evSucceeded)
		evB := s.wantStateEvents(b.ID, evSubmitted, domain.EvAdmitted, evStarted, evSucceeded)
		if evB[1].Seq < evA[5].Seq {
			t.Fatalf("B admitted at seq %d, before A finished at seq %d", evB[1].Seq, evA[5].Seq)
		}
		w.wantMax(1, 1)
		s.waitCounts(quotaQueue, 0, 0, nil, 10*time.Second)
		s.waitDrained(quotaQueue)
		s.verifySlots()
	})
}

// The engine that admits SIGKILLed while a job holds the queue's only slot
// and another waits (NATS and the worker live on): the engine started in
// its place rebuilds the counts from the log, keeps the waiting job
// pending while the first runs, and admits it once the first has ended.
func TestQuotaSlotsSurviveEngineKill(t *testing.T) {
	t.Parallel()
	s := startOnNATS(t)
	first := s.startEngine("serve 1")
	lim := jetflow.QueueLimits{MaxRunning: 1}
	s.setLimits(quotaQueue, lim)
	w := watchSlots(t, s, quotaQueue, lim)
	a := s.submitIn(quotaQueue, "ann", 600)
	s.waitState(a.ID, jetflow.Queued)
	b := s.submitIn(quotaQueue, "bob", 0.2)
	s.worker("W1", nil, "--lease", "3s", "--concurrency", "4")
	s.waitRunning(a.ID, "W1")
	want := map[string]commands.Count{commands.SlotUser(domain.DefaultNS, "ann"): {Holding: 1}, commands.SlotUser(domain.DefaultNS, "bob"): {Pending: 1}}
	s.waitCounts(quotaQueue, 1, 1, want, 20*time.Second)

	// B's last event is the job.pending that says why it waits: the next
	// admitter, reading each job's last event, learns of B from it.
	s.waitHeld(b.ID)
	first.Kill(t)
	second := s.startEngine("serve 2")
	if s.leaderOf(first, second) != second {
		t.Fatal("the second engine does not lead")
	}
	// The second engine's admitter, from the log alone: A holds the slot,
	// B waits. It answers for a while (a second of samples) and admits
	// nothing while A runs.
	s.waitCounts(quotaQueue, 1, 1, want, 30*time.Second)
	seen := w.answers()
	testkit.WaitFor(t, 20*time.Second, func() error {
		if n := w.answers() - seen; n < 20 {
			return testkit.Errorf("%d answers of the second admitter", n)
		}
		return nil
	})
	s.wantState(a.ID, jetflow.Running)
	s.wantState(b.ID, jetflow.Pending)

	if _, err := s.client.Cancel(testkit.Ctx(t), a.ID, "test: the slot frees"); err != nil {
		t.Fatal(err)
	}
	if done := testkit.WaitTerminal(t, s.client, b.ID, 20*time.Second); done.State != jetflow.Succeeded || done.Worker != "W1" {
		t.Fatalf("job B %s under %q", done.State, done.Worker)
	}
	evA := s.wantStateEvents(a.ID, evSubmitted, domain.EvAdmitted, evStarted, evCancelled)
	evB := s.wantStateEvents(b.ID, evSubmitted, domain.EvAdmitted, evStarted, evSucceeded)
	if evB[1].Seq < evA[3].Seq {
		t.Fatalf("B admitted at seq %d, before A gave its slot back at seq %d", evB[1].Seq, evA[3].Seq)
	}
	if actor := fmt.Sprintf("-%d", second.Cmd.Process.Pid); !strings.HasSuffix(evB[1].Actor, actor) {
		t.Fatalf("B admitted by %q, not by the second engine", evB[1].Actor)
	}
	w.wantMax(1, 1)
	s.waitCounts(quotaQueue, 0, 0, nil, 10*time.Second)
	s.waitDrained(quotaQueue)
	s.verifySlots()
}

// Two engines on one NATS system keep one queue's limits (3 running, 2
// per user) for 3 users x 15 jobs on two workers of 8 handlers each, while
// the engine that leads (and admits) is SIGKILLed midway: the other takes
// over, every job succeeds, and no state of the log or the jobs bucket
// ever has more jobs holding a slot than the limits.
func TestQuotaTwoEnginesOneLimit(t *testing.T) {
	t.Parallel()
	s := startOnNATS(t)
	engines := []*testkit.Proc{s.startEngine("serve 1"), s.startEngine("serve 2")}
	lim := jetflow.QueueLimits{MaxRunning: 3, MaxRunningPerUser: 2}
	s.setLimits(quotaQueue, lim)
	w := watchSlots(t, s, quotaQueue, lim)
	s.worker("W1", nil, "--lease", "3s", "--concurrency", "8")
	s.worker("W2", nil, "--lease", "3s", "--concurrency", "8")

	var ids []string
	submit := func(user string) {
		for i := range 15 {
			ids = append(ids, s.submitIn(quotaQueue, user, 0.2, jetflow.IdempotencyKey(fmt.Sprintf("%s-%d", user, i))).ID)
		}
	}
	// Ann's jobs first, alone: her limit, not the queue's, holds her third.
	submit("ann")
	testkit.WaitFor(t, 20*time.Second, func() error {
		if n := w.peakUser(); n < 2 {
			return testkit.Errorf("ann held at most %d slots at once", n)
		}
		return nil
	})
	submit("bob")
	submit("cyd")
	ctx := testkit.Ctx(t)
	succeeded := func() (int, error) {
		n := 0
		for _, id := range ids {
			j, err := s.client.Get(ctx, id)
			if err != nil {
				return 0, err
			}
			if j.State == jetflow.Succeeded {
				n++
			} else if j.State.Terminal() {
				return 0, fmt.Errorf("job %s %s", id, j.State)
			}
		}
		return n, nil
	}
	testkit.WaitFor(t, 30*time.Second, func() error {
		n, err := succeeded()
		if err != nil {
			return err
		}
		if n < 20 {
			return testkit.Errorf("%d of %d jobs succeeded", n, len(ids))
		}
		return nil
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, id := range ids { // the history of each job that did not succeed
			if j, err := s.client.Get(ctx, id); err == nil && j.State == jetflow.Succeeded {
				continue
			}
			evs, _ := s.client.Events(ctx, id)
			for _, e := range evs {
				t.Logf("job %s: seq %d %s %s->%s by %s", id, e.Seq, e.Type, e.From, e.To, e.Actor)
			}
		}
	})
	leader := s.leaderOf(engines...)
	leader.Kill(t)
	var other *testkit.Proc
	for _, p := range engines {
		if p != leader {
			other = p
		}
	}
	n, _ := succeeded()
	t.Logf("killed the leading engine (%s) with %d of %d jobs succeeded", leader.Name, n, len(ids))
	if s.leaderOf(engines...) != other {
		t.Fatal("the other engine does not lead")
	}
	testkit.WaitDrained(t, 30*time.Second, func() (int, error) {
		n, err := succeeded()
		return len(ids) - n, err
	})
	// Each job admitted once, by one of the engines: those still pending
	// at the kill by the one that took over.
	byOther := 0
	for _, id := range ids {
		evs := s.wantStateEvents(id, evSubmitted, domain.EvAdmitted, evStarted, evSucceeded)
		switch actor := evs[1].Actor; {
		case strings.HasSuffix(actor, fmt.Sprintf("-%d", other.Cmd.Process.Pid)):
			byOther++
		case !strings.HasSuffix(actor, fmt.Sprintf("-%d", leader.Cmd.Process.Pid)):
			t.Fatalf("job %s admitted by %q, neither engine", id, actor)
		}
	}
	if byOther == 0 {
		t.Fatal("no job admitted by the engine that took over")
	}
	t.Logf("%d jobs admitted by the engine that took over", byOther)
	w.wantMax(3, 2)
	s.waitCounts(quotaQueue, 0, 0, nil, 10*time.Second)
	s.waitDrained(quotaQueue)
	s.verifySlots()
}
