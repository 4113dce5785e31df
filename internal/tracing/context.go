package tracing

import (
	"context"
	"net/textproto"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of jetflow's spans.
const ScopeName = "github.com/jetflow/jetflow"

// The W3C header names (lower case: NATS headers are case-sensitive).
const (
	TraceParentHeader = "traceparent"
	TraceStateHeader  = "tracestate"
)

// MaxTraceState bounds the tracestate a job keeps: the W3C
// recommendation of what every vendor must pass on (512 bytes). Members
// past it are dropped from the end.
const MaxTraceState = 512

// defaultProvider is the global provider before anyone set one: a
// delegate that starts non-recording spans (and allocates for them).
var defaultProvider = otel.GetTracerProvider()

// Tracer is jetflow's tracer of the global provider, nil when tracing is
// off: the provider is the default one or a noop.TracerProvider. It reads
// one atomic value and allocates nothing, so it may be called per job.
func Tracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if tp == defaultProvider {
		return nil
	}
	if _, ok := tp.(noop.TracerProvider); ok {
		return nil
	}
	return tp.Tracer(ScopeName)
}

var w3c = propagation.TraceContext{}

// carrier is a traceparent and a tracestate as a propagation carrier.
type carrier struct{ tp, ts string }

func (c *carrier) Get(key string) string {
	switch key {
	case TraceParentHeader:
		return c.tp
	case TraceStateHeader:
		return c.ts
	}
	return ""
}

func (c *carrier) Set(key, value string) {
	switch key {
	case TraceParentHeader:
		c.tp = value
	case TraceStateHeader:
		c.ts = value
	}
}

func (c *carrier) Keys() []string { return []string{TraceParentHeader, TraceStateHeader} }

// Parse reads a W3C traceparent and tracestate (as the headers carry
// them) into a remote span context; one that is not valid is the zero
// SpanContext (the W3C rule: an invalid traceparent is ignored, and a
// tracestate that does not parse is dropped without the traceparent).
func Parse(traceparent, tracestate string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(w3c.Extract(context.Background(), &carrier{tp: traceparent, ts: tracestate}))
}

// Format writes a span context as a W3C traceparent and tracestate, the
// tracestate cut to MaxTraceState; an invalid one is "", "".
func Format(sc trace.SpanContext) (traceparent, tracestate string) {
	if !sc.IsValid() {
		return "", ""
	}
	var c carrier
	w3c.Inject(trace.ContextWithSpanContext(context.Background(), sc), &c)
	return c.tp, cutTraceState(c.ts)
}

// TraceParent is sc's traceparent alone ("" if sc is not valid).
func TraceParent(sc trace.SpanContext) string {
	tp, _ := Format(sc)
	return tp
}

// cutTraceState drops the members of a tracestate past MaxTraceState
// bytes, from the end (the W3C order is newest first).
func cutTraceState(ts string) string {
	for len(ts) > MaxTraceState {
		i := strings.LastIndexByte(ts, ',')
		if i < 0 {
			return ""
		}
		ts = ts[:i]
	}
	return ts
}

// Header is a header map whose keys are case-sensitive (a nats.Header):
// Get reads a lower-case W3C name or its canonical MIME spelling (that of
// an http.Header).
type Header map[string][]string

// Get is the first value of key.
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	canonical := canonicalTraceParent
	if key != TraceParentHeader {
		canonical = textproto.CanonicalMIMEHeaderKey(key)
	}
	if v := h[canonical]; len(v) > 0 {
		return v[0]
	}
	return ""
}

var canonicalTraceParent = textproto.CanonicalMIMEHeaderKey(TraceParentHeader)

// FromHeaders is the remote span context of a request's traceparent and
// tracestate headers (get reads one), the zero SpanContext when it carries
// none that is valid. Without a traceparent it costs one lookup.
func FromHeaders(get func(key string) string) trace.SpanContext {
	tp := get(TraceParentHeader)
	if tp == "" {
		return trace.SpanContext{}
	}
	return Parse(tp, get(TraceStateHeader))
}

// Extract returns ctx with the remote span context the headers carry (a
// traceparent and its tracestate), or ctx itself when they carry none
// that is valid. Without a traceparent it costs one lookup.
func Extract(ctx context.Context, get func(key string) string) context.Context {
	sc := FromHeaders(get)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Inject sets the traceparent and tracestate of ctx's span context with
// set; nothing when ctx has none.
func Inject(ctx context.Context, set func(key, value string)) {
	tp, ts := Format(trace.SpanContextFromContext(ctx))
	if tp == "" {
		return
	}
	set(TraceParentHeader, tp)
	if ts != "" {
		set(TraceStateHeader, ts)
	}
}

// WithRemote returns ctx carrying the trace context traceparent and
// tracestate name as its remote parent, or ctx itself when traceparent is
// empty or not valid.
func WithRemote(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	sc := Parse(traceparent, tracestate)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}
