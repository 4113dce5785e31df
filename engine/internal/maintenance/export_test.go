package maintenance

import (
	"context"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
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

// StatsFolder is the keeper's per-event path (decode, fold, slots) on a
// fresh session over st's statistics buckets, for benchmarks.
func StatsFolder(ctx context.Context, st *store.Store) (func(subject string, data []byte, seq uint64) error, error) {
	k := NewStatsKeeper(st, StatsConfig{})
	if err := st.Topology().EnsureStats(ctx, st.JS(), StatsKeeps()); err != nil {
		return nil, err
	}
	s := &statsSession{k: k, fold: projections.NewStatsFold(), slots: map[slotRef]*slotState{}, cur: map[*projections.StatsFoldSeries]*[len(projections.StatsResolutions)]curSlot{}}
	for _, r := range projections.StatsResolutions {
		kv, err := st.JS().KeyValue(ctx, streams.StatsBucket(r.Name))
		if err != nil {
			return nil, err
		}
		s.buckets = append(s.buckets, kv)
	}
	return func(subject string, data []byte, seq uint64) error { return s.foldMsg(ctx, subject, data, seq) }, nil
}

// PromoterEnded reports whether p's loop returned by itself.
func PromoterEnded(p *Promoter) bool { return p.life.Ended() }

// SetBeforeCascade makes p call fn first in each of its cascades' goroutines
// (before Start).
func SetBeforeCascade(p *Projector, fn func(*domain.Job)) { p.beforeCascade = fn }
