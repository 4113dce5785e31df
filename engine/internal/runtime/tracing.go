package runtime

import (
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
)

// endSpan ends the attempt's span, if tracing is on, with its outcome (ev
// as recorded; nil: discarded or not recorded, err says why). Only the
// first call ends it: the outcome is recorded once (complete, or Stop's
// requeue over a handler that did not stop). With tracing off it is a nil
// check.
func (rn *run) endSpan(ev *domain.Event, err error) {
	if rn.span == nil {
		return
	}
	rn.spanEnd.Do(func() { tracing.EndAttempt(rn.span, ev, err) })
}
