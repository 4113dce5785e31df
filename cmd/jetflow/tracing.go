package main

import (
	"context"
	"os"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jetflow/jetflow/internal/tracing"
)

// startTracing exports the spans of serve or worker as the OTEL_*
// environment says (tracing.Setup: off unless it asks for traces);
// service is the default service.name. An exporter that cannot be made
// is a usage error naming the variables (exit 2). stop flushes the spans
// left.
func (c *cli) startTracing(service string) (stop func(), ok bool) {
	shutdown, err := tracing.Setup(context.Background(), service)
	if err != nil {
		c.errorf("tracing: %v", err)
		return nil, false
	}
	if tracing.Tracer() != nil {
		c.logger().Info("tracing on", "exporter", os.Getenv("OTEL_TRACES_EXPORTER"),
			"endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"))
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			c.logger().Warn("tracing: spans not exported", "err", err)
		}
	}, true
}

// envTrace is ctx in the W3C trace context of the TRACEPARENT and
// TRACESTATE variables, if they name one: a job submitted from an --exec
// job's command (which has them) continues its trace.
func envTrace(ctx context.Context) context.Context {
	return tracing.WithRemote(ctx, os.Getenv("TRACEPARENT"), os.Getenv("TRACESTATE"))
}

// countingExporter exports spans to nowhere, counting them: bench --trace
// measures what recording spans costs, not an exporter's network.
type countingExporter struct{ n atomic.Int64 }

func (e *countingExporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.n.Add(int64(len(spans)))
	return nil
}

func (e *countingExporter) Shutdown(context.Context) error { return nil }

// benchTracing turns tracing on for bench --trace: a provider with a batch
// processor (as serve's) whose exporter only counts. spans flushes the
// spans ended so far and says how many were exported.
func benchTracing() (spans func() int64, stop func()) {
	exp := &countingExporter{}
	tp := sdktrace.NewTracerProvider(append(tracing.ProviderOptions("jetflow-bench"), sdktrace.WithBatcher(exp))...)
	otel.SetTracerProvider(tp)
	return func() int64 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = tp.ForceFlush(ctx)
			return exp.n.Load()
		}, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = tp.Shutdown(ctx)
		}
}
