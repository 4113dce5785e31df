package maintenance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jetflow/jetflow/engine/internal/audit"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Defaults of the Checkpointer.
const (
	DefaultCheckpointInterval = 30 * time.Second
	defaultCheckpointEvents   = 500_000
)

// Checkpointer writes the checkpoints of the event log (docs/audit.md):
// every Interval, if anything was appended since the last one, an
// audit.checkpoint event on streams.CheckpointSubject that commits to the
// chain head of every subject changed since (a Merkle root), chained to
// the previous checkpoint and signed with the engine's key. It reads the
// events it commits to from the log (the hash in their header), never the
// hot path's writes. One runs at a time, under the Leader; the append
// expects the last checkpoint it read, so two leaders cannot both write
// one.
type Checkpointer struct {
	periodic
	store *store.Store
	cfg   CheckpointerConfig
	log   *slog.Logger

	mu      sync.Mutex
	written int
}

// CheckpointerConfig configures the Checkpointer.
type CheckpointerConfig struct {
	// Key signs the checkpoints (audit.LoadKey).
	Key nkeys.KeyPair
	// Interval is how often it looks (default DefaultCheckpointInterval);
	// MaxEvents how many events one checkpoint covers at most (default
	// 500,000), which bounds a pass's memory on a long backlog.
	Interval  time.Duration
	MaxEvents int
	Log       *slog.Logger
}

func (c CheckpointerConfig) withDefaults() CheckpointerConfig {
	orDefault(&c.Interval, DefaultCheckpointInterval)
	orDefault(&c.MaxEvents, defaultCheckpointEvents)
	return c
}

func (c CheckpointerConfig) validate() error {
	if c.Key == nil {
		return errors.New("checkpointer: no signing key")
	}
	return nil
}

// NewCheckpointer returns a Checkpointer.
func NewCheckpointer(s *store.Store, cfg CheckpointerConfig) *Checkpointer {
	cfg = cfg.withDefaults()
	c := &Checkpointer{store: s, cfg: cfg, log: logger(cfg.Log, "checkpoints")}
	c.periodic = periodic{every: cfg.Interval, log: c.log, check: cfg.validate, pass: func(ctx context.Context) error {
		_, err := c.Checkpoint(ctx)
		return err
	}}
	return c
}

// Written is the number of checkpoints this one wrote.
func (c *Checkpointer) Written() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written
}

// Checkpoint writes a checkpoint of what was appended since the last one,
// if anything was; it returns it (nil: nothing to commit to).
func (c *Checkpointer) Checkpoint(ctx context.Context) (*domain.Event, error) {
	// The last checkpoint: where the next one starts, and its chain.
	var from, lastSeq uint64
	var prev []byte
	m, err := c.store.Events().GetLastMsgForSubject(ctx, streams.CheckpointSubject)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return nil, fmt.Errorf("last checkpoint: %w", err)
	default:
		last, err := streams.DecodeEvent(m.Data)
		if err != nil || last.Checkpoint == nil {
			return nil, fmt.Errorf("last checkpoint (seq %d) is not one: %v", m.Sequence, err)
		}
		from, lastSeq, prev = last.Checkpoint.UpTo, m.Sequence, last.Hash
	}
	heads := map[string]audit.Head{}
	n := 0
	upTo, _, err := audit.ReadRange(ctx, c.store.JS(), nil, from+1, from+uint64(c.cfg.MaxEvents), func(seq uint64, subject string, stored, data []byte) error {
		n++
		if subject != streams.CheckpointSubject {
			heads[subject] = audit.Head{Subject: subject, Seq: seq, Hash: audit.HeadHash(stored, data)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(heads) == 0 {
		return nil, nil // nothing but checkpoints since the last one
	}
	sorted := make([]audit.Head, 0, len(heads))
	for _, h := range heads {
		sorted = append(sorted, h)
	}
	audit.SortHeads(sorted)
	ck := &domain.Checkpoint{From: from, UpTo: upTo, Count: len(sorted), Root: audit.Root(sorted)}
	if err := audit.Sign(c.cfg.Key, ck, prev); err != nil {
		return nil, fmt.Errorf("sign checkpoint: %w", err)
	}
	ev := &domain.Event{Type: domain.EvCheckpoint, JobID: "checkpoint", Time: time.Now().UTC(), Actor: c.store.Actor(),
		Prev: prev, Checkpoint: ck, Message: fmt.Sprintf("%d subjects changed in events %d..%d", len(sorted), from+1, upTo)}
	msg, err := streams.EventMsg(streams.CheckpointSubject, ev)
	if err != nil {
		return nil, err
	}
	ack, err := c.store.JS().PublishMsg(ctx, msg, jetstream.WithExpectLastSequencePerSubject(lastSeq))
	if err != nil {
		if streams.IsConflict(err) {
			return nil, nil // another leader wrote one: the next pass starts from it
		}
		return nil, fmt.Errorf("append checkpoint: %w", err)
	}
	ev.Seq, ev.Subject = ack.Sequence, streams.CheckpointSubject
	c.mu.Lock()
	c.written++
	c.mu.Unlock()
	c.log.Debug("checkpoint", "seq", ack.Sequence, "from", from, "upto", upTo, "subjects", len(sorted), "events", n)
	return ev, nil
}
