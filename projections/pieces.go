package projections

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/streams"
)

// CountPieces counts what became of a fan-out parent's pieces from its
// piece events in the log up to sequence upTo (0: all), taking the first
// event of each piece number, as the fan-in counter does. Errors are not
// ranked (counts only).
func CountPieces(ctx context.Context, js jetstream.JetStream, parent string, upTo uint64) (streams.FanoutCounts, error) {
	var c streams.FanoutCounts
	cons, err := js.OrderedConsumer(ctx, streams.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{streams.PieceSubject(parent)},
	})
	if err != nil {
		return c, err
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return c, err
	}
	if info.NumPending == 0 {
		return c, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(2000))
	if err != nil {
		return c, err
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	seen := map[int]bool{}
	for {
		m, err := it.Next()
		if err != nil {
			return c, fmt.Errorf("pieces of %s: %w", parent, err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return c, err
		}
		if upTo > 0 && meta.Sequence.Stream > upTo {
			return c, nil
		}
		if ev, err := streams.DecodeEvent(m.Data()); err == nil && ev.Piece > 0 && !seen[ev.Piece] {
			switch ev.Type {
			case streams.PcSucceeded:
				c.Succeeded++
			case streams.PcFailed:
				c.Failed++
			case streams.PcCancelled:
				c.Cancelled++
			}
			seen[ev.Piece] = ev.Type != streams.PcPlanned
		}
		if meta.NumPending == 0 {
			return c, nil
		}
	}
}
