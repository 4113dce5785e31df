package tracing

import (
	"context"
	"encoding/binary"
	"math/rand/v2"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// IDGenerator makes random ids, except for a span recorded again
// (EndRemoteAttempt): that one gets the ids its claim handed to the
// worker. A provider that jetflow's spans go to should use it
// (ProviderOptions): with another, the span of an HTTP worker's attempt
// gets new ids, and the spans the worker made under it are left without
// their parent.
func IDGenerator() sdktrace.IDGenerator { return idGenerator{} }

type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if sc, ok := ctx.Value(presetKey{}).(trace.SpanContext); ok {
		return sc.TraceID(), sc.SpanID()
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, newSpanID()
}

func (idGenerator) NewSpanID(ctx context.Context, traceID trace.TraceID) trace.SpanID {
	if sc, ok := ctx.Value(presetKey{}).(trace.SpanContext); ok && sc.TraceID() == traceID {
		return sc.SpanID()
	}
	return newSpanID()
}

func newSpanID() trace.SpanID {
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}
