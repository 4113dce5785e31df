package soak

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Invariants: each is a count of violations that must be 0.
const (
	invNotTerminal    = "jobs not terminal"
	invMultiTerminal  = "jobs with more than one terminal event"
	invAfterTerminal  = "events after a job's terminal event"
	invDoubleStart    = "job.started more than once for one attempt"
	invLeaseLive      = "lease expired under a worker never stopped (not near a serve restart)"
	invLeaseRestart   = "lease expired under a worker never stopped, within lease+5s of a serve or node restart"
	invLeaseClaimLost = "lease expired under a live worker that took its own claim for failed (its job.started was in the log)"
	invRequeueLive    = "job.requeued (shutdown) by a worker never sent SIGTERM"
	invDeadWriter     = "events written by a worker after its SIGKILL"
	invOutcome        = "final state or error different from the plan"
	invResult         = "results different from what the handler returned"
	invFanIn          = "fan-in counts different from the plan or the pieces"
	invChildren       = "children missing, extra, or not ended as their parent implies"
	invDelay          = "delayed jobs without job.due or started before run_at"
	invUnknown        = "jobs in the log the soak did not submit"
	invLost           = "events read during the soak, lost or changed at the end"
	invBadLog         = "events that do not decode, or gaps in the log's sequence"
	invNoSubmitted    = "jobs whose history has no job.submitted"
	invOrphans        = "jobs of workers all killed at once, still held 30 s later"
	invVerify         = "replay --verify differences"
	invChain          = "audit verify findings (the hash chain: events edited, removed, reordered, inserted or unchained)"
	invWorkItemsLeft  = "work items left in the default queue"
	invBadWorkerExits = "workers that did not exit 0 after SIGTERM"
)

var invariants = []string{invNotTerminal, invMultiTerminal, invAfterTerminal, invDoubleStart, invLeaseLive,
	invLeaseRestart, invLeaseClaimLost, invRequeueLive, invDeadWriter, invOutcome, invResult, invFanIn, invChildren, invDelay,
	invUnknown, invLost, invBadLog, invNoSubmitted, invOrphans, invVerify, invChain, invWorkItemsLeft, invBadWorkerExits}

// report is what the final read of the log found.
type report struct {
	violations map[string]int
	examples   map[string][]string // a few, with the job's history

	kinds      map[string]int                  // top-level jobs by kind
	finals     map[string]map[domain.State]int // by kind
	children   int
	pieces     int // batch pieces planned
	events     int
	pieceEvs   int
	otherEvs   int                             // the registry's
	cancelFrom map[string]map[domain.State]int // cancel scenario -> the state it cancelled from
	requeues   map[string]int                  // lease and shutdown requeues, by how they were justified
	stuck      map[string][]int                // fan-out parents not terminal -> pieces with no outcome in the log
	finishedAt []time.Time                     // when each job (top-level or child) ended, sorted
	batchesAt  []time.Time                     // when each batch first had an outcome, sorted
}

func newReport() *report {
	r := &report{violations: map[string]int{}, examples: map[string][]string{}, kinds: map[string]int{},
		finals: map[string]map[domain.State]int{}, cancelFrom: map[string]map[domain.State]int{}, requeues: map[string]int{},
		stuck: map[string][]int{}}
	for _, inv := range invariants {
		r.violations[inv] = 0
	}
	return r
}

// bad counts one violation of inv, with an example (the first few).
func (r *report) bad(inv string, j *jobLog, format string, args ...any) {
	r.violations[inv]++
	if len(r.examples[inv]) >= 3 {
		return
	}
	msg := fmt.Sprintf(format, args...)
	if j != nil {
		msg = fmt.Sprintf("job %s: %s\n%s", j.id, msg, j.history())
	}
	r.examples[inv] = append(r.examples[inv], msg)
}

// check compares the log with the plan and with what was done to the
// processes.
func check(l *eventLog, ld *load, s *system) *report {
	r := newReport()
	r.events, r.pieceEvs, r.otherEvs = l.events, l.pcs, l.other
	for _, b := range l.bad {
		r.bad(invBadLog, nil, "%s", b)
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()

	s.failedClaims = claimsFailed(s)
	childrenOf := map[string][]*jobLog{}
	for _, j := range l.jobs {
		if j.spec == nil {
			r.bad(invNoSubmitted, j, "no job.submitted")
			continue
		}
		if p := j.spec.Parent; p != "" {
			childrenOf[p] = append(childrenOf[p], j)
			r.children++
		} else if ld.jobs[j.id] == nil {
			r.bad(invUnknown, j, "not submitted by the soak")
		}
		r.checkHistory(j, s)
	}
	for _, o := range s.orphans {
		for _, id := range o.jobs {
			r.bad(invOrphans, l.jobs[id], "held by a worker killed at %s", o.at.Format("15:04:05.000"))
		}
	}
	for parent, kids := range childrenOf {
		if p := ld.jobs[parent]; p == nil || (p.kind != kChildren && p.kind != kWaiting) {
			r.bad(invUnknown, kids[0], "child of %s, which the soak did not fan out to children", parent)
		}
	}
	for _, id := range ld.order {
		p := ld.jobs[id]
		r.kinds[p.kind]++
		j := l.jobs[id]
		if j == nil {
			r.violations[invNotTerminal]++
			r.examples[invNotTerminal] = append(r.examples[invNotTerminal], fmt.Sprintf("job %s (%s): not in the log", id, p.kind))
			continue
		}
		r.checkPlanned(p, j, childrenOf[id], l.pieces[id])
	}
	for _, pieces := range l.pieces {
		seen := map[int]bool{}
		for _, e := range pieces {
			if e.typ != domain.PcPlanned && e.piece > 0 && !seen[e.piece] {
				seen[e.piece] = true
				r.batchesAt = append(r.batchesAt, e.at)
			}
		}
	}
	sort.Slice(r.finishedAt, func(a, b int) bool { return r.finishedAt[a].Before(r.finishedAt[b]) })
	sort.Slice(r.batchesAt, func(a, b int) bool { return r.batchesAt[a].Before(r.batchesAt[b]) })
	return r
}

// checkHistory checks what holds for every job: one terminal event and
// nothing after it, one start per attempt, and no lease expiry or shutdown
// requeue that no fault explains.
func (r *report) checkHistory(j *jobLog, s *system) {
	terms := j.terminals()
	switch {
	case len(terms) == 0:
		r.bad(invNotTerminal, j, "no terminal event")
	case len(terms) > 1:
		r.bad(invMultiTerminal, j, "%d terminal events", len(terms))
	}
	if len(terms) > 0 {
		r.finishedAt = append(r.finishedAt, terms[0].at)
	}
	starts := map[int]int{}
	holder := ""
	ended := false
	for _, e := range j.evs {
		if ended {
			r.bad(invAfterTerminal, j, "%s after the terminal event", e.typ)
			break
		}
		ended = e.to.Terminal()
		if w := s.all[e.actor]; w != nil && w.sig == syscall.SIGKILL && e.at.After(w.dead) {
			r.bad(invDeadWriter, j, "%s by %s at %s, gone at %s", e.typ, e.actor, e.at.Format(time.StampMicro), w.dead.Format(time.StampMicro))
		}
		switch e.typ {
		case domain.EvStarted, domain.EvClaimed:
			if e.typ == domain.EvStarted {
				starts[e.attempt]++
				if starts[e.attempt] == 2 {
					r.bad(invDoubleStart, j, "attempt %d started twice", e.attempt)
				}
			}
			holder = e.actor
		case domain.EvLeaseExpiredRequeue, domain.EvLeaseExpired:
			w := s.all[holder]
			switch {
			case w != nil && !w.signalled.IsZero() && !e.at.Before(w.signalled):
				r.requeues["lease expired, holder stopped before ("+sigName(w.sig)+")"]++
			case s.failedClaims[j.id+" "+holder] != "":
				r.requeues["lease expired under a live worker whose claim failed on its side"]++
				r.bad(invLeaseClaimLost, j, "%s at %s; holder %s logged:\n    %s", e.typ, e.at.Format("15:04:05.000"), holder, s.failedClaims[j.id+" "+holder])
			case s.nearRestart(e.at) != nil:
				rs := s.nearRestart(e.at)
				long := "shorter"
				if rs.ready.Sub(rs.killed) > s.sz.lease {
					long = "longer"
				}
				r.requeues["lease expired under a live worker, after a restart down "+long+" than the lease"]++
				r.bad(invLeaseRestart, j, "%s at %s, holder %s never stopped before it; %s was killed at %s and ready at %s (down %.1f s, lease %s)",
					e.typ, e.at.Format("15:04:05.000"), holder, rs.what, rs.killed.Format("15:04:05.000"), rs.ready.Format("15:04:05.000"),
					rs.ready.Sub(rs.killed).Seconds(), s.sz.lease)
			default:
				r.requeues["lease expired under a live worker"]++
				r.bad(invLeaseLive, j, "%s at %s, holder %s never stopped before it", e.typ, e.at.Format("15:04:05.000"), holder)
			}
		case domain.EvRequeued:
			if strings.HasPrefix(e.message, "claimed ahead") {
				// A job claimed ahead of a live worker's handlers that
				// found no slot in time (engine/internal/runtime/ahead.go).
				r.requeues["given back by a live worker: claimed ahead, no slot in time"]++
				continue
			}
			if w := s.all[e.actor]; w == nil || w.sig != syscall.SIGTERM || e.at.Before(w.signalled) {
				r.bad(invRequeueLive, j, "requeued by %s, not stopped", e.actor)
			} else {
				r.requeues["requeued by a worker shutting down"]++
			}
		}
	}
}

// claimsFailed finds in the workers' output the claims each gave up as
// failed ("claim failed; the item will be redelivered"), by "job worker".
func claimsFailed(s *system) map[string]string {
	out := map[string]string{}
	for id, w := range s.all {
		for _, line := range strings.Split(w.p.Output(), "\n") {
			if !strings.Contains(line, `msg="claim failed`) {
				continue
			}
			if i := strings.Index(line, " job="); i >= 0 {
				job, _, _ := strings.Cut(line[i+len(" job="):], " ")
				out[job+" "+id] = line
			}
		}
	}
	return out
}

// nearRestart is the restart of a serve or a node in whose downtime t
// falls, or within lease+5s after it was back; nil if none.
func (s *system) nearRestart(t time.Time) *restart {
	for _, r := range slices.Concat(s.restarts, s.nodeLoss) {
		if !t.Before(r.killed) && t.Before(r.ready.Add(s.sz.lease+5*time.Second)) {
			return &r
		}
	}
	return nil
}

// checkPlanned checks a job the soak submitted against what it planned.
func (r *report) checkPlanned(p *job, j *jobLog, kids []*jobLog, pieces []ev) {
	last := j.last()
	if last == nil {
		// Counted by checkHistory; for a fan-out, which pieces it waits for.
		switch p.kind {
		case kBatches:
			first := firstOutcomes(pieces)
			for i := 1; i <= p.n; i++ {
				if first[i] == "" {
					r.stuck[j.id] = append(r.stuck[j.id], i)
				}
			}
		case kChildren, kWaiting:
			for _, k := range kids {
				if k.last() == nil {
					r.stuck[j.id] = append(r.stuck[j.id], k.spec.Piece)
				}
			}
		}
		return
	}
	if r.finals[p.kind] == nil {
		r.finals[p.kind] = map[domain.State]int{}
	}
	r.finals[p.kind][last.to]++

	want, code := domain.StateSucceeded, ""
	switch p.kind {
	case kDoomed:
		want, code = domain.StateFailed, "DEMO_FAIL"
	case kBatches:
		if p.failEvery > 0 && p.n/p.failEvery > 0 {
			want, code = domain.StateFailed, "FANOUT_FAILED"
		}
	}
	if p.cancelled != nil {
		// The cancel decides: cancelled, or the job had ended already and
		// Cancel returned it as it was.
		want, code = domain.State(p.cancelled.State), ""
		if want == domain.StateFailed && p.kind == kDoomed {
			code = "DEMO_FAIL"
		}
		if want == domain.StateCancelled {
			if r.cancelFrom[p.kind] == nil {
				r.cancelFrom[p.kind] = map[domain.State]int{}
			}
			for _, e := range j.evs {
				if e.typ == domain.EvCancelled {
					r.cancelFrom[p.kind][e.from]++
				}
			}
		}
	} else if p.kind == kQueued || p.kind == kSched || p.kind == kRunning || p.kind == kWaiting {
		want = domain.StateCancelled // the scenario's cancel was never answered
	}
	if last.to != want || (code != "" && (last.err == nil || last.err.Code != code)) {
		var failedKids strings.Builder // what a parent's failure comes from
		for _, k := range kids {
			if kl := k.last(); kl != nil && kl.to != domain.StateSucceeded {
				fmt.Fprintf(&failedKids, "\n  child %s ended %s:\n%s", k.id, kl.to, k.history())
			}
		}
		r.bad(invOutcome, j, "%s ended %s (error %+v), want %s %s%s", p.kind, last.to, last.err, want, code, failedKids.String())
		return
	}

	switch {
	case want != domain.StateSucceeded && want != domain.StateFailed:
	case p.kind == kEcho || p.kind == kDelayed:
		if !bytes.Equal(last.result, p.payload) {
			r.bad(invResult, j, "result %s, payload %s", last.result, p.payload)
		}
	case p.kind == kSleep || p.kind == kCancel || p.kind == kRunning:
		r.checkSleep(j, last, p.seconds)
	case p.kind == kFlaky:
		var res struct{ Attempts int }
		if err := json.Unmarshal(last.result, &res); err != nil || res.Attempts != last.attempt || res.Attempts <= p.times {
			r.bad(invResult, j, "result %s of attempt %d, %d planned failures", last.result, last.attempt, p.times)
		}
		if n := j.count(domain.EvRetryScheduled); n > p.times {
			r.bad(invOutcome, j, "%d retries for %d planned failures", n, p.times)
		}
	case p.kind == kDoomed:
		if n := j.count(domain.EvRetryScheduled); n != p.maxRetries {
			r.bad(invOutcome, j, "failed after %d retries, max_retries %d", n, p.maxRetries)
		}
	}
	if p.kind == kDelayed {
		r.checkDelay(j)
	}
	switch p.kind {
	case kChildren, kWaiting:
		r.checkChildren(p, j, last, kids, pieces)
	case kBatches:
		r.checkBatches(p, j, last, pieces)
	}
}

func (r *report) checkSleep(j *jobLog, last *ev, seconds float64) {
	var res struct {
		Slept float64 `json:"slept_seconds"`
	}
	if err := json.Unmarshal(last.result, &res); err != nil || res.Slept != seconds {
		r.bad(invResult, j, "result %s, slept %v", last.result, seconds)
	}
}

func (r *report) checkDelay(j *jobLog) {
	if !j.has(domain.EvDue) {
		r.bad(invDelay, j, "no job.due")
		return
	}
	for _, e := range j.evs {
		if e.typ == domain.EvStarted {
			if e.at.Before(j.spec.RunAt) {
				r.bad(invDelay, j, "started at %s, run_at %s", e.at.Format(time.RFC3339Nano), j.spec.RunAt.Format(time.RFC3339Nano))
			}
			return
		}
	}
}

// waitingPlan is the plan of the parent's job.waiting event.
func waitingPlan(j *jobLog) *domain.FanoutPlan {
	for _, e := range j.evs {
		if e.typ == domain.EvWaiting && e.plan != nil {
			return e.plan
		}
	}
	return nil
}

// firstOutcomes folds a parent's piece events as a counter must: each piece
// number counts once, with its first outcome.
func firstOutcomes(pieces []ev) map[int]string {
	out := map[int]string{}
	for _, e := range pieces {
		if e.typ == domain.PcPlanned || e.piece < 1 {
			continue
		}
		if _, ok := out[e.piece]; !ok {
			out[e.piece] = e.typ
		}
	}
	return out
}

func tally(outcomes map[int]string) domain.FanoutCounts {
	var c domain.FanoutCounts
	for _, o := range outcomes {
		switch o {
		case domain.PcSucceeded:
			c.Succeeded++
		case domain.PcFailed:
			c.Failed++
		case domain.PcCancelled:
			c.Cancelled++
		}
	}
	return c
}

func sameCounts(a, b domain.FanoutCounts) bool {
	return a.Succeeded == b.Succeeded && a.Failed == b.Failed && a.Cancelled == b.Cancelled
}

// checkChildren checks a parent of children: exactly pieces 1..n exist
// (fewer only for a parent cancelled before it waited), each ended as the
// parent's end implies, and the parent's counts are its children's.
func (r *report) checkChildren(p *job, j *jobLog, last *ev, kids []*jobLog, pieces []ev) {
	seen := map[int]*jobLog{}
	for _, k := range kids {
		if k.spec.Piece < 1 || k.spec.Piece > p.n || seen[k.spec.Piece] != nil {
			r.bad(invChildren, j, "child %s has piece %d (of %d)", k.id, k.spec.Piece, p.n)
		}
		seen[k.spec.Piece] = k
	}
	waited := j.has(domain.EvWaiting)
	if waited && len(seen) != p.n {
		r.bad(invChildren, j, "%d children of %d", len(seen), p.n)
	}
	var got domain.FanoutCounts // the children's own ends
	for _, k := range kids {
		kl := k.last()
		if kl == nil {
			continue // counted as not terminal
		}
		switch kl.to {
		case domain.StateSucceeded:
			got.Succeeded++
			r.checkSleep(k, kl, p.seconds)
		case domain.StateFailed:
			got.Failed++
		case domain.StateCancelled:
			got.Cancelled++
		}
		// A child that ended before the parent's cancel (a failure of its
		// own while the parent still waited for the others) keeps its end;
		// those that had not ended are cancelled by the cascade.
		if last.to == domain.StateCancelled && kl.to != domain.StateCancelled && p.kind == kWaiting && kl.seq > last.seq {
			r.bad(invChildren, k, "child of cancelled %s ended %s; the parent:\n%s", j.id, kl.to, j.history())
		}
	}
	if last.to == domain.StateCancelled {
		return // a cancelled parent has no counts to check
	}
	if plan := waitingPlan(j); plan == nil || plan.Total != p.n || plan.Kind != domain.FanoutChildren {
		r.bad(invFanIn, j, "plan %+v, want %d children", plan, p.n)
	}
	want := domain.FanoutCounts{Succeeded: p.n}
	if last.counts == nil || !sameCounts(*last.counts, got) || !sameCounts(got, want) {
		r.bad(invFanIn, j, "parent counts %+v, children ended %+v, plan %+v", last.counts, got, want)
	}
	if pc := tally(firstOutcomes(pieces)); !sameCounts(pc, got) {
		r.bad(invFanIn, j, "piece events count %+v, children ended %+v", pc, got)
	}
	r.checkSummary(j, last, p.n)
}

// checkBatches checks a parent of batches: every piece 1..n has an outcome
// in the log, the first one as planned (every failEvery-th fails), and the
// parent's counts are those outcomes.
func (r *report) checkBatches(p *job, j *jobLog, last *ev, pieces []ev) {
	r.pieces += p.n
	if plan := waitingPlan(j); plan == nil || plan.Total != p.n || plan.Kind != domain.FanoutBatches {
		r.bad(invFanIn, j, "plan %+v, want %d batches", plan, p.n)
	}
	first := firstOutcomes(pieces)
	want := domain.FanoutCounts{}
	for i := 1; i <= p.n; i++ {
		out := domain.PcSucceeded
		if p.failEvery > 0 && i%p.failEvery == 0 {
			out = domain.PcFailed
			want.Failed++
		} else {
			want.Succeeded++
		}
		if first[i] != out {
			r.bad(invFanIn, j, "batch %d: first outcome %q, want %s", i, first[i], out)
		}
	}
	if len(first) != p.n {
		r.bad(invFanIn, j, "outcomes for %d pieces, plan %d", len(first), p.n)
	}
	if last.counts == nil || !sameCounts(*last.counts, want) {
		r.bad(invFanIn, j, "parent counts %+v, want %+v", last.counts, want)
	}
	r.checkSummary(j, last, p.n)
}

// checkSummary checks the parent's result against its counts.
func (r *report) checkSummary(j *jobLog, last *ev, total int) {
	var sum commands.Summary
	if err := json.Unmarshal(last.result, &sum); err != nil || last.counts == nil || sum.Total != total ||
		sum.Succeeded != last.counts.Succeeded || sum.Failed != last.counts.Failed || sum.Cancelled != last.counts.Cancelled {
		r.bad(invResult, j, "summary %s, counts %+v, total %d", last.result, last.counts, total)
	}
}

// known says what is known of the cause of an invariant's violations.
var known = map[string]string{
	invLeaseRestart: "known: a lease runs on while the server (or the cluster) cannot be written to, so an outage " +
		"longer than the lease plus commands.LeaseGrace takes the jobs of live workers (issue 8 (b), not fixed for long outages)",
	invLeaseClaimLost: "known: Store.Apply returns an error when job.started was appended but its reply or the record's " +
		"write was lost, and claimItem then takes the claim for failed: the job stays running under a worker that does not run it until its lease runs out",
}

// failures lists every invariant that does not hold, with examples.
func (r *report) failures() string {
	var b strings.Builder
	for _, inv := range invariants {
		if n := r.violations[inv]; n > 0 {
			fmt.Fprintf(&b, "%s: %d\n", inv, n)
			if k := known[inv]; k != "" {
				fmt.Fprintf(&b, "  (%s)\n", k)
			}
			for _, ex := range r.examples[inv] {
				fmt.Fprintf(&b, "  %s\n", strings.TrimRight(ex, "\n"))
			}
		}
	}
	return b.String()
}

// table is the invariant counts, one a line.
func (r *report) table() string {
	var b strings.Builder
	for _, inv := range invariants {
		fmt.Fprintf(&b, "  %-80s %d\n", inv, r.violations[inv])
	}
	return b.String()
}

// finishedBetween counts the jobs that ended in [from, to).
func (r *report) finishedBetween(from, to time.Time) int { return between(r.finishedAt, from, to) }

// between counts the times of sorted ts in [from, to).
func between(ts []time.Time, from, to time.Time) int {
	a := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(from) })
	b := sort.Search(len(ts), func(i int) bool { return !ts[i].Before(to) })
	return b - a
}

// nextFinished is the first moment after t a job ended.
func (r *report) nextFinished(t time.Time) (time.Time, bool) {
	i := sort.Search(len(r.finishedAt), func(i int) bool { return r.finishedAt[i].After(t) })
	if i == len(r.finishedAt) {
		return time.Time{}, false
	}
	return r.finishedAt[i], true
}

func sigName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}
