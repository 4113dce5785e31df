// Package tracing is jetflow's OpenTelemetry tracing: the W3C trace context
// a job carries from its submit to every attempt (domain.Spec.TraceParent,
// Event.Trace, Job.AttemptTrace), and the spans jetflow records (submit,
// attempt, fan-out, batch, and the engine's decisions: admission, the
// reaper's, the lease sweeper's, fan-in).
//
// Spans go to the global tracer provider (otel.GetTracerProvider). Tracing
// is off while that is the default no-op provider, and then Tracer is nil
// and nothing is started: the hot path pays a nil check. A job submitted in
// a trace context carries it whether or not tracing is on here, so that a
// worker with tracing of its own continues it (propagation only).
//
// Setup installs a provider from the standard OTEL_* variables, for serve
// and worker; docs/tracing.md says what they are and which spans exist.
package tracing
