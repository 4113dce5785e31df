package maintenance

import (
	"context"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/streams"
)

// maxRescue bounds the stranded items one pass puts back, per consumer.
const maxRescue = 1000

// stranded finds work items that a consumer will never deliver again
// (stranded: stored, but below their consumer's ack floor): in a
// work-queue stream an acked item is gone, so an item still stored at or
// below its consumer's ack floor is one the consumer counts as acked while
// it is not. Seen after an unclean restart of nats-server (tests/soak,
// docs/reliability.md): the batches of a fan-out, or a job's item, stay in
// the stream while the consumer reports nothing pending, and the parent or
// the job waits forever. An item seen so on two passes in a row is put back:
// published again on its subject (a new sequence, above the ack floor), then
// deleted. What it carries decides the rest as for any duplicate: a job's
// claim finds the job held or moved on and drops it; a batch's piece is
// counted once per piece number; a fired schedule's promotion finds the
// job no longer scheduled and drops it. The promoter's consumer is looked
// at as the workers' are: a fired schedule stranded below its ack floor
// would leave its job scheduled for good.
//
// stored are the items on each subject of the queue (a stream info with a
// subject filter); a consumer with no more stored on its filter than it has
// pending and in flight has none.
// prev are the suspects of the previous look (stream/seq), next collects
// this look's.
func (l *LeaseSweeper) stranded(ctx context.Context, qs jetstream.Stream, info *jetstream.ConsumerInfo, stored map[string]uint64, prev, next map[string]bool) error {
	filter := info.Config.FilterSubject
	var n uint64
	for subj, c := range stored {
		if streams.SubjectMatches(filter, subj) {
			n += c
		}
	}
	if n <= info.NumPending+uint64(info.NumAckPending) {
		return nil
	}
	stream := qs.CachedInfo().Config.Name
	var found []uint64
	err := streams.ReadRange(ctx, l.store.NC(), stream, filter, 1, info.AckFloor.Stream, maxRescue, func(seq uint64, _ []byte) error {
		found = append(found, seq)
		return nil
	})
	if err != nil {
		return fmt.Errorf("stranded items on %s: %w", filter, err)
	}
	var rescue []uint64
	for _, seq := range found {
		key := stream + "/" + strconv.FormatUint(seq, 10)
		if prev[key] {
			rescue = append(rescue, seq)
		} else {
			next[key] = true
		}
	}
	for _, seq := range rescue {
		subject, ok, err := l.store.PutBack(ctx, qs, seq)
		if err != nil {
			return err
		}
		if ok {
			l.rescued.Add(1)
			l.log.Warn("work item its consumer counted as acked put back", "stream", stream, "seq", seq, "subject", subject)
		}
	}
	return nil
}
