package maintenance

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/tracing"
)

// decided records a decision about job j (the record it was decided on)
// that wrote ev, begun at began, when tracing is on (tracing.Decided). A
// decision that ends the attempt of a worker outside the process (its
// lease, its deadline) records that attempt's span too: no report of the
// worker will.
func decided(ctx context.Context, name string, j *domain.Job, ev *domain.Event, began time.Time, attrs ...attribute.KeyValue) {
	tr := tracing.Tracer()
	if tr == nil || j == nil || ev == nil {
		return
	}
	tracing.Decided(ctx, tr, name, j, ev, began, attrs...)
	if commands.HeldRemotely(j) && ev.To != "" {
		tracing.EndRemoteAttempt(ctx, tr, j, ev)
	}
}

// admissionSpans are the admissions of a batch as decided, by job id, for
// their spans; nil when tracing is off.
type admissionSpans map[string]admission

type admission struct {
	job *domain.Job // the record it was decided on
	ev  *domain.Event
}

func admissions() admissionSpans {
	if tracing.Tracer() == nil {
		return nil
	}
	return admissionSpans{}
}

// decided keeps the last decision about j (a lost race decides again).
func (a admissionSpans) decided(j *domain.Job, ev *domain.Event) {
	if a != nil && ev != nil {
		a[j.ID] = admission{j, ev}
	}
}

// record records the admissions of curs that were written (errs[i] nil).
func (a admissionSpans) record(ctx context.Context, curs []store.Snapshot, errs []error, began time.Time) {
	if a == nil {
		return
	}
	for i, cur := range curs {
		if d, ok := a[cur.Job.ID]; ok && errs[i] == nil {
			decided(ctx, tracing.SpanAdmit, d.job, d.ev, began)
		}
	}
}
