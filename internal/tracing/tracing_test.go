package tracing

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/jetflow/jetflow/internal/domain"
)

const (
	validTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanID  = "00f067aa0ba902b7"
)

func TestParseAndFormat(t *testing.T) {
	sc := Parse(validTP, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")
	if !sc.IsValid() || !sc.IsRemote() || sc.TraceID().String() != traceID || sc.SpanID().String() != spanID || !sc.IsSampled() {
		t.Fatalf("Parse: %+v", sc)
	}
	tp, ts := Format(sc)
	if tp != validTP || ts != "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7" {
		t.Fatalf("Format: %q %q", tp, ts)
	}
	// A tracestate that does not parse is dropped, the traceparent kept.
	if sc := Parse(validTP, "not a tracestate"); !sc.IsValid() || sc.TraceState().Len() != 0 {
		t.Fatalf("bad tracestate: %+v", sc)
	}
	for _, bad := range []string{
		"",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",   // upper case
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",   // zero trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   // zero span id
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   // version ff
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", // version 00 with more
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",    // short trace id
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",      // no flags
		"garbage",
	} {
		if sc := Parse(bad, ""); sc.IsValid() {
			t.Errorf("Parse(%q) = %v, want nothing", bad, sc)
		}
		if ctx := WithRemote(context.Background(), bad, ""); trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("WithRemote(%q) carries a span context", bad)
		}
	}
	if tp, ts := Format(trace.SpanContext{}); tp != "" || ts != "" {
		t.Fatalf("Format of nothing: %q %q", tp, ts)
	}
}

// A tracestate is kept up to MaxTraceState bytes: members past it are
// dropped from the end.
func TestTraceStateIsCut(t *testing.T) {
	var members []string
	for i := 0; i < 32; i++ {
		members = append(members, "k"+strings.Repeat("x", 10)+string(rune('a'+i%26))+string(rune('a'+i/26))+"="+strings.Repeat("v", 20))
	}
	full := strings.Join(members, ",")
	sc := Parse(validTP, full)
	if sc.TraceState().Len() != 32 {
		t.Fatalf("parsed %d members of %d bytes", sc.TraceState().Len(), len(full))
	}
	_, ts := Format(sc)
	if len(ts) > MaxTraceState || len(ts) < MaxTraceState-40 || !strings.HasPrefix(full, ts) || !strings.HasPrefix(full[len(ts):], ",") {
		t.Fatalf("cut tracestate of %d bytes: %q", len(ts), ts)
	}
}

func TestHeaders(t *testing.T) {
	h := Header{"Traceparent": {validTP}, "tracestate": {"a=b"}}
	sc := FromHeaders(h.Get)
	if sc.SpanID().String() != spanID || sc.TraceState().Get("a") != "b" {
		t.Fatalf("FromHeaders: %+v", sc)
	}
	hh := http.Header{}
	Inject(trace.ContextWithRemoteSpanContext(context.Background(), sc), hh.Set)
	if hh.Get("traceparent") != validTP || hh.Get("tracestate") != "a=b" {
		t.Fatalf("Inject: %v", hh)
	}
	if sc := FromHeaders(Header{"traceparent": {"nope"}}.Get); sc.IsValid() {
		t.Fatalf("an invalid traceparent gave %v", sc)
	}
	ctx := context.Background()
	if Extract(ctx, Header{}.Get) != ctx {
		t.Fatal("Extract without headers made a new context")
	}
}

// With tracing off (the global provider is the default), what the hot
// path calls allocates nothing: a job that no one traces costs nil checks.
func TestOffAllocatesNothing(t *testing.T) {
	if Tracer() != nil {
		t.Fatal("tracing is on with the default provider")
	}
	ctx := context.Background()
	j := &domain.Job{ID: "j", Spec: domain.Spec{Type: "t"}}
	get := Header(http.Header{}).Get // an http.Header's own Get allocates (it canonicalizes the key)
	allocs := testing.AllocsPerRun(1000, func() {
		if Tracer() != nil {
			t.Fatal("on")
		}
		_ = ClaimTrace(ctx)
		_ = HandlerContext(ctx, nil, j.Spec.TraceParent, j.Spec.TraceState)
		_ = WithRemote(ctx, j.Spec.TraceParent, j.Spec.TraceState)
		_ = TraceParent(trace.SpanContextFromContext(ctx))
		_ = RemoteContext(ctx, j)
		_ = FromHeaders(get)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per job with tracing off", allocs)
	}
}

func TestConfigured(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "console"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		for _, k := range []string{"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"} {
			t.Setenv(k, c.env[k])
		}
		if got := Configured(); got != c.want {
			t.Errorf("Configured() with %v = %v", c.env, got)
		}
	}
}

// Setup leaves tracing off unless asked, refuses an exporter it does not
// know naming the variable, and with one installs the global provider.
func TestSetup(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_TRACES_EXPORTER", "")
	stop, err := Setup(context.Background(), "test")
	if err != nil || Tracer() != nil {
		t.Fatalf("Setup without OTEL_*: %v, tracer %v", err, Tracer())
	}
	_ = stop(context.Background())
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin-carrier-pigeon")
	if _, err := Setup(context.Background(), "test"); err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER") {
		t.Fatalf("Setup with an unknown exporter: %v", err)
	}
	if Tracer() != nil {
		t.Fatal("a refused Setup turned tracing on")
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "console")
	stop, err = Setup(context.Background(), "test")
	if err != nil || Tracer() == nil {
		t.Fatalf("Setup with console: %v", err)
	}
	if err := stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	otel.SetTracerProvider(defaultProvider)
	if Tracer() != nil {
		t.Fatal("tracing still on")
	}
}

// A span recorded again (an HTTP worker's attempt) gets the ids its claim
// named, as a root and as a child.
func TestRemoteAttemptKeepsItsIds(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(append(ProviderOptions("test"), sdktrace.WithSyncer(exp))...)
	tr := tp.Tracer(ScopeName)
	for _, parent := range []string{"", validTP} {
		j := &domain.Job{ID: "j1", Spec: domain.Spec{Type: "t", Queue: "q", Namespace: "default", TraceParent: parent}}
		ctx := StartRemoteClaim(context.Background(), tr, j)
		j.AttemptTrace = ClaimTrace(ctx)
		claimed := Parse(j.AttemptTrace, "")
		if !claimed.IsValid() || parent != "" && claimed.TraceID().String() != traceID {
			t.Fatalf("claim named %q (parent %q)", j.AttemptTrace, parent)
		}
		exp.Reset()
		EndRemoteAttempt(context.Background(), tr, j, &domain.Event{Type: domain.EvSucceeded, To: domain.StateSucceeded})
		spans := exp.GetSpans()
		if len(spans) != 1 || spans[0].SpanContext.TraceID() != claimed.TraceID() || spans[0].SpanContext.SpanID() != claimed.SpanID() {
			t.Fatalf("recorded %+v, want ids %v", spans, claimed)
		}
		if (parent == "") != !spans[0].Parent.IsValid() {
			t.Fatalf("parent %v for job trace %q", spans[0].Parent, parent)
		}
	}
}

// FuzzParse: any header pair parses without panic; one that parses
// formats back to the same traceparent (version 00) and a tracestate
// within MaxTraceState.
func FuzzParse(f *testing.F) {
	f.Add(validTP, "a=b")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff", strings.Repeat("k=v,", 40))
	f.Fuzz(func(t *testing.T, tp, ts string) {
		sc := Parse(tp, ts)
		if !sc.IsValid() {
			return
		}
		gtp, gts := Format(sc)
		if len(gts) > MaxTraceState {
			t.Fatalf("tracestate of %d bytes", len(gts))
		}
		if strings.HasPrefix(tp, "00-") && gtp[:53] != tp[:53] {
			t.Fatalf("Format(Parse(%q)) = %q", tp, gtp)
		}
		if again := Parse(gtp, gts); again.TraceID() != sc.TraceID() || again.SpanID() != sc.SpanID() {
			t.Fatalf("round trip of %q: %v, %v", tp, again, sc)
		}
	})
}
