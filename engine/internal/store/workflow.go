package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Workflows (docs/workflows.md). A workflow is written in three steps:
//
//  1. its job's job.submitted (pending, the graph in its spec, its steps'
//     specs on the event): the whole workflow, one event;
//  2. its steps, each a job with an id derived from the workflow's (a
//     step with dependencies pending, held for them), pipelined;
//  3. job.waiting on the workflow's job: every step exists.
//
// A crash after 1 leaves a pending workflow whose steps are made again
// from its first event by whoever finds it (a repeat of the submit with
// the same idempotency key, the workflow counter of the leader), which
// then writes 3: the step ids are derived, so nothing is made twice. The
// workflow counter (maintenance.FanIn) admits or skips the steps as
// their dependencies end, and ends the workflow.

// WorkflowSubmitted is the outcome of a workflow's submit: its job as it
// is after the submit, whether it was created, and its steps' job ids.
type WorkflowSubmitted struct {
	Snapshot
	Created bool
	IDs     []string // by step
}

// StepID is the job id of step i (0-based) of workflow wf: piece i+1 of
// its fan-out.
func StepID(ns, wf string, i int) string { return ChildID(ns, wf, i+1) }

// StepIDs are the job ids of a workflow's steps: derived, or, for a step
// carried over from the run it resumes, that run's job.
func StepIDs(wf *domain.Job) []string {
	g := wf.Spec.Workflow
	ids := make([]string, len(g.Steps))
	for i, st := range g.Steps {
		ids[i] = st.Carried
		if ids[i] == "" {
			ids[i] = StepID(wf.Spec.Namespace, wf.ID, i)
		}
	}
	return ids
}

// SubmitWorkflow checks a workflow whole (the graph, each step as a
// submit: its type resolved, its payload against the type's schema),
// writing nothing if anything is refused, then writes it. With an
// idempotency key the workflow's id is derived from it, and a repeat
// returns the workflow as it is (Created false), making any step a crash
// left out.
func (s *Store) SubmitWorkflow(ctx context.Context, req *commands.WorkflowRequest) (WorkflowSubmitted, error) {
	now := time.Now().UTC()
	w, err := commands.PrepareWorkflow(req, now)
	if err != nil {
		return WorkflowSubmitted{}, err
	}
	if s.types != nil {
		for i := range w.Steps {
			sp := &w.Steps[i]
			if sp.Type, err = s.types.Resolve(ctx, sp.Namespace, sp.Type, sp.Payload); err != nil {
				return WorkflowSubmitted{}, commands.StepError(i, err)
			}
		}
	}
	id := domain.NewID()
	if w.Spec.Key != "" {
		id = domain.KeyedID(w.Spec.Namespace, w.Spec.Key)
	}
	return s.writeWorkflow(ctx, id, w, w.Spec.Key != "", now)
}

// writeWorkflow writes workflow w under id (derived: id must be new on
// every subject), then makes its steps.
func (s *Store) writeWorkflow(ctx context.Context, id string, w *commands.PreparedWorkflow, derived bool, now time.Time) (WorkflowSubmitted, error) {
	ev, err := commands.SubmitWorkflow(id, w, now)
	if err != nil {
		return WorkflowSubmitted{}, err
	}
	if p := PrincipalOf(ctx); p != nil {
		ev.Actor = p.Actor()
	}
	if err := s.checkWorkflowSize(ev); err != nil {
		return WorkflowSubmitted{}, err
	}
	if err := s.queues.Ensure(ctx, w.Spec.Queue); err != nil {
		return WorkflowSubmitted{}, err
	}
	wr := &Write[domain.Job]{Ref: Ref{Key: id, Subject: streams.EventSubject(w.Spec.Namespace, w.Spec.Queue, w.Spec.Type, id)}, Ev: ev}
	if derived {
		wr.ExpectOn = streams.EventFilter(id)
	}
	s.jobs.Write(ctx, "workflow", wr)
	var out WorkflowSubmitted
	switch {
	case wr.Lost && derived:
		existing, err := s.Current(ctx, id)
		if err != nil {
			return WorkflowSubmitted{}, err
		}
		if existing.Job.Spec.Workflow == nil {
			return WorkflowSubmitted{}, fmt.Errorf("idempotency key: it names job %s, which is not a workflow: %w", id, commands.ErrConflict)
		}
		out.Snapshot = existing
	case wr.Err != nil && !wr.Appended():
		return WorkflowSubmitted{}, wr.Err
	case wr.Err != nil:
		// The event is in the log, the record is not: the steps are made
		// from the event, and the record repaired on the way.
		cur, err := s.Current(ctx, id)
		if err != nil {
			return WorkflowSubmitted{}, fmt.Errorf("workflow %s is written; its record: %w", id, err)
		}
		out.Snapshot, out.Created = cur, true
	default:
		out.Snapshot, out.Created = snapshot(wr.Next), true
	}
	var steps []domain.Spec
	if out.Created {
		steps = w.Steps
	}
	snap, err := s.MakeSteps(ctx, out.Snapshot, steps)
	if err != nil {
		return WorkflowSubmitted{}, fmt.Errorf("workflow %s is written; its steps: %w", id, err)
	}
	out.Snapshot = snap
	out.IDs = StepIDs(snap.Job)
	return out, nil
}

// checkWorkflowSize refuses a workflow whose first event would not fit
// the event log's largest message, nor the connection's.
func (s *Store) checkWorkflowSize(ev *domain.Event) error {
	data, err := streams.EncodeEvent(ev)
	if err != nil {
		return err
	}
	limit := int64(s.topo.MaxPayload)
	if m := s.nc.MaxPayload(); m > 0 && m < limit {
		limit = m
	}
	if limit > 0 && int64(len(data))+4096 > limit {
		return &commands.InputError{Field: "steps", Err: commands.ErrInvalidWorkflow,
			Reason: fmt.Sprintf("the workflow of %d steps takes %d bytes as an event; the event log takes at most %d: fewer steps or smaller payloads",
				len(ev.Steps), len(data), limit-4096)}
	}
	return nil
}

// FirstEvent reads a workflow's job.submitted, which holds its steps'
// specs.
func (s *Store) FirstEvent(ctx context.Context, wf *domain.Job) (*domain.Event, error) {
	var first *domain.Event
	err := streams.ReadRange(ctx, s.nc, streams.EventsStream, streams.JobSubject(wf), 1, math.MaxUint64, 1, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return fmt.Errorf("event %d: %w", seq, err)
		}
		ev.Seq = seq
		first = ev
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workflow %s: its first event: %w", wf.ID, err)
	}
	if first == nil || first.Type != domain.EvSubmitted || len(first.Steps) != len(wf.Spec.Workflow.Steps) {
		return nil, fmt.Errorf("workflow %s: its first event does not hold its %d steps (event log purged?)", wf.ID, len(wf.Spec.Workflow.Steps))
	}
	return first, nil
}

// MakeSteps makes the steps of a pending workflow (from specs, or, when
// nil, from the workflow's first event), then records that it waits for
// them (job.waiting). A workflow that is not pending (its steps were made)
// is returned as it is. Each step is created once: its id is derived, a
// step that exists is left as it is.
func (s *Store) MakeSteps(ctx context.Context, wf Snapshot, specs []domain.Spec) (Snapshot, error) {
	j := wf.Job
	if j.Spec.Workflow == nil {
		return wf, fmt.Errorf("job %s is not a workflow: %w", j.ID, commands.ErrInvalidInput)
	}
	if !commands.MakingSteps(j.State) {
		return wf, nil
	}
	if specs == nil {
		first, err := s.FirstEvent(ctx, j)
		if err != nil {
			return wf, err
		}
		specs = first.Steps
	}
	g := j.Spec.Workflow
	ids := StepIDs(j)
	now := time.Now().UTC()
	actor := ""
	if p := PrincipalOf(ctx); p != nil {
		actor = p.Actor()
	}
	limited := map[string]bool{}
	var ws []*Write[domain.Job]
	for i, st := range g.Steps {
		if st.Carried != "" {
			continue
		}
		spec := specs[i]
		spec.Parent, spec.Piece = j.ID, i+1
		spec.Step = &domain.StepSpec{Name: st.Name}
		for _, d := range st.After {
			spec.Step.Inputs = append(spec.Step.Inputs, domain.StepInput{Name: g.Steps[d].Name, Job: ids[d]})
		}
		lim, ok := limited[spec.Queue]
		if !ok {
			l, err := s.limits.Of(ctx, spec.Queue)
			if err != nil {
				return wf, err
			}
			if err := s.queues.Ensure(ctx, spec.Queue); err != nil {
				return wf, err
			}
			lim = l.Limited()
			limited[spec.Queue] = lim
		}
		ev, err := commands.SubmitStep(ids[i], g, i, spec, lim, now)
		if err != nil {
			return wf, commands.StepError(i, err)
		}
		ev.Actor = actor
		ws = append(ws, &Write[domain.Job]{Ref: Ref{Key: ids[i], Subject: streams.EventSubject(spec.Namespace, spec.Queue, spec.Type, ids[i])},
			Ev: ev, ExpectOn: streams.EventFilter(ids[i])})
	}
	const chunk = 1000
	for k := 0; k < len(ws); k += chunk {
		part := ws[k:min(k+chunk, len(ws))]
		s.jobs.Write(ctx, "step", part...)
		for _, w := range part {
			if w.Err != nil && !w.Lost && !w.Appended() {
				return wf, w.Err // not written: the workflow stays pending, made again later
			}
		}
	}
	crash("workflow:steps")
	next, _, err := s.Apply(ctx, "workflow-start", wf, func(j *domain.Job) (*domain.Event, error) {
		return commands.StartWorkflow(j, s.actorOr(actor), time.Now().UTC())
	})
	if errors.Is(err, commands.ErrInvalidTransition) && next.Job != nil && !commands.MakingSteps(next.Job.State) {
		return next, nil // another made them and started it, or it was cancelled
	}
	return next, err
}

// actorOr is actor, or this process when none.
func (s *Store) actorOr(actor string) string {
	if actor != "" {
		return actor
	}
	return s.actor
}

// ReadWorkflow reads a workflow's job and its steps, to show them (Read,
// ReadRecords). A job that is not a workflow is not found as one.
func (s *Store) ReadWorkflow(ctx context.Context, id string) (*domain.Job, []string, []*domain.Job, error) {
	snap, err := s.Read(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	if snap.Job.Spec.Workflow == nil {
		return nil, nil, nil, fmt.Errorf("job %s is not a workflow: %w", id, commands.ErrNotFound)
	}
	ids := StepIDs(snap.Job)
	recs, err := s.ReadRecords(ctx, ids)
	if err != nil {
		return nil, nil, nil, err
	}
	steps := make([]*domain.Job, len(ids))
	for i, sid := range ids {
		steps[i] = recs[sid].Job
	}
	return snap.Job, ids, steps, nil
}

// ViewWorkflow renders a workflow with its steps' states.
func (s *Store) ViewWorkflow(ctx context.Context, id string) (*projections.WorkflowView, error) {
	wf, ids, steps, err := s.ReadWorkflow(ctx, id)
	if err != nil {
		return nil, err
	}
	return projections.ViewWorkflow(wf, ids, steps), nil
}

// RetryWorkflow resumes a workflow that ended without succeeding: a new
// workflow with the same graph and retry_of naming it, in which the steps
// that succeeded (and do not depend on one that runs again) are carried
// over, not run again, and the others, and what depends on them, run. Its
// id is derived from the old one's: a repeat returns the same run. A
// workflow that did not end, or succeeded, is refused
// (ErrInvalidTransition).
func (s *Store) RetryWorkflow(ctx context.Context, id string) (WorkflowSubmitted, error) {
	old, err := s.Current(ctx, id)
	if err != nil {
		return WorkflowSubmitted{}, err
	}
	j := old.Job
	if j.Spec.Workflow == nil {
		return WorkflowSubmitted{}, fmt.Errorf("job %s is not a workflow: %w", id, commands.ErrNotFound)
	}
	_, ids, steps, err := s.ReadWorkflow(ctx, id)
	if err != nil {
		return WorkflowSubmitted{}, err
	}
	succeeded := make([]bool, len(steps))
	for i, st := range steps {
		succeeded[i] = st != nil && commands.EndedSucceeded(st.State)
	}
	w, err := commands.ResumeWorkflow(j, ids, succeeded)
	if err != nil {
		return WorkflowSubmitted{}, err
	}
	first, err := s.FirstEvent(ctx, j)
	if err != nil {
		return WorkflowSubmitted{}, err
	}
	w.Steps = first.Steps
	now := time.Now().UTC()
	return s.writeWorkflow(ctx, ResumeID(j), w, true, now)
}

// ResumeID is the job id of the run that resumes workflow j (one at
// most: a repeated retry returns it).
func ResumeID(j *domain.Job) string {
	return domain.KeyedID(j.Spec.Namespace, "\x00workflow-retry:"+j.ID)
}

// resumed reports whether a run resumes workflow j, or did (purged since):
// it may carry j's steps that succeeded. An error reading it counts as yes.
func (s *Store) resumed(ctx context.Context, j *domain.Job) bool {
	_, err := s.Current(ctx, ResumeID(j))
	return !errors.Is(err, commands.ErrNotFound) || errors.Is(err, commands.ErrGone)
}

// inputReadWait bounds the read of one input's record.
const inputReadWait = 10 * time.Second

// StepInputs are the results of a step's dependencies, by step name: its
// inputs. A step whose dependency has no record (purged) is an error. With
// a budget (>= 0), a result kept in the files bucket is read only while the
// results so far and it fit budget bytes; those left out are not in the
// map. A budget < 0 reads them all.
func (s *Store) StepInputs(ctx context.Context, j *domain.Job, budget int) (map[string][]byte, error) {
	st := j.Spec.Step
	if st == nil {
		return nil, nil
	}
	ids := make([]string, len(st.Inputs))
	for i, in := range st.Inputs {
		ids[i] = in.Job
	}
	recs, err := s.ReadRecords(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(ids))
	size := 0
	for _, in := range st.Inputs {
		r, ok := recs[in.Job]
		if !ok {
			// Left out of the multi-get, or gone: read it alone. (Bounded:
			// a handler's context runs to its job's timeout, and a KV get
			// under a deadline has no default bound. The multi-get's direct
			// gets are bounded per answer; the object reads below, whose
			// length depends on their size, are not.)
			rctx, cancel := context.WithTimeout(ctx, inputReadWait)
			r, err = s.Read(rctx, in.Job)
			cancel()
			if err != nil {
				return nil, fmt.Errorf("input %s (job %s): %w", in.Name, in.Job, err)
			}
		}
		ref := r.Job.ResultRef
		if ref == nil {
			out[in.Name] = r.Job.Result
			size += len(r.Job.Result)
			continue
		}
		if budget >= 0 && size+int(ref.Size) > budget {
			continue
		}
		res, err := s.Result(ctx, r.Job)
		if err != nil {
			return nil, fmt.Errorf("input %s: %w", in.Name, err)
		}
		out[in.Name] = res
		size += len(res)
	}
	return out, nil
}

// Result is j's result, JSON: its record's, or the object of the files
// bucket its record names (Job.ResultRef). Nil when it has none.
func (s *Store) Result(ctx context.Context, j *domain.Job) ([]byte, error) {
	if j.ResultRef == nil {
		return j.Result, nil
	}
	fs, err := s.Files(ctx)
	if err != nil {
		return nil, err
	}
	return fs.ResultJSON(ctx, j.ID, *j.ResultRef)
}

// ReadSteps folds a workflow's piece events from the log into st, from the
// event after st.Pieces.UpTo to the last one, in order.
func (s *Store) ReadSteps(ctx context.Context, wf string, st *projections.Steps) error {
	_, err := streams.ReadSubject(ctx, s.nc, streams.EventsStream, streams.PieceSubject(wf), st.Pieces.UpTo+1,
		func(seq uint64, data []byte) error {
			if ev, err := streams.DecodeEvent(data); err == nil {
				st.Fold(seq, ev)
			}
			return nil
		})
	return err
}

// WorkflowFilter selects the events of every workflow's own job.
func WorkflowFilter() string {
	return streams.EventsPrefix + ".*.*." + streams.Token(domain.WorkflowType) + ".*"
}

// NotifyCancel tells the worker running job id, if any, that it was
// cancelled (best effort: one that misses it sees the cancel at its next
// lease renewal).
func (s *Store) NotifyCancel(id string) { _ = s.nc.Publish(streams.CancelSubject, []byte(id)) }
