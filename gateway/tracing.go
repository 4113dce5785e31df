package gateway

import (
	"context"
	"net/http"

	"github.com/jetflow/jetflow/internal/tracing"
)

// submitContext is ctx with the W3C trace context of a submit request's
// traceparent and tracestate headers: the job is submitted in it
// (docs/tracing.md). A header that is not valid is ignored, as the W3C
// says: it never fails a submit.
func submitContext(ctx context.Context, r *http.Request) context.Context {
	return tracing.Extract(ctx, tracing.Header(r.Header).Get) // without canonicalizing the name: no allocation
}
