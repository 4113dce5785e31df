package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Configured reports whether the OTEL_* environment asks for traces:
// OTEL_TRACES_EXPORTER names an exporter other than "none", or an OTLP
// endpoint is given (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and OTEL_SDK_DISABLED is not true.
// Without any of them tracing stays off: no exporter, no cost.
func Configured() bool {
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return false
	}
	switch exp := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return false
	case "":
		return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return true
	}
}

// ProviderOptions are the options of a tracer provider that jetflow's
// spans go to, besides its exporter: ids from IDGenerator, and a resource
// from the environment (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) whose
// service.name is service unless the environment names one.
func ProviderOptions(service string) []sdktrace.TracerProviderOption {
	opts := []sdktrace.TracerProviderOption{sdktrace.WithIDGenerator(IDGenerator())}
	attrs := []resource.Option{resource.WithFromEnv(), resource.WithTelemetrySDK()}
	if os.Getenv("OTEL_SERVICE_NAME") == "" && !strings.Contains(os.Getenv("OTEL_RESOURCE_ATTRIBUTES"), "service.name=") {
		attrs = append(attrs, resource.WithAttributes(attribute.String("service.name", service)))
	}
	if res, err := resource.New(context.Background(), attrs...); err == nil {
		opts = append(opts, sdktrace.WithResource(res))
	}
	return opts
}

// Setup makes the global tracer provider export jetflow's spans as the
// OTEL_* environment says (OTEL_TRACES_EXPORTER: otlp, the default, or
// console; OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf, the default, or
// grpc; OTEL_EXPORTER_OTLP_ENDPOINT, ...; OTEL_TRACES_SAMPLER; OTEL_BSP_*),
// when Configured; service is the default service.name. shutdown flushes
// the spans not exported yet and stops the exporter; it is a no-op when
// tracing is off. An exporter that cannot be made is an error naming the
// variables.
func Setup(ctx context.Context, service string) (shutdown func(context.Context) error, err error) {
	off := func(context.Context) error { return nil }
	if !Configured() {
		return off, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return off, fmt.Errorf("OTEL_TRACES_EXPORTER %q, OTEL_EXPORTER_OTLP_PROTOCOL %q: %w",
			os.Getenv("OTEL_TRACES_EXPORTER"), os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), err)
	}
	if autoexport.IsNoneSpanExporter(exp) {
		return off, nil
	}
	tp := sdktrace.NewTracerProvider(append(ProviderOptions(service), sdktrace.WithBatcher(exp))...)
	otel.SetTracerProvider(tp)
	return func(ctx context.Context) error {
		return errors.Join(tp.ForceFlush(ctx), tp.Shutdown(ctx))
	}, nil
}
