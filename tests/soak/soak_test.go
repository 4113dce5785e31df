package soak

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// TestSoak runs serve (embedded NATS) and several worker processes under
// the mixed load and faults of the package doc, then asserts the
// invariants of check_test.go, each exactly 0.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	sz := short
	if longSoak() {
		sz = long
	}
	s := startSingle(t, sized(t, sz))
	s.startWorkers(sz.workers)
	runSoak(t, s)
}

// TestSoakSyncAlways is TestSoak with the embedded server syncing every
// write before it acknowledges it (serve --sync always): the event log's
// appends go through the group commit (atomic batches), in serve and in
// every worker, under the same faults, with the same invariants. It runs in
// CI beside TestSoak (docs/reliability.md has its history).
func TestSoakSyncAlways(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	sz := short
	sz.name = "short, sync always"
	sz.jobs = short.jobs / 2 // the same faults for half as long: CI's time
	if longSoak() {
		sz = long
		sz.name = "long, sync always"
	}
	s := startSingle(t, sized(t, sz), "--sync", "always")
	s.startWorkers(sz.workers)
	runSoak(t, s)
}

// runSoak puts the load on s and the faults on its processes until every
// job of the load was submitted, lets the jobs finish, reads the log and
// checks it.
func runSoak(t *testing.T, s *system) {
	sz := s.sz
	// Background goroutines end before runSoak returns, however it
	// returns: the context is cancelled first, then they are waited for.
	var bg sync.WaitGroup
	defer bg.Wait()
	ctx, cancelTail := context.WithCancel(context.Background())
	defer cancelTail()
	tl := newTail(s.client.Conn())
	s.tl = tl
	bg.Add(1)
	go func() { defer bg.Done(); tl.run(ctx) }()

	ld := newLoad(sz, s.client, tl)
	defer ld.wg.Wait()
	stop := make(chan struct{}) // ends everything at once (the test failed)
	more := make(chan struct{}) // no more cancel scenarios or copies
	var noMore sync.Once
	defer func() {
		close(stop)
		noMore.Do(func() { close(more) })
	}()
	generated := make(chan struct{})
	ld.wg.Add(1)
	go func() { defer ld.wg.Done(); defer close(generated); ld.generate(stop) }()
	ld.wg.Add(2)
	go func() { defer ld.wg.Done(); ld.scenarios(more, stop) }()
	go func() { defer ld.wg.Done(); ld.duplicate(more) }()
	bg.Add(1)
	go func() { defer bg.Done(); progress(t, ctx, s, ld, tl) }()

	t.Logf("soak %s: %d jobs, %d workers x %d slots, lease %s", sz.name, sz.jobs, sz.workers, sz.concurrency, sz.lease)
	faultStart := time.Now()
	s.injectFaults(generated)
	faultEnd := time.Now()
	noMore.Do(func() { close(more) })
	<-generated
	ld.wg.Wait()
	_, finishedAtEnd, _ := tl.counts()
	t.Logf("faults over after %s: %s; %d jobs submitted", faultEnd.Sub(faultStart).Round(time.Second), s.faults, ld.submitted.Load())

	ids := ld.ids()
	left := settle(sz.stall, func() (int, error) { return tl.unfinished(ids), nil })
	// A job cancelled while scheduled leaves its schedule in the queue
	// until it fires (and is dropped): the c-sched jobs' are due in an
	// hour. Anything else left is a work item nobody settled.
	skip := map[string]bool{}
	ld.mu.Lock()
	for _, id := range ids {
		if j := ld.jobs[id]; j.kind == kSched {
			skip[streams.SchedSubject(domain.DefaultQueue, id)] = true
		}
	}
	ld.mu.Unlock()
	var leftover map[string]uint64
	items := settle(30*time.Second, func() (n int, err error) {
		n, leftover, err = queueItems(s, domain.DefaultQueue, skip)
		return n, err
	})
	drained := time.Now()
	cancelTail()

	l := newEventLog()
	rctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := readLog(rctx, s.client.Conn(), l); err != nil {
		t.Fatalf("read the event log: %v", err)
	}
	r := check(l, ld, s)
	for _, seq := range tl.changedSince(l) {
		r.bad(invLost, nil, "event %d", seq)
	}
	if items > 0 {
		r.bad(invWorkItemsLeft, nil, "%v", leftover)
		r.violations[invWorkItemsLeft] += items - 1
		describeLeft(t, s, domain.DefaultQueue, leftover)
	}
	for _, w := range s.all {
		if w.sig == syscall.SIGTERM {
			if code, sig := w.p.WaitExit(t, 2*time.Minute); code != 0 {
				r.bad(invBadWorkerExits, nil, "worker %s: code %d, signal %v:\n%s", w.id, code, sig, lastLines(w.p.Output(), 30))
			}
		}
	}
	verified, diffs := s.verify()
	for _, d := range diffs {
		r.bad(invVerify, nil, "%s", d)
	}
	for _, f := range s.auditVerify() {
		r.bad(invChain, nil, "%s", f)
	}

	t.Log(summary(s, ld, r, faultStart, faultEnd, drained, finishedAtEnd, verified))
	for id, pieces := range r.stuck {
		t.Logf("fan-out %s is not terminal: pieces %v have no outcome in the log\n%s", id, pieces, batchItems(s, id))
	}
	ld.mu.Lock()
	errs := ld.errs
	ld.mu.Unlock()
	for _, err := range errs {
		t.Errorf("load: %v", err)
	}
	if left > 0 {
		t.Errorf("%d jobs still not terminal after %s without progress", left, sz.stall)
	}
	if f := r.failures(); f != "" {
		t.Fatalf("invariants that do not hold:\n%s", f)
	}
}

// settle waits while left goes down and returns what is left once it is 0
// or did not go down for stall.
func settle(stall time.Duration, left func() (int, error)) int {
	best, since := -1, time.Now()
	for {
		n, err := left()
		if err == nil && n == 0 {
			return 0
		}
		if err == nil && (best < 0 || n < best) {
			best, since = n, time.Now()
		}
		if time.Since(since) > stall {
			return max(best, 1)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// batchItems describes the batches of parent still in the default queue and
// the state of the consumer that should deliver them.
func batchItems(s *system, parent string) string {
	ctx, cancel := callCtx(30 * time.Second)
	defer cancel()
	var b strings.Builder
	req := map[string]any{"seq": 1, "next_by_subj": streams.BatchSubject(domain.DefaultQueue, "demo.batch", parent), "batch": 1000}
	_, err := streams.DirectBatch(ctx, s.client.Conn(), streams.BatchStream(domain.DefaultQueue), req, func(m *nats.Msg) error {
		var item domain.BatchItem
		_ = streams.Unmarshal(m.Data, &item)
		fmt.Fprintf(&b, "  queue item seq %s (stored %s): piece %d\n", m.Header.Get("Nats-Sequence"), m.Header.Get("Nats-Time-Stamp"), item.Piece)
		return nil
	})
	if err != nil {
		fmt.Fprintf(&b, "  read the queue: %v\n", err)
	}
	js, err := jetstream.New(s.client.Conn())
	var c jetstream.Consumer
	if err == nil {
		c, err = js.Consumer(ctx, streams.BatchStream(domain.DefaultQueue), engine.BatchConsumerName("demo.batch"))
	}
	if err == nil {
		var ci *jetstream.ConsumerInfo
		if ci, err = c.Info(ctx); err == nil {
			fmt.Fprintf(&b, "  consumer %s: %d pending, %d ack pending, %d redelivered; delivered up to stream seq %d, ack floor %d\n",
				ci.Name, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.Delivered.Stream, ci.AckFloor.Stream)
		}
	}
	if err != nil {
		fmt.Fprintf(&b, "  consumer: %v\n", err)
	}
	return b.String()
}

// queueItems is how many messages a queue's streams hold (work items and
// batches not yet acked, schedules not yet fired) on subjects other than
// skip's, and how many on each.
func queueItems(s *system, queue string, skip map[string]bool) (int, map[string]uint64, error) {
	ctx, cancel := callCtx(10 * time.Second)
	defer cancel()
	js, err := jetstream.New(s.client.Conn())
	if err != nil {
		return 0, nil, err
	}
	qss, err := streams.QueueStreams(ctx, js, queue)
	if err != nil {
		return 0, nil, err
	}
	n, left := 0, map[string]uint64{}
	for _, qs := range qss.All() {
		info, err := qs.Info(ctx, jetstream.WithSubjectFilter(streams.LegacyQueueSubject(queue)))
		if err != nil {
			return 0, nil, err
		}
		for subj, k := range info.State.Subjects {
			if !skip[subj] {
				n += int(k)
				left[subj] = k
			}
		}
	}
	return n, left, nil
}

// describeLeft logs what the work items left in queue are (the first few
// of each subject: the job, its state in the item and now) and the queue's
// consumers, so that a run that leaves some explains itself.
func describeLeft(t *testing.T, s *system, queue string, left map[string]uint64) {
	ctx, cancel := callCtx(20 * time.Second)
	defer cancel()
	js, err := jetstream.New(s.client.Conn())
	if err != nil {
		t.Logf("describe the items left: %v", err)
		return
	}
	qss, err := streams.QueueStreams(ctx, js, queue)
	if err != nil {
		t.Logf("describe the items left: %v", err)
		return
	}
	for subj := range left {
		qs := qss.Run
		if qss.Batches != nil && streams.Captures(qss.Batches, subj) {
			qs = qss.Batches
		}
		next := uint64(1)
		for range 5 {
			m, err := qs.GetMsg(ctx, next, jetstream.WithGetMsgSubject(subj))
			if err != nil {
				break
			}
			next = m.Sequence + 1
			item, err := streams.DecodeWorkItem(m.Data)
			if err != nil {
				t.Logf("left: %s seq %d (%s): not a work item: %v", subj, m.Sequence, m.Time.Format(time.RFC3339Nano), err)
				continue
			}
			now := "?"
			if j, err := s.client.Get(ctx, item.Job.ID); err == nil {
				now = fmt.Sprintf("%s (updated %s)", j.State, j.UpdatedAt.Format(time.RFC3339Nano))
			}
			t.Logf("left: %s seq %d stored %s: job %s, %s in the item (rev %d, run_at %s), now %s",
				subj, m.Sequence, m.Time.Format(time.RFC3339Nano), item.Job.ID, item.Job.State, item.Rev,
				item.Job.RunAt.Format(time.RFC3339Nano), now)
		}
	}
	for _, qs := range qss.All() {
		infos, err := streams.Consumers(ctx, qs)
		if err != nil {
			t.Logf("consumers of the queue: %v", err)
		}
		for _, ci := range infos {
			t.Logf("consumer %s (filter %q): pending %d, ack pending %d, redelivered %d, waiting pulls %d, delivered %d, ack floor %d, ack wait %s",
				ci.Name, ci.Config.FilterSubject, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting,
				ci.Delivered.Stream, ci.AckFloor.Stream, ci.Config.AckWait)
		}
	}
}

// progress logs how the soak goes every ten seconds.
func progress(t *testing.T, ctx context.Context, s *system, ld *load, tl *tail) {
	tick := time.NewTicker(10 * time.Second)
	defer tick.Stop()
	_, last, _ := tl.counts()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		seen, finished, top := tl.counts()
		t.Logf("progress: %d submitted, %d of them finished; %d jobs with children, %d finished (%.0f/s)",
			ld.submitted.Load(), top, seen, finished, float64(finished-last)/10)
		last = finished
	}
}

// summary is the figures of a soak, for the log and docs/reliability.md.
func summary(s *system, ld *load, r *report, faultStart, faultEnd, drained time.Time, finishedAtEnd, verified int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak %s, %s\n", s.sz.name, time.Now().UTC().Format("2006-01-02 15:04 MST"))
	var kinds []string
	for k := range r.kinds {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	total := 0
	for _, k := range kinds {
		total += r.kinds[k]
	}
	fmt.Fprintf(&b, "jobs: %d top-level + %d children = %d jobs, and %d batches; %d job events, %d piece events, %d registry events\n",
		total, r.children, total+r.children, r.pieces, r.events, r.pieceEvs, r.otherEvs)
	for _, k := range kinds {
		fmt.Fprintf(&b, "  %-10s %6d  ended %v", k, r.kinds[k], r.finals[k])
		if from := r.cancelFrom[k]; len(from) > 0 {
			fmt.Fprintf(&b, "  cancelled from %v", from)
		}
		b.WriteByte('\n')
	}
	window := faultEnd.Sub(faultStart).Seconds()
	done := r.finishedBetween(faultStart, faultEnd)
	fmt.Fprintf(&b, "faults over %.0f s: %s; %d copies of work items published; %d submits and %d cancels repeated after an error\n",
		window, s.faults, ld.dups.Load(), ld.retried.Load(), ld.cancelErrs.Load())
	fmt.Fprintf(&b, "jobs finished during the faults: %d in %.0f s = %.0f jobs/s", done, window, float64(done)/window)
	if lo, hi, ok := r.windowRates(faultStart, faultEnd, 10*time.Second); ok {
		fmt.Fprintf(&b, " (10 s windows: %.0f-%.0f jobs/s)", lo, hi)
	}
	b.WriteByte('\n')
	pieces := between(r.batchesAt, faultStart, faultEnd)
	fmt.Fprintf(&b, "batches (and children) done during the faults: %d = %.0f/s\n", pieces, float64(pieces)/window)
	fmt.Fprintf(&b, "drain after the faults: %d jobs in %.1f s\n", len(r.finishedAt)-finishedAtEnd, drained.Sub(faultEnd).Seconds())
	for _, rs := range slices.Concat(s.restarts, s.nodeLoss) {
		fmt.Fprintf(&b, "%s killed at +%.1f s, ready %.2f s later", rs.what, rs.killed.Sub(faultStart).Seconds(), rs.ready.Sub(rs.killed).Seconds())
		if next, ok := r.nextFinished(rs.ready); ok {
			fmt.Fprintf(&b, "; next job finished %.3f s after ready (%.2f s after the kill)", next.Sub(rs.ready).Seconds(), next.Sub(rs.killed).Seconds())
		} else {
			fmt.Fprintf(&b, "; no job finished since")
		}
		// Rates of the 30 s around the kill, within the faults' time.
		from, to := rs.killed.Add(-30*time.Second), rs.killed.Add(30*time.Second)
		if from.Before(faultStart) {
			from = faultStart
		}
		if to.After(faultEnd) {
			to = faultEnd
		}
		fmt.Fprintf(&b, "; %s jobs/s in the %.0f s before the kill, %s in the %.0f s after\n",
			rate(r.finishedBetween(from, rs.killed), rs.killed.Sub(from)), rs.killed.Sub(from).Seconds(),
			rate(r.finishedBetween(rs.killed, to), to.Sub(rs.killed)), to.Sub(rs.killed).Seconds())
	}
	if len(s.startFailures) > 0 {
		fmt.Fprintf(&b, "processes that exited before they ran (started again): %d\n", len(s.startFailures))
		for _, f := range s.startFailures {
			fmt.Fprintf(&b, "  %s\n", strings.ReplaceAll(f, "\n", "\n    "))
		}
	}
	fmt.Fprintf(&b, "requeues: %v\n", r.requeues)
	fmt.Fprintf(&b, "fault timeline:\n  %s\n", strings.Join(s.timeline, "\n  "))
	fmt.Fprintf(&b, "replay --verify rebuilt %d jobs\ninvariants (violations):\n%s", verified, r.table())
	return b.String()
}

// windowRates is the lowest and highest rate of jobs ended in consecutive
// windows of d between from and to.
func (r *report) windowRates(from, to time.Time, d time.Duration) (lo, hi float64, ok bool) {
	for t := from; !t.Add(d).After(to); t = t.Add(d) {
		rate := float64(r.finishedBetween(t, t.Add(d))) / d.Seconds()
		if !ok || rate < lo {
			lo = rate
		}
		if !ok || rate > hi {
			hi = rate
		}
		ok = true
	}
	return lo, hi, ok
}

// rate is n in d, per second.
func rate(n int, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(n)/d.Seconds())
}
