package maintenance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// The workflow counter: the fan-in counter's work for a workflow's job,
// whose pieces are its steps (docs/workflows.md). As for a fan-out, what
// became of each step is read from the workflow's piece events in the log,
// in order (projections.Steps), so its picture is always the fold of a
// prefix of the log. From it, each round decides (commands.NextMove) which
// pending steps their dependencies now allow (admitted: job.admitted, an
// expected-sequence transition, so two counters at once admit a step
// once) and which they never will (skipped), and whether the steps decide
// the workflow (commands.WorkflowVerdict).
//
// Piece events tell of steps that ended. So that a counter that starts (a
// new leader) also finds the workflows whose news came before it, and
// those whose submitter died before their steps were made, it follows the
// workflows' own events too: the last event of each, then new ones. Every
// workflow that has not ended is looked at: its steps' outcomes read from
// the log, the admissions they call for written (a step admitted already
// is refused, writing nothing), a workflow pending for longer than
// WorkflowGrace has its steps made.

// DefaultWorkflowGrace is how long a workflow may stay pending before the
// counter makes its steps: its submitter died, or is slow.
const DefaultWorkflowGrace = 10 * time.Second

// wfTally is what a counter knows of one workflow.
type wfTally struct {
	g          *domain.Workflow
	steps      *projections.Steps
	dependents [][]int
	ids        []string
	admitted   []bool // admissions written (or found done) this term
	stopped    []bool // skips and cancels written this term
	again      []int  // steps whose write failed: looked at again next round
	fresh      bool   // look at every step (the first round of a term)
	failing    bool
	making     time.Time // when this counter began making its steps
}

func newWfTally(j *domain.Job) *wfTally {
	g := j.Spec.Workflow
	n := len(g.Steps)
	return &wfTally{g: g, steps: projections.NewSteps(g), dependents: commands.Dependents(g), ids: store.StepIDs(j),
		admitted: make([]bool, n), stopped: make([]bool, n), fresh: true}
}

// look is news of a workflow from its own events.
type look struct {
	seq   uint64
	ended bool
}

// looks are the workflows to look at, filled by the watch and taken by the
// counter's loop (latest news of each).
type looks struct {
	mu  sync.Mutex
	ids map[string]look
}

func newLooks() *looks { return &looks{ids: map[string]look{}} }

func (l *looks) add(id string, lk look) {
	l.mu.Lock()
	if cur, ok := l.ids[id]; !ok || cur.seq < lk.seq {
		l.ids[id] = lk
	}
	l.mu.Unlock()
}

func (l *looks) take() map[string]look {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ids) == 0 {
		return nil
	}
	out := l.ids
	l.ids = map[string]look{}
	return out
}

// watchWorkflows follows the last event of every workflow's job, then
// each new one, until ctx ends, and passes what it finds to the loop.
func (f *FanIn) watchWorkflows(ctx context.Context) {
	for ctx.Err() == nil {
		err := f.watchOnce(ctx)
		if err != nil && ctx.Err() == nil {
			f.log.Warn("follow workflows; again", "err", err)
			sleepCtx(ctx, time.Second)
		}
	}
}

func (f *FanIn) watchOnce(ctx context.Context) error {
	cons, err := f.store.Events().OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{store.WorkflowFilter()}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy,
	})
	if err != nil {
		return err
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(500))
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	var head domain.Event
	for {
		m, err := it.Next()
		if err != nil {
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return err
		}
		meta, err := m.Metadata()
		if err != nil {
			continue
		}
		// The head: the workflow's job.submitted holds every step's spec.
		ev := &head
		if err := streams.DecodeEventHead(m.Data(), ev); err != nil {
			continue
		}
		switch {
		case commands.Annotates(ev):
			// An annotation (counts the counter wrote): nothing new.
		case ev.To.Terminal():
			// A tally that knows the workflow hears of its end (a cancel).
			f.looks.add(ev.JobID, look{seq: meta.Sequence.Stream, ended: true})
		default:
			f.looks.add(ev.JobID, look{seq: meta.Sequence.Stream})
		}
	}
}

// lookAtWorkflows takes what the watch found: a workflow not known gets a
// tally (its steps' outcomes read from the log); a known one whose record
// moved is read again.
func (f *FanIn) lookAtWorkflows(ctx context.Context) {
	for id, lk := range f.looks.take() {
		t := f.tallies[id]
		if t == nil {
			if lk.ended {
				continue
			}
			if err := f.catchUp(ctx, id, 0); err != nil {
				f.log.Warn("look at workflow", "workflow", id, "err", err)
				delete(f.tallies, id)
				f.looks.add(id, lk) // next round
				continue
			}
			t = f.tallies[id]
			if t.wf != nil {
				if err := f.store.ReadSteps(ctx, id, t.wf.steps); err != nil {
					f.log.Warn("read the steps of workflow", "workflow", id, "err", err)
					delete(f.tallies, id)
					f.looks.add(id, lk)
				}
			}
			continue
		}
		if t.done || t.snap.Job != nil && t.snap.Job.Seq >= lk.seq {
			continue
		}
		snap, err := f.store.Current(ctx, id)
		if err != nil {
			f.log.Warn("look at workflow", "workflow", id, "err", err)
			continue
		}
		t.snap = snap
		t.done = snap.Job.State.Terminal()
		if t.wf != nil {
			t.wf.fresh = true
		}
	}
}

// settleWorkflow is one round of a workflow: the moves its steps' outcomes
// call for, then its end or its counts.
func (f *FanIn) settleWorkflow(ctx context.Context, id string, t *tally) {
	w := t.wf
	j := t.snap.Job
	if j == nil || t.done {
		return
	}
	switch {
	case j.State.Terminal():
		t.done, t.wf = true, nil
		return
	case commands.MakingSteps(j.State):
		f.makeSteps(ctx, id, t)
		return
	case !commands.AwaitsPieces(j.State):
		return
	}
	out := w.steps.Outcome
	changed := w.steps.Changed()
	failing := commands.Failing(w.g, out) >= 0
	all := w.fresh || failing && !w.failing
	w.fresh, w.failing = false, failing
	if done, bad := commands.WorkflowVerdict(w.g, out); done {
		f.finishWorkflow(ctx, id, t, bad)
		return
	}
	if !all && len(changed) == 0 && len(w.again) == 0 {
		if t.dirty && time.Since(t.flushed) >= f.cfg.Flush {
			f.writeCounts(ctx, id, t)
		}
		return
	}
	var candidates []int
	if all {
		candidates = make([]int, len(out))
		for i := range candidates {
			candidates[i] = i
		}
	} else {
		seen := map[int]bool{}
		for _, c := range changed {
			for _, d := range w.dependents[c] {
				if !seen[d] {
					seen[d] = true
					candidates = append(candidates, d)
				}
			}
		}
		for _, i := range w.again {
			if !seen[i] {
				seen[i] = true
				candidates = append(candidates, i)
			}
		}
	}
	w.again = nil
	var admit, stop []int
	for _, i := range candidates {
		switch commands.NextMove(w.g, out, i, failing) {
		case commands.StepAdmit:
			if !w.admitted[i] {
				admit = append(admit, i)
			}
		case commands.StepStop:
			if !w.stopped[i] {
				stop = append(stop, i)
			}
		}
	}
	if len(admit) > 0 {
		f.admitSteps(ctx, t, admit)
	}
	if len(stop) > 0 {
		f.stopSteps(ctx, t, stop)
	}
	if len(changed) > 0 {
		t.dirty = true
	}
	if t.dirty && time.Since(t.flushed) >= f.cfg.Flush {
		f.writeCounts(ctx, id, t)
	}
}

// makeSteps makes the steps of a workflow left pending for WorkflowGrace
// (its submitter died before it made them all), in the background: there
// may be ten thousand.
func (f *FanIn) makeSteps(ctx context.Context, id string, t *tally) {
	w, j := t.wf, t.snap.Job
	if time.Since(j.UpdatedAt) < f.cfg.WorkflowGrace || time.Since(w.making) < time.Minute {
		return
	}
	w.making = time.Now()
	snap := t.snap
	go func() {
		f.log.Info("making the steps of a workflow left pending", "workflow", id)
		next, err := f.store.MakeSteps(ctx, snap, nil)
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warn("make the steps of a workflow", "workflow", id, "err", err)
			}
			return
		}
		f.looks.add(id, look{seq: next.Job.Seq})
	}()
}

// snapshots reads the records of steps idx of t (one that is missing is
// read from the log).
func (f *FanIn) stepSnapshots(ctx context.Context, t *tally, idx []int) []store.Snapshot {
	ids := make([]string, len(idx))
	for k, i := range idx {
		ids[k] = t.wf.ids[i]
	}
	recs, err := f.store.Records(ctx, ids)
	if err != nil && ctx.Err() == nil {
		f.log.Warn("read steps; reading each", "err", err)
	}
	out := make([]store.Snapshot, len(ids))
	for k, id := range ids {
		cur, ok := recs[id]
		if !ok {
			cur, _ = f.store.Current(ctx, id) // not found: Job nil, refused by ApplyMany
		}
		out[k] = cur
	}
	return out
}

// admitSteps admits steps idx of t, whose dependencies allow them: a step
// that is no longer pending for them (admitted already, by this counter
// before it died or by another) is refused, writing nothing.
func (f *FanIn) admitSteps(ctx context.Context, t *tally, idx []int) {
	curs := f.stepSnapshots(ctx, t, idx)
	holds := map[string]*domain.Hold{}
	for _, c := range curs {
		if c.Job == nil {
			continue
		}
		q := c.Job.Spec.Queue
		if _, ok := holds[q]; ok {
			continue
		}
		l, err := f.store.Limits().Of(ctx, q)
		switch {
		case err != nil:
			f.log.Warn("limits of a step's queue", "queue", q, "err", err)
			t.wf.again = append(t.wf.again, idx...) // looked at again next round
			return
		case l.MaxRunningPerUser > 0 && l.MaxRunning == 0:
			holds[q] = &domain.Hold{Limit: domain.LimitUser, Max: l.MaxRunningPerUser}
		case l.Limited(): // its queue's admission admits it, whatever its limits
			holds[q] = &domain.Hold{Limit: domain.LimitQueue, Max: l.MaxRunning}
		default:
			holds[q] = nil
		}
	}
	store.Crash("wfadmit:decided")
	errs := f.store.ApplyMany(ctx, "wfadmit", curs, func(j *domain.Job) (*domain.Event, error) {
		return commands.AdmitStep(j, holds[j.Spec.Queue], f.store.Actor(), time.Now().UTC())
	})
	for k, i := range idx {
		switch err := errs[k]; {
		case err == nil, errors.Is(err, commands.ErrInvalidTransition):
			t.wf.admitted[i] = true // admitted now, or moved on already
		default:
			if ctx.Err() == nil {
				f.log.Warn("admit step", "workflow", t.snap.Job.ID, "step", t.wf.g.Steps[i].Name, "err", err)
			}
			t.wf.again = append(t.wf.again, i)
		}
	}
}

// stopSteps skips (or cancels, if they were admitted) steps idx of t, whose
// dependencies will never let them run, or which a failing workflow no
// longer wants.
func (f *FanIn) stopSteps(ctx context.Context, t *tally, idx []int) {
	w := t.wf
	reasons := make(map[string]string, len(idx))
	for _, i := range idx {
		reasons[w.ids[i]] = f.stopReason(w, i)
	}
	curs := f.stepSnapshots(ctx, t, idx)
	errs := f.store.ApplyMany(ctx, "wfstop", curs, func(j *domain.Job) (*domain.Event, error) {
		return commands.StopStep(j, reasons[j.ID], f.store.Actor(), time.Now().UTC())
	})
	for k, i := range idx {
		switch err := errs[k]; {
		case err == nil:
			w.stopped[i] = true
			// Read queued, it may have been running already: an in-process
			// worker's claim writes its record later (store.DeferRecord),
			// and the stop was then decided again on the log (Apply). A
			// notice to a job no worker holds is ignored.
			if c := curs[k].Job; c != nil && (commands.CancelNotifies(c.State) || commands.InQueue(c.State)) {
				f.store.NotifyCancel(c.ID)
			}
		case errors.Is(err, commands.ErrTerminal):
			w.stopped[i] = true
		default:
			if ctx.Err() == nil {
				f.log.Warn("stop step", "workflow", t.snap.Job.ID, "step", w.g.Steps[i].Name, "err", err)
			}
			w.again = append(w.again, i)
		}
	}
}

// stopReason says why step i of w does not run.
func (f *FanIn) stopReason(w *wfTally, i int) string {
	out := w.steps.Outcome
	if bad := commands.Failing(w.g, out); bad >= 0 {
		return fmt.Sprintf("workflow fails: step %s %s", w.g.Steps[bad].Name, out[bad])
	}
	for _, d := range w.g.Steps[i].After {
		if out[d].Bad() {
			return fmt.Sprintf("dependency %s %s", w.g.Steps[d].Name, out[d])
		}
	}
	return "its dependencies did not succeed"
}

// writeCounts writes a workflow's counts (job.fanin): its progress.
func (f *FanIn) writeCounts(ctx context.Context, id string, t *tally) {
	counts := t.wf.steps.Tally()
	next, _, err := f.store.Apply(ctx, "fanin", t.snap, func(j *domain.Job) (*domain.Event, error) {
		return commands.FanIn(j, counts, f.store.Actor(), time.Now().UTC())
	})
	t.failed = false
	switch {
	case err == nil:
		t.snap, t.dirty, t.flushed = next, false, time.Now()
	case errors.Is(err, commands.ErrStale):
		t.snap, t.dirty = next, false
	case errors.Is(err, commands.ErrInvalidTransition):
		t.snap, t.dirty = next, false
		t.done = next.Job.State.Terminal()
	default:
		t.failed = true
		f.log.Warn("write workflow counts", "workflow", id, "err", err)
	}
}

// finishWorkflow ends a workflow its steps decide (bad: the step whose
// failure fails it, -1 if none). A workflow that fails cancels, through
// its cascade, the steps that did not end.
func (f *FanIn) finishWorkflow(ctx context.Context, id string, t *tally, bad int) {
	w := t.wf
	counts := w.steps.Tally()
	msg := ""
	if bad >= 0 {
		msg = w.steps.Errors[bad]
	}
	next, ev, err := f.store.Apply(ctx, "wfend", t.snap, func(j *domain.Job) (*domain.Event, error) {
		return commands.FinishWorkflow(j, w.steps.Outcome, counts, msg, f.store.Actor(), time.Now().UTC())
	})
	t.failed = false
	switch {
	case err == nil:
		t.snap, t.done, t.wf = next, true, nil
		f.log.Info("workflow ended", "workflow", id, "outcome", ev.To, "succeeded", counts.Succeeded,
			"failed", counts.Failed, "cancelled", counts.Cancelled)
	case errors.Is(err, commands.ErrInvalidTransition):
		t.snap, t.dirty = next, false
		if t.done = next.Job.State.Terminal(); t.done {
			t.wf = nil
		}
	default:
		t.failed = true
		f.log.Warn("end workflow", "workflow", id, "err", err)
	}
}
