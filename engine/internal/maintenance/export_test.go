package maintenance

import (
	"context"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
)

// ObserveBatch runs the admitter's per-batch logic on evs (all of
// queue): observe each, then look the unknown ones up, as session does.
func ObserveBatch(ctx context.Context, st *store.Store, q *commands.Admission, evs []*domain.Event) error {
	a := NewAdmitter(st, AdmitterConfig{})
	var ls []lookup
	looking := map[string]bool{}
	for _, ev := range evs {
		ls = observeOrLookUp(q, ev, 0, looking, ls)
	}
	if len(ls) == 0 {
		return nil
	}
	return a.lookUp(ctx, map[string]*commands.Admission{q.Queue: q}, ls)
}
