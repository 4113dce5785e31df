package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

// Attributes of jetflow's spans (docs/tracing.md).
const (
	AttrJobID     = attribute.Key("jetflow.job.id")
	AttrJobType   = attribute.Key("jetflow.job.type")
	AttrQueue     = attribute.Key("jetflow.queue")
	AttrNamespace = attribute.Key("jetflow.namespace")
	AttrAttempt   = attribute.Key("jetflow.attempt")
	AttrWorker    = attribute.Key("jetflow.worker")
	AttrRemote    = attribute.Key("jetflow.remote") // an attempt of a worker outside the process (HTTP)
	// AttrOutcome is the event that recorded what the span did
	// (job.succeeded, job.retry_scheduled, piece.failed, ...), or
	// "discarded": the attempt no longer held its job.
	AttrOutcome   = attribute.Key("jetflow.outcome")
	AttrState     = attribute.Key("jetflow.state") // the job's state after it
	AttrErrorCode = attribute.Key("jetflow.error.code")
	AttrCreated   = attribute.Key("jetflow.created") // a submit: false when its idempotency key named an existing job
	AttrParent    = attribute.Key("jetflow.parent")  // a child's or a batch's parent
	AttrPiece     = attribute.Key("jetflow.piece")
	AttrFanout    = attribute.Key("jetflow.fanout.kind")
	AttrTotal     = attribute.Key("jetflow.fanout.total")
	AttrSucceeded = attribute.Key("jetflow.fanout.succeeded")
	AttrFailed    = attribute.Key("jetflow.fanout.failed")
	AttrCancelled = attribute.Key("jetflow.fanout.cancelled")
	AttrReason    = attribute.Key("jetflow.reason")
	// AttrLink says what a link points to: LinkPreviousAttempt,
	// LinkAttempt, LinkRetryOf.
	AttrLink = attribute.Key("jetflow.link")
)

// Names of the spans of the engine's decisions (Decided), each followed by
// the job's type.
const (
	SpanAdmit        = "admit"         // admission: a pending job takes a slot
	SpanReap         = "reap"          // the reaper: a timeout, a queue timeout, a stalled fan-out
	SpanLeaseExpired = "lease expired" // the lease sweeper, or a claimer, writes off a lost lease
	SpanTimeout      = "timeout"       // the lease sweeper ends an HTTP worker's attempt past its deadline
	SpanFanIn        = "fanin"         // the fan-in counter completes a parent
)

// What a link points to (AttrLink).
const (
	LinkPreviousAttempt = "previous_attempt" // an attempt's, to the attempt before it
	LinkAttempt         = "attempt"          // a decision's, to the attempt it is about
	LinkRetryOf         = "retry_of"         // a retry's submit, to the job it retries
)

// OutcomeDiscarded is the outcome of an attempt whose result was refused:
// it no longer held its job (cancelled, or its lease went to another).
const OutcomeDiscarded = "discarded"

type (
	claimKey  struct{} // the traceparent a claim records (job.started, job.claimed)
	presetKey struct{} // the ids of a span recorded again (IDGenerator)
	linkKey   struct{} // a link of submit spans
)

func jobAttrs(id string, s *domain.Spec) []attribute.KeyValue {
	return []attribute.KeyValue{AttrJobID.String(id), AttrJobType.String(s.Type), AttrQueue.String(s.Queue),
		AttrNamespace.String(s.Namespace)}
}

// link is a link to the span traceparent names, saying what it is; ok is
// false when traceparent names none.
func link(traceparent, what string) (trace.Link, bool) {
	sc := Parse(traceparent, "")
	if !sc.IsValid() {
		return trace.Link{}, false
	}
	return trace.Link{SpanContext: sc, Attributes: []attribute.KeyValue{AttrLink.String(what)}}, true
}

// parentOf returns ctx with the job's trace context as the parent of the
// spans started in it, and the option that makes a root span of a job
// that has none (whatever ctx carries).
func parentOf(ctx context.Context, s *domain.Spec) (context.Context, trace.SpanStartOption) {
	if pctx := WithRemote(ctx, s.TraceParent, s.TraceState); pctx != ctx {
		return pctx, nil
	}
	return ctx, trace.WithNewRoot()
}

func start(ctx context.Context, tr trace.Tracer, s *domain.Spec, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	ctx, root := parentOf(ctx, s)
	if root != nil {
		opts = append(opts, root)
	}
	return tr.Start(ctx, name, opts...)
}

// StartSubmit starts the span of the submit of job id (a producer span,
// child of ctx's span context, linked as LinkTo asked) and sets the
// spec's trace context to it: every attempt of the job is its child.
func StartSubmit(ctx context.Context, tr trace.Tracer, id string, spec *domain.Spec) trace.Span {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(jobAttrs(id, spec)...)}
	if spec.Parent != "" {
		opts = append(opts, trace.WithAttributes(AttrParent.String(spec.Parent), AttrPiece.Int(spec.Piece)))
	}
	if l, ok := ctx.Value(linkKey{}).(trace.Link); ok {
		opts = append(opts, trace.WithLinks(l))
	}
	_, span := tr.Start(ctx, "submit "+spec.Type, opts...)
	spec.TraceParent, spec.TraceState = Format(span.SpanContext())
	return span
}

// EndSubmit ends a submit's span: created is false when an idempotency key
// named an existing job; err is the submit's failure.
func EndSubmit(span trace.Span, created bool, err error) {
	span.SetAttributes(AttrCreated.Bool(created))
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// LinkTo returns ctx whose submit spans link to the span traceparent
// names (what: LinkRetryOf), or ctx itself when it names none.
func LinkTo(ctx context.Context, traceparent, what string) context.Context {
	l, ok := link(traceparent, what)
	if !ok {
		return ctx
	}
	return context.WithValue(ctx, linkKey{}, l)
}

// StartAttempt starts the span of an attempt at j (a consumer span), j
// being the record its claim is decided on: a child of the job's trace
// context, linked to the span of the attempt before it (j.AttemptTrace).
// The returned context carries the span, and the claim written in it
// names the span (ClaimTrace), so that the next attempt links to it.
func StartAttempt(ctx context.Context, tr trace.Tracer, j *domain.Job) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(jobAttrs(j.ID, &j.Spec)...)}
	if l, ok := link(j.AttemptTrace, LinkPreviousAttempt); ok {
		opts = append(opts, trace.WithLinks(l))
	}
	ctx, span := start(ctx, tr, &j.Spec, "run "+j.Spec.Type, opts...)
	return context.WithValue(ctx, claimKey{}, TraceParent(span.SpanContext())), span
}

// ClaimTrace is the traceparent a claim written in ctx records
// (Event.Trace of job.started, job.claimed): that of the attempt's span,
// "" when ctx has none. It allocates nothing.
func ClaimTrace(ctx context.Context) string {
	tp, _ := ctx.Value(claimKey{}).(string)
	return tp
}

// Claimed names the attempt on its span once its claim is written.
func Claimed(span trace.Span, attempt int, worker string) {
	span.SetAttributes(AttrAttempt.Int(attempt), AttrWorker.String(worker))
}

// Outcome sets what ev, the event that recorded how the span's work ended,
// says: the outcome, the state, and an error's code and message (status
// Error).
func Outcome(span trace.Span, ev *domain.Event) {
	span.SetAttributes(AttrOutcome.String(ev.Type))
	if !commands.Annotates(ev) {
		span.SetAttributes(AttrState.String(string(ev.To)))
	}
	if ev.Error != nil {
		if ev.Error.Code != "" {
			span.SetAttributes(AttrErrorCode.String(ev.Error.Code))
		}
		span.SetStatus(codes.Error, ev.Error.Message)
	}
}

// EndAttempt ends an attempt's span with its outcome: ev as recorded, or
// none when the attempt's result was discarded (err: why).
func EndAttempt(span trace.Span, ev *domain.Event, err error) {
	if ev != nil {
		Outcome(span, ev)
	} else {
		span.SetAttributes(AttrOutcome.String(OutcomeDiscarded))
		if err != nil {
			span.SetAttributes(AttrReason.String(err.Error()))
		}
	}
	span.End()
}

// StartRemoteClaim starts the span of the attempt of a worker outside the
// process (HTTP) at j, to name it in the claim written in the returned
// context (ClaimTrace) and to the worker, which continues it. The span is
// not ended here: EndRemoteAttempt records it, with the same ids, when the
// attempt ends, whichever gateway hears of it.
func StartRemoteClaim(ctx context.Context, tr trace.Tracer, j *domain.Job) context.Context {
	ctx, _ = StartAttempt(ctx, tr, j)
	return ctx
}

// EndRemoteAttempt records the span of the attempt of a worker outside the
// process whose claim named it (j.AttemptTrace; j is the record its end
// was decided on): from the claim to now, with the ids the claim handed to
// the worker (the provider must make ids with IDGenerator), a child of the
// job's trace context linked to the attempt before it, and ended as ev
// says. Nothing when the claim named no span.
func EndRemoteAttempt(ctx context.Context, tr trace.Tracer, j *domain.Job, ev *domain.Event) {
	sc := Parse(j.AttemptTrace, "")
	if !sc.IsValid() {
		return
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(j.ClaimedAt),
		trace.WithAttributes(jobAttrs(j.ID, &j.Spec)...),
		trace.WithAttributes(AttrAttempt.Int(remoteAttempt(j)), AttrWorker.String(j.Worker), AttrRemote.Bool(true))}
	if l, ok := link(j.PrevAttemptTrace, LinkPreviousAttempt); ok {
		opts = append(opts, trace.WithLinks(l))
	}
	_, span := start(context.WithValue(ctx, presetKey{}, sc), tr, &j.Spec, "run "+j.Spec.Type, opts...)
	EndAttempt(span, ev, nil)
}

// remoteAttempt is the number of the attempt that claimed j last: its
// job.started comes after its job.claimed (a worker that reports its end
// at once never starts it).
func remoteAttempt(j *domain.Job) int {
	if j.StartedAt.Before(j.ClaimedAt) {
		return j.Attempt + 1
	}
	return j.Attempt
}

// RemoteContext is ctx with the span of the attempt of a worker outside the
// process (j.AttemptTrace) as its remote parent, or the job's trace
// context when its claim named no span (tracing off): what the attempt
// writes in it (a fan-out's pieces) continues the job's trace. ctx itself
// when there is neither.
func RemoteContext(ctx context.Context, j *domain.Job) context.Context {
	if j.AttemptTrace != "" {
		return WithRemote(ctx, j.AttemptTrace, j.Spec.TraceState)
	}
	return WithRemote(ctx, j.Spec.TraceParent, j.Spec.TraceState)
}

// HandlerContext is the context of an attempt's handler: ctx with the
// attempt's span, or, when tracing is off here (span nil), with the trace
// context the work carries (traceparent, tracestate) as its remote
// parent, so that a handler's own spans continue the job's trace either
// way. ctx itself when there is neither.
func HandlerContext(ctx context.Context, span trace.Span, traceparent, tracestate string) context.Context {
	if span != nil {
		return trace.ContextWithSpan(ctx, span)
	}
	return WithRemote(ctx, traceparent, tracestate)
}

// StartFanOut starts the span of a coordinator making the pieces of its
// fan-out, a child of ctx's span (its attempt's). The children submitted
// in the returned context are its children; batches carry it
// (BatchItem.Trace).
func StartFanOut(ctx context.Context, tr trace.Tracer, parent *domain.Job, plan *domain.FanoutPlan) (context.Context, trace.Span) {
	return tr.Start(ctx, "fanout "+parent.Spec.Type, trace.WithAttributes(jobAttrs(parent.ID, &parent.Spec)...),
		trace.WithAttributes(AttrFanout.String(plan.Kind), AttrTotal.Int(plan.Total)))
}

// End ends a span, with status Error if err is not nil.
func End(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// StartBatch starts the span of an attempt at a batch (a consumer span)
// that began then (zero: now), a child of the fan-out that made it
// (item.Trace), or a root span.
func StartBatch(ctx context.Context, tr trace.Tracer, item *domain.BatchItem, attempt int, worker string, remote bool, began time.Time) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(began), trace.WithAttributes(
		AttrJobType.String(item.Type), AttrQueue.String(item.Queue), AttrParent.String(item.Parent),
		AttrPiece.Int(item.Piece), AttrAttempt.Int(attempt), AttrWorker.String(worker))}
	if remote {
		opts = append(opts, trace.WithAttributes(AttrRemote.Bool(true)))
	}
	return start(ctx, tr, &domain.Spec{TraceParent: item.Trace}, "run batch "+item.Type, opts...)
}

// What became of a batch's attempt that wrote no piece event (AttrOutcome).
const (
	OutcomeRetry   = "retry"   // its item goes back for another attempt
	OutcomeDropped = "dropped" // its parent ended: nothing recorded
)

// EndBatch ends a batch attempt's span with what was decided of it: its
// piece event (piece.succeeded, piece.failed), a retry, or nothing (its
// parent ended); err is a failure to record it.
func EndBatch(span trace.Span, step commands.BatchStep, err error) {
	outcome := step.Piece
	switch {
	case step.Retry:
		outcome = OutcomeRetry
	case step.Drop:
		outcome = OutcomeDropped
	}
	span.SetAttributes(AttrOutcome.String(outcome))
	jerr := step.Error
	if err != nil {
		jerr = &domain.JobError{Message: err.Error()}
	}
	if jerr != nil {
		if jerr.Code != "" {
			span.SetAttributes(AttrErrorCode.String(jerr.Code))
		}
		span.SetStatus(codes.Error, jerr.Message)
	}
	span.End()
}

// Decided records a decision of the engine about job j (the record it was
// decided on) that wrote ev, as a span from began to now named name and
// the job's type: a child of the job's trace context, linked to the span
// of the job's attempt it concerns (j.AttemptTrace), with ev's outcome.
func Decided(ctx context.Context, tr trace.Tracer, name string, j *domain.Job, ev *domain.Event, began time.Time, attrs ...attribute.KeyValue) {
	opts := []trace.SpanStartOption{trace.WithTimestamp(began), trace.WithAttributes(jobAttrs(j.ID, &j.Spec)...)}
	if j.Attempt > 0 {
		opts = append(opts, trace.WithAttributes(AttrAttempt.Int(j.Attempt)))
	}
	if l, ok := link(j.AttemptTrace, LinkAttempt); ok {
		opts = append(opts, trace.WithLinks(l))
	}
	if ev.Message != "" {
		opts = append(opts, trace.WithAttributes(AttrReason.String(ev.Message)))
	}
	opts = append(opts, trace.WithAttributes(attrs...)) // last: the caller's reason wins over the event's message
	_, span := start(ctx, tr, &j.Spec, name+" "+j.Spec.Type, opts...)
	Outcome(span, ev)
	span.End()
}
