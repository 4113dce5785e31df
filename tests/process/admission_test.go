package process

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// Limits per key and rate limits across real processes: two engines on
// one NATS system, the leading one (which admits) SIGKILLed midway, and a
// worker SIGKILLed while it runs jobs. The log is folded as it is written
// and the leading admitter asked every 50 ms: no key ever holds more than
// its limit, no period ever has more admissions than its rate limit, and
// the jobs of a key are admitted in submit order.

// admissionWatch folds the events of some queues in order: the state of
// each job, its key, and every admission.
type admissionWatch struct {
	t       *testing.T
	perKey  int // the limit per key of queue keyed
	keyed   string
	mu      sync.Mutex
	state   map[string]domain.State
	key     map[string]string
	queue   map[string]string
	most    int                               // the most slots one key of keyed held at once
	admits  map[string]map[string][]time.Time // queue -> key ("" for another queue's) -> times
	order   map[string][]string               // key of keyed -> jobs in admission order
	asked   int
	cancel  context.CancelFunc
	stopped sync.WaitGroup
	once    sync.Once
}

func watchAdmissions(t *testing.T, s *system, keyed string, perKey int, queues ...string) *admissionWatch {
	t.Helper()
	st := testkit.StoreOf(t, s.client)
	ctx, cancel := context.WithCancel(context.Background())
	w := &admissionWatch{t: t, perKey: perKey, keyed: keyed, state: map[string]domain.State{}, key: map[string]string{},
		queue: map[string]string{}, admits: map[string]map[string][]time.Time{}, order: map[string][]string{}, cancel: cancel}
	t.Cleanup(w.stop)
	var filters []string
	for _, q := range queues {
		filters = append(filters, streams.EventsPrefix+".*."+q+".>")
	}
	cons, err := st.Events.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: filters})
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
			w.key[ev.JobID], w.queue[ev.JobID] = ev.Spec.ConcurrencyKey, ev.Spec.Queue
		}
		q := w.queue[ev.JobID]
		if ev.Type == domain.EvAdmitted {
			if w.admits[q] == nil {
				w.admits[q] = map[string][]time.Time{}
			}
			k := ""
			if q == w.keyed {
				k = w.key[ev.JobID]
				w.order[k] = append(w.order[k], ev.JobID)
			}
			w.admits[q][k] = append(w.admits[q][k], ev.Time)
		}
		if ev.To == domain.StateNew {
			return
		}
		w.state[ev.JobID] = ev.To
		if q != w.keyed {
			return
		}
		held := map[string]int{}
		for id, st := range w.state {
			if w.queue[id] == w.keyed && (st == domain.StateQueued || st == domain.StateClaimed || st == domain.StateRunning) {
				held[w.key[id]]++
			}
		}
		for k, n := range held {
			w.most = max(w.most, n)
			if n > w.perKey {
				w.t.Errorf("log: after %s of %s, key %q holds %d slots: limit %d", ev.Type, ev.JobID, k, n, w.perKey)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	w.stopped.Add(2)
	go func() { defer w.stopped.Done(); <-ctx.Done(); cc.Stop() }()
	go func() {
		defer w.stopped.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			counts, err := st.AdmissionCountsOf(ctx, keyed)
			if err != nil {
				continue // no leader, or it is rebuilding
			}
			c, ok := counts[keyed]
			if !ok {
				continue
			}
			w.mu.Lock()
			w.asked++
			for k, kc := range c.Keys {
				if kc.Holding > w.perKey {
					w.t.Errorf("the admitter says key %q holds %d slots: limit %d", k, kc.Holding, w.perKey)
				}
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *admissionWatch) stop() {
	w.once.Do(func() { w.cancel(); w.stopped.Wait() })
}

// mostInPeriod is the most of ts within any period.
func mostInPeriod(ts []time.Time, period time.Duration) int {
	ts = slices.Clone(ts)
	sort.Slice(ts, func(i, k int) bool { return ts[i].Before(ts[k]) })
	most, end := 0, 0
	for i := range ts {
		for end < len(ts) && ts[end].Sub(ts[i]) < period {
			end++
		}
		most = max(most, end-i)
	}
	return most
}

func TestKeyAndRateLimitsTwoEnginesLeaderAndWorkerKilled(t *testing.T) {
	t.Parallel()
	s := startOnNATS(t)
	engines := []*testkit.Proc{s.startEngine("serve 1"), s.startEngine("serve 2")}
	// Queue keyed: one job at a time per key, and at most 3 starts of a
	// key in any 2 s. Queue rated: at most 5 starts in any 2 s.
	keyedLim := jetflow.QueueLimits{MaxRunningPerKey: 1, RateLimit: 3, RatePeriod: 2 * time.Second, RateKey: "concurrency_key"}
	ratedLim := jetflow.QueueLimits{RateLimit: 5, RatePeriod: 2 * time.Second}
	s.setLimits("keyed", keyedLim)
	s.setLimits("rated", ratedLim)
	w := watchAdmissions(t, s, "keyed", 1, "keyed", "rated")
	w1 := s.worker("W1", nil, "--lease", "3s", "--concurrency", "8")
	s.worker("W2", nil, "--lease", "3s", "--concurrency", "8")

	submitted := map[string][]string{} // by key, in submit order
	var ids []string
	for i := range 8 {
		for _, k := range []string{"k1", "k2", "k3"} {
			j := s.submitIn("keyed", "", 0.3, jetflow.ConcurrencyKey(k), jetflow.IdempotencyKey(fmt.Sprintf("keyed-%s-%d", k, i)))
			submitted[k] = append(submitted[k], j.ID)
			ids = append(ids, j.ID)
		}
	}
	for i := range 20 {
		ids = append(ids, s.submitIn("rated", "", 0.05, jetflow.IdempotencyKey(fmt.Sprintf("rated-%d", i))).ID)
	}
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
	// A worker SIGKILLed while it runs jobs of keys: they are requeued
	// (holding their keys' slots) and run again on the other.
	testkit.WaitFor(t, 30*time.Second, func() error {
		if n, err := succeeded(); err != nil || n < 6 {
			return testkit.Errorf("%d succeeded (%v)", n, err)
		}
		return nil
	})
	w1.Kill(t)
	testkit.WaitFor(t, 30*time.Second, func() error {
		if n, err := succeeded(); err != nil || n < 20 {
			return testkit.Errorf("%d succeeded (%v)", n, err)
		}
		return nil
	})
	leader := s.leaderOf(engines...)
	leader.Kill(t)
	n, _ := succeeded()
	t.Logf("killed the leading engine (%s) with %d of %d jobs succeeded", leader.Name, n, len(ids))
	testkit.WaitDrained(t, 60*time.Second, func() (int, error) {
		n, err := succeeded()
		return len(ids) - n, err
	})
	// Every job admitted once, the takeover's among them.
	other := engines[0]
	if other == leader {
		other = engines[1]
	}
	byOther := 0
	for _, id := range ids {
		for _, e := range s.stateEvents(id) {
			if e.Type == domain.EvAdmitted && strings.HasSuffix(e.Actor, fmt.Sprintf("-%d", other.Cmd.Process.Pid)) {
				byOther++
			}
		}
	}
	if byOther == 0 {
		t.Fatal("no job admitted by the engine that took over")
	}
	w.stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.most != 1 || w.asked < 20 {
		t.Errorf("log: a key held at most %d slots at once (want its limit 1); %d answers of an admitter", w.most, w.asked)
	}
	for _, k := range []string{"k1", "k2", "k3"} {
		if !slices.Equal(w.order[k], submitted[k]) {
			t.Errorf("key %s admitted %v, want submit order %v", k, w.order[k], submitted[k])
		}
		if n := mostInPeriod(w.admits["keyed"][k], keyedLim.RatePeriod); n != 3 {
			t.Errorf("key %s: at most %d admissions in %s, want exactly its rate limit 3", k, n, keyedLim.RatePeriod)
		}
	}
	if n := mostInPeriod(w.admits["rated"][""], ratedLim.RatePeriod); n != 5 || len(w.admits["rated"][""]) != 20 {
		t.Errorf("queue rated: %d admissions, at most %d in %s; want 20 and exactly its rate limit 5",
			len(w.admits["rated"][""]), n, ratedLim.RatePeriod)
	}
	t.Logf("%d jobs admitted by the engine that took over; %d answers of an admitter", byOther, w.asked)
	s.waitCounts("keyed", 0, 0, nil, 10*time.Second)
	s.waitDrained("keyed")
	s.waitDrained("rated")
	s.verifySlots()
}
