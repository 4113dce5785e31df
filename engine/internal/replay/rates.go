package replay

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// rateSettle is how long after a queue's limits were last set the rate
// windows of its admissions are checked: an admitter follows a change of
// the limits a moment after it is written.
const rateSettle = time.Second

// verifyRates checks from the log that no queue with a rate limit ever
// admitted more than its limit in a period: the job.admitted events of
// each queue (of each rate key, when the limit is per key) since its
// limits were last set, every window of rate_period that starts
// rateSettle or more after that. It adds a difference per window over
// the limit and returns how many admissions it checked.
func verifyRates(ctx context.Context, js jetstream.JetStream, reg *projections.Registry, upTo uint64) ([]projections.Diff, int, error) {
	var diffs []projections.Diff
	checked := 0
	names := make([]string, 0, len(reg.Queues))
	for name := range reg.Queues {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		q := reg.Queues[name]
		l := q.Limits
		if l.RateLimit <= 0 || l.RatePeriod <= 0 || upTo == 0 {
			continue
		}
		from := q.LimitsAt.Add(rateSettle)
		times, err := admissionsOf(ctx, js, name, q.LimitsAt, upTo)
		if err != nil {
			return nil, 0, err
		}
		keys := make([]string, 0, len(times))
		for k := range times {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			ts := times[k]
			checked += len(ts)
			sort.Slice(ts, func(i, j int) bool { return ts[i].Before(ts[j]) })
			end := 0
			for i, t := range ts {
				if t.Before(from) {
					continue
				}
				end = max(end, i)
				for end < len(ts) && ts[end].Sub(t) < l.RatePeriod {
					end++
				}
				if n := end - i; n > l.RateLimit {
					whose := "queue " + name
					if l.RateKey != "" {
						whose += fmt.Sprintf(" (rate key %q)", k)
					}
					diffs = append(diffs, projections.Diff{ID: "queue " + name, Reason: fmt.Sprintf(
						"%s admitted %d jobs in the %s from %s: its rate_limit is %d", whose, n, l.RatePeriod,
						t.UTC().Format(time.RFC3339Nano), l.RateLimit)})
					break // one difference per key
				}
			}
		}
	}
	return diffs, checked, nil
}

// admissionsOf reads the times of queue's admissions (job.admitted) from
// since up to sequence upTo, by the rate key they were admitted under.
func admissionsOf(ctx context.Context, js jetstream.JetStream, queue string, since time.Time, upTo uint64) (map[string][]time.Time, error) {
	out := map[string][]time.Time{}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{streams.EventsPrefix + ".*." + queue + ".>"}}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := js.OrderedConsumer(ctx, streams.EventsStream, cfg)
	if err != nil {
		return nil, fmt.Errorf("read the admissions of queue %s: %w", queue, err)
	}
	if ci := cons.CachedInfo(); ci != nil && ci.NumPending == 0 {
		return out, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2048))
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("read the admissions of queue %s: %w", queue, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		if meta.Sequence.Stream > upTo {
			return out, nil
		}
		if ev, err := streams.DecodeEvent(m.Data()); err == nil && ev.Type == domain.EvAdmitted {
			out[ev.RateKey] = append(out[ev.RateKey], ev.Time)
		}
		if meta.Sequence.Stream >= upTo || meta.NumPending == 0 {
			return out, nil
		}
	}
}
