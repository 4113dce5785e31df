package soak

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Kinds of jobs the soak submits. Each has an outcome known in advance
// (check.go): the demo handlers of cmd/jetflow are deterministic.
const (
	kEcho     = "echo"      // demo.echo, a unique payload: succeeds with the payload as result
	kSleep    = "sleep"     // demo.sleep 0.05-2 s: succeeds with {"slept_seconds": S}
	kFlaky    = "flaky"     // demo.fail, fails 1-2 times, 3 retries: succeeds with {"attempts": A}
	kDoomed   = "doomed"    // demo.fail, fails 1000 times, 2 retries: fails with DEMO_FAIL after 2 retries
	kChildren = "children"  // demo.fanout to 2-8 demo.sleep children: succeeds when they all did
	kBatches  = "batches"   // demo.fanout to 20-300 batches, every K-th failing: fails iff one did
	kDelayed  = "delayed"   // demo.echo due 1-5 s later: succeeds, not before its run_at
	kCancel   = "cancel"    // demo.sleep 0.5-3 s, cancelled 0-3 s after submit: whatever Cancel found
	kQueued   = "c-queued"  // a type no worker runs, on queue "parked", cancelled while queued
	kSched    = "c-sched"   // due in an hour, cancelled while scheduled
	kRunning  = "c-running" // demo.sleep 30 s, cancelled once it runs
	kWaiting  = "c-waiting" // demo.fanout to 3 children of 30 s, cancelled while it waits: children cancelled
)

// mix is how many of every 1000 jobs the load submits are of each kind
// (the c-* kinds come from the cancel scenarios, a few a minute).
var mix = []struct {
	kind   string
	weight int
}{
	{kEcho, 560}, {kSleep, 140}, {kFlaky, 100}, {kDoomed, 50}, {kChildren, 30}, {kBatches, 30},
	{kDelayed, 60}, {kCancel, 30},
}

// job is a job the soak submitted, and what it expects of it.
type job struct {
	id, key, kind string
	payload       []byte  // JSON, as submitted
	seconds       float64 // sleep, or each child's
	times         int     // demo.fail's planned failures
	maxRetries    int
	n             int // children or batches
	failEvery     int
	submitted     time.Time
	cancelled     *jetflow.JobInfo // what Cancel returned
}

// load submits the soak's jobs and cancels some of them.
type load struct {
	sz     size
	client *jetflow.Client
	tail   *tail
	run    string // makes keys and payloads unique to this test

	mu    sync.Mutex
	jobs  map[string]*job
	order []string // every top-level job, in submit order
	errs  []error  // what the load could not do (fails the test)

	seq        atomic.Int64 // jobs made
	submitted  atomic.Int64 // top-level jobs whose submit was answered
	retried    atomic.Int64 // submits that failed and were done again
	cancels    atomic.Int64
	cancelErrs atomic.Int64 // cancels that failed and were done again
	dups       atomic.Int64 // copies of work items published
	wg         sync.WaitGroup
}

func newLoad(sz size, client *jetflow.Client, tl *tail) *load {
	return &load{sz: sz, client: client, tail: tl, run: fmt.Sprintf("%x", rand.Uint32()), jobs: map[string]*job{}}
}

func (ld *load) fail(err error) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if len(ld.errs) < 20 {
		ld.errs = append(ld.errs, err)
	}
}

// ids is every top-level job submitted so far.
func (ld *load) ids() []string {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return append([]string(nil), ld.order...)
}

// newJob makes a job of kind k and the request that submits it.
func (ld *load) newJob(k string) (*job, *jetflow.SubmitRequest) {
	n := ld.seq.Add(1)
	key := fmt.Sprintf("soak-%s-%d", ld.run, n)
	j := &job{key: key, id: domain.KeyedID(domain.DefaultNS, key), kind: k}
	opts := []jetflow.SubmitOption{jetflow.IdempotencyKey(key), jetflow.MaxLeaseRequeues(100)}
	typ := ""
	var payload any
	switch k {
	case kEcho, kDelayed:
		typ = "demo.echo"
		payload = map[string]any{"run": ld.run, "n": n, "r": rand.Uint64()}
		if k == kDelayed {
			opts = append(opts, jetflow.Delay(time.Second+time.Duration(rand.Int64N(int64(4*time.Second)))))
		}
	case kSleep, kCancel:
		typ = "demo.sleep"
		if k == kSleep {
			j.seconds = math.Round(0.05*math.Pow(40, rand.Float64())*1000) / 1000 // 0.05-2 s, more short than long
		} else {
			j.seconds = 0.5 + math.Round(rand.Float64()*2500)/1000
		}
		payload = map[string]float64{"seconds": j.seconds}
	case kFlaky, kDoomed:
		typ = "demo.fail"
		j.times, j.maxRetries = 1+rand.IntN(2), 3
		if k == kDoomed {
			j.times, j.maxRetries = 1000, 2
		}
		payload = map[string]int{"times": j.times}
		opts = append(opts, jetflow.MaxRetries(j.maxRetries), jetflow.Jitter(0))
		if rand.IntN(2) == 0 {
			opts = append(opts, jetflow.Backoff(0))
		} else {
			opts = append(opts, jetflow.Backoff(200*time.Millisecond))
		}
	case kChildren:
		typ = "demo.fanout"
		j.n, j.seconds = 2+rand.IntN(7), 0.05+math.Round(rand.Float64()*450)/1000
		payload = map[string]any{"children": j.n, "child_seconds": j.seconds}
	case kBatches:
		typ = "demo.fanout"
		j.n, j.failEvery = 20+rand.IntN(281), []int{0, 0, 7, 50}[rand.IntN(4)]
		payload = map[string]any{"batches": j.n, "fail_every": j.failEvery, "batch_ms": rand.IntN(6)}
	case kQueued:
		typ = "soak.parked"
		payload = map[string]int64{"n": n}
		opts = append(opts, jetflow.Queue("parked"))
	case kSched:
		typ = "demo.echo"
		payload = map[string]int64{"n": n}
		opts = append(opts, jetflow.Delay(time.Hour))
	case kRunning:
		typ, j.seconds = "demo.sleep", 30
		payload = map[string]float64{"seconds": j.seconds}
	case kWaiting:
		typ, j.n, j.seconds = "demo.fanout", 3, 30
		payload = map[string]any{"children": j.n, "child_seconds": j.seconds}
	}
	var err error
	if j.payload, err = json.Marshal(payload); err != nil {
		panic(err)
	}
	req, err := jetflow.NewRequest(typ, json.RawMessage(j.payload), opts...)
	if err != nil {
		panic(err)
	}
	return j, req
}

// pick is a kind of the mix, at random.
func pick() string {
	total := 0
	for _, m := range mix {
		total += m.weight
	}
	r := rand.IntN(total)
	for _, m := range mix {
		if r < m.weight {
			return m.kind
		}
		r -= m.weight
	}
	return kEcho
}

// submit submits jobs, pipelined, and submits again those whose submit
// failed (serve was down, say) until every one was answered: their ids
// derive from their keys, so a submit that was done but not answered
// returns the same job. It returns false if it gave up (stop closed).
func (ld *load) submit(stop <-chan struct{}, jobs []*job, reqs []*jetflow.SubmitRequest) bool {
	now := time.Now()
	ld.mu.Lock()
	for _, j := range jobs {
		j.submitted = now
		ld.jobs[j.id] = j
		ld.order = append(ld.order, j.id)
	}
	ld.mu.Unlock()
	for len(reqs) > 0 {
		ctx, cancel := callCtx(30 * time.Second)
		infos, errs := ld.client.SubmitMany(ctx, reqs)
		cancel()
		var again []*jetflow.SubmitRequest
		var againJobs []*job
		for i, err := range errs {
			switch {
			case err == nil && infos[i].ID != jobs[i].id:
				ld.fail(fmt.Errorf("submit of key %s returned job %s, not %s", jobs[i].key, infos[i].ID, jobs[i].id))
			case err == nil:
				ld.submitted.Add(1)
			case errors.Is(err, jetflow.ErrInvalidInput):
				ld.fail(fmt.Errorf("submit %s: %w", jobs[i].kind, err))
			default:
				again, againJobs = append(again, reqs[i]), append(againJobs, jobs[i])
			}
		}
		if len(again) > 0 {
			ld.retried.Add(int64(len(again)))
			select {
			case <-stop:
				return false
			case <-time.After(500 * time.Millisecond):
			}
		}
		reqs, jobs = again, againJobs
	}
	return true
}

// cancel cancels a job, again and again until it is answered, and keeps
// what it was answered: the job cancelled, or as it had already ended.
func (ld *load) cancel(stop <-chan struct{}, j *job) {
	for {
		ctx, cancel := callCtx(30 * time.Second)
		info, err := ld.client.Cancel(ctx, j.id, "soak")
		cancel()
		if err == nil {
			ld.mu.Lock()
			j.cancelled = info
			ld.mu.Unlock()
			ld.cancels.Add(1)
			return
		}
		ld.cancelErrs.Add(1)
		select {
		case <-stop:
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// generate submits the soak's jobs of the mix, a batch at a time, as fast
// as the rate and the backlog allow, until it submitted them all. Some are
// cancelled a random moment after their submit.
func (ld *load) generate(stop <-chan struct{}) {
	start := time.Now()
	for made := 0; made < ld.sz.jobs; {
		for {
			_, _, finishedTop := ld.tail.counts()
			if int(ld.submitted.Load())-finishedTop < ld.sz.backlog {
				break
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		if ld.sz.rate > 0 {
			due := start.Add(time.Duration(float64(made) / ld.sz.rate * float64(time.Second)))
			select {
			case <-stop:
				return
			case <-time.After(time.Until(due)):
			}
		}
		var jobs []*job
		var reqs []*jetflow.SubmitRequest
		for range min(ld.sz.batch, ld.sz.jobs-made) {
			j, req := ld.newJob(pick())
			jobs, reqs = append(jobs, j), append(reqs, req)
		}
		made += len(jobs)
		if !ld.submit(stop, jobs, reqs) {
			return
		}
		for _, j := range jobs {
			if j.kind != kCancel {
				continue
			}
			ld.wg.Add(1)
			go func() {
				defer ld.wg.Done()
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(rand.Int64N(int64(3 * time.Second)))):
				}
				ld.cancel(stop, j)
			}()
		}
	}
}

// scenarios cancels jobs in each state a cancel can find them in, one
// every few seconds, until more is closed: queued (a type nobody runs),
// scheduled (due in an hour), running (a 30 s sleep, once it runs), and
// waiting (a fan-out to 30 s children, once it waits). A scenario under
// way when more is closed is finished (stop ends it at once).
func (ld *load) scenarios(more, stop <-chan struct{}) {
	kinds := []string{kQueued, kSched, kRunning, kWaiting}
	for i := 0; ; i++ {
		select {
		case <-more:
			return
		case <-time.After(2*time.Second + time.Duration(rand.Int64N(int64(2*time.Second)))):
		}
		j, req := ld.newJob(kinds[i%len(kinds)])
		if !ld.submit(stop, []*job{j}, []*jetflow.SubmitRequest{req}) {
			return
		}
		switch j.kind {
		case kRunning:
			ld.waitState(stop, j.id, jetflow.Running)
		case kWaiting:
			ld.waitState(stop, j.id, jetflow.Waiting)
		}
		ld.cancel(stop, j)
	}
}

// waitState waits (30 s at most: the cancel is checked against what it
// found anyway) until the job is in state st.
func (ld *load) waitState(stop <-chan struct{}, id string, st jetflow.State) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := callCtx(5 * time.Second)
		info, err := ld.client.Get(ctx, id)
		cancel()
		if err == nil && info.State == st {
			return
		}
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// duplicate publishes copies of work items that wait in the default
// queue, a few a second, until stop is closed: the last item of a job
// type's run subject, or of a batch parent's subject. The copies carry no
// message id, so the stream keeps them: workers get each item twice.
func (ld *load) duplicate(stop <-chan struct{}) {
	types := []string{"demo.echo", "demo.sleep", "demo.fail", "demo.fanout"}
	for {
		select {
		case <-stop:
			return
		case <-time.After(150 * time.Millisecond):
		}
		var subj string
		if rand.IntN(3) == 0 {
			ld.mu.Lock()
			var parent string
			for k := len(ld.order) - 1; k >= 0 && k >= len(ld.order)-200; k-- {
				if j := ld.jobs[ld.order[k]]; j.kind == kBatches {
					parent = j.id
					break
				}
			}
			ld.mu.Unlock()
			if parent == "" {
				continue
			}
			subj = streams.BatchSubject(domain.DefaultQueue, "demo.batch", parent)
		} else {
			subj = streams.RunSubject(domain.DefaultQueue, types[rand.IntN(len(types))])
		}
		ctx, cancel := callCtx(5 * time.Second)
		js, err := jetstream.New(ld.client.Conn())
		var qs jetstream.Stream
		if err == nil {
			stream := streams.QueueStream(domain.DefaultQueue)
			if strings.Contains(subj, ".batch.") {
				stream = streams.BatchStream(domain.DefaultQueue)
			}
			qs, err = js.Stream(ctx, stream)
		}
		if err == nil {
			var m *jetstream.RawStreamMsg
			if m, err = qs.GetLastMsgForSubject(ctx, subj); err == nil {
				if _, err = js.Publish(ctx, subj, m.Data); err == nil {
					ld.dups.Add(1)
				}
			}
		}
		cancel()
	}
}
