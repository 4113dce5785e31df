package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/streams"
)

// nothingAfter is what firstSeqAt answers when the log stored nothing at
// or after the instant.
const nothingAfter = 1 << 62

// VerifyRange is VerifyLog on the events of scope the log stored from
// since to until (the stream's time index; zero: no bound).
//
// The events stored before since are outside the range, as events that
// aged out are: a subject's first event in it may chain to one before it,
// and a checkpoint whose range starts before since has its signature and
// chain checked, not its root. The read ends at the last event stored at
// or before until: a checkpoint stored later is not read, so the events
// after the last checkpoint read are reported uncovered.
func VerifyRange(ctx context.Context, js jetstream.JetStream, scope Scope, since, until time.Time, pub string) (*Report, error) {
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return nil, fmt.Errorf("events stream: %w", err)
	}
	info := s.CachedInfo()
	v := newVerifier(pub, scope.Whole(), int(min(info.State.NumSubjects, 1<<24)))
	from := max(info.State.FirstSeq, 1)
	if !since.IsZero() {
		seq, err := firstSeqAt(ctx, js, since)
		if err != nil {
			return nil, err
		}
		from = max(from, seq)
	}
	var upTo uint64 // 0: the stream's last sequence when the read starts
	if !until.IsZero() {
		after, err := firstSeqAt(ctx, js, until.Add(time.Nanosecond))
		if err != nil {
			return nil, err
		}
		switch {
		case after == nothingAfter:
		case after <= from:
			return v.Finish(), nil // nothing stored in the range
		default:
			upTo = after - 1
		}
	}
	v.FirstSeq = from
	// Retention has been removing the log's oldest events when the oldest
	// left is about as old as the log keeps them; events before since are
	// outside the range as those are.
	v.AgedOut = !since.IsZero() || info.Config.MaxAge > 0 && info.State.FirstSeq > 1 &&
		time.Since(info.State.FirstTime) > info.Config.MaxAge-time.Hour
	return verify(ctx, js, v, scope, from, upTo)
}
