package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/streams"
)

// Read calls fn with every event of the events stream in scope, in stream
// order, with the hash its header claims, up to the stream's last
// sequence when it starts; it returns the stream's first sequence.
func Read(ctx context.Context, js jetstream.JetStream, filters []string, fn func(seq uint64, subject string, stored, data []byte) error) (uint64, error) {
	_, first, err := ReadRange(ctx, js, filters, 1, 0, fn)
	return first, err
}

// ReadRange is Read from sequence from up to upTo (0: the stream's last
// sequence when it starts); it returns the last sequence it read up to
// and the stream's first sequence.
func ReadRange(ctx context.Context, js jetstream.JetStream, filters []string, from, upTo uint64, fn func(seq uint64, subject string, stored, data []byte) error) (uint64, uint64, error) {
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return 0, 0, fmt.Errorf("events stream: %w", err)
	}
	st := s.CachedInfo().State
	if upTo == 0 || upTo > st.LastSeq {
		upTo = st.LastSeq
	}
	if st.Msgs == 0 || from > upTo {
		return upTo, st.FirstSeq, nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: filters}
	if from > 1 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, from
	}
	cons, err := js.OrderedConsumer(ctx, streams.EventsStream, cfg)
	if err != nil {
		return 0, 0, fmt.Errorf("read event log: %w", err)
	}
	info := cons.CachedInfo()
	if info == nil || info.NumPending == 0 {
		return upTo, st.FirstSeq, nil
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(4096))
	if err != nil {
		return 0, 0, fmt.Errorf("read event log: %w", err)
	}
	defer it.Stop()
	defer context.AfterFunc(ctx, it.Stop)()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return 0, 0, fmt.Errorf("read event log: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return 0, 0, err
		}
		seq := meta.Sequence.Stream
		if seq > upTo {
			return upTo, st.FirstSeq, nil
		}
		if err := fn(seq, m.Subject(), streams.StoredHash(m.Headers()), m.Data()); err != nil {
			return 0, 0, err
		}
		if seq >= upTo || meta.NumPending == 0 {
			return upTo, st.FirstSeq, nil
		}
	}
}

// VerifyLog verifies the events of scope in the log (pub: the trusted
// checkpoint key, "": the key the checkpoints name).
func VerifyLog(ctx context.Context, js jetstream.JetStream, scope Scope, pub string) (*Report, error) {
	return VerifyRange(ctx, js, scope, time.Time{}, time.Time{}, pub)
}

// verify feeds v the events of filters (nil: all) stored in [from, upTo]
// (upTo 0: the last when the read starts). In a scope, each checkpoint's
// root is recomputed from its range's heads, read again whole: the
// scope's heads must be among them.
func verify(ctx context.Context, js jetstream.JetStream, v *Verifier, scope Scope, from, upTo uint64) (*Report, error) {
	filters := scope.Filters()
	if filters != nil {
		filters = append(filters, streams.CheckpointSubject) // their signatures
		v.InScope = scope.Contains
		v.RangeHeads = func(from, upTo uint64) ([]Head, error) { return headsOf(ctx, js, from, upTo) }
	}
	// The verifier runs beside the reader, fed batches: reading (the
	// client's parse of each message) and verifying (decode, hash, chain)
	// take about as long as each other.
	type entry struct {
		seq          uint64
		subject      string
		stored, data []byte
	}
	const batch = 256
	batches := make(chan []entry, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for b := range batches {
			for i := range b {
				v.Add(b[i].seq, b[i].subject, b[i].stored, b[i].data)
			}
		}
	}()
	cur := make([]entry, 0, batch)
	_, _, err := ReadRange(ctx, js, filters, from, upTo, func(seq uint64, subject string, stored, data []byte) error {
		cur = append(cur, entry{seq, subject, stored, data})
		if len(cur) == batch {
			batches <- cur
			cur = make([]entry, 0, batch)
		}
		return nil
	})
	if len(cur) > 0 {
		batches <- cur
	}
	close(batches)
	<-done
	if err != nil {
		return nil, err
	}
	return v.Finish(), nil
}
