package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// StatsRanges are the ranges a series can cover: the last hour (a point a
// minute), day (ten minutes) and week (an hour).
var StatsRanges = []string{"hour", "day", "week"}

// statsCursor is the part of the StatsKeeper's checkpoint a reader needs.
type statsCursor struct {
	Time time.Time `msgpack:"time"`
}

// StatsSeries reads the series of d over rng ("hour", "day", "week") as
// the StatsKeeper wrote it (projections.StatsFold), ending with the slot
// of now: one multi-get of its slots. Before the StatsKeeper ever ran the
// series is all zeros.
func (s *Store) StatsSeries(ctx context.Context, rng string, d projections.StatsDim, now time.Time) (*projections.StatsSeries, error) {
	var res *projections.StatsResolution
	for i, r := range projections.StatsResolutions {
		if r.Range == rng {
			res = &projections.StatsResolutions[i]
		}
	}
	if res == nil {
		return nil, &commands.InputError{Field: "range", Value: rng, Reason: "want hour, day or week"}
	}
	starts := make([]time.Time, res.Points)
	last := now.Truncate(res.Step)
	for i := range starts {
		starts[i] = last.Add(-time.Duration(res.Points-1-i) * res.Step).UTC()
	}
	slots := make([]*projections.StatsSlot, len(starts))
	bucket := streams.StatsBucket(res.Name)
	if _, err := s.js.KeyValue(ctx, bucket); errors.Is(err, jetstream.ErrBucketNotFound) {
		return projections.ViewStatsSeries(*res, d, starts, slots, now), nil
	} else if err != nil {
		return nil, fmt.Errorf("statistics: %w", err)
	}
	subjects := make([]string, len(starts))
	for i, st := range starts {
		subjects[i] = "$KV." + bucket + "." + streams.StatsKey(d.Namespace, d.Queue, st)
	}
	msgs, err := streams.MultiLast(ctx, s.nc, "KV_"+bucket, subjects)
	if err != nil {
		return nil, fmt.Errorf("statistics: %w", err)
	}
	for i, subj := range subjects {
		m, ok := msgs[subj]
		if !ok || m.Deleted {
			continue
		}
		var sl projections.StatsSlot
		if err := streams.Unmarshal(m.Data, &sl); err == nil {
			slots[i] = &sl
		}
	}
	out := projections.ViewStatsSeries(*res, d, starts, slots, now)
	hour := streams.StatsBucket(projections.StatsResolutions[len(projections.StatsResolutions)-1].Name)
	if kv, err := s.js.KeyValue(ctx, hour); err == nil {
		if e, err := kv.Get(ctx, streams.StatsCursorKey); err == nil {
			var c statsCursor
			if streams.Unmarshal(e.Value(), &c) == nil && !c.Time.IsZero() {
				at := c.Time.UTC()
				out.AsOf = &at
			}
		}
	}
	return out, nil
}
