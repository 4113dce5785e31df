package audit

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/streams"
)

// MaxPubkeys bounds the keys a verification is given.
const MaxPubkeys = 64

// CheckPubkeys refuses what is not checkpoint public keys, comma-separated
// ("": none), with an InputError naming field.
func CheckPubkeys(field, s string) error {
	if s == "" {
		return nil
	}
	keys := strings.Split(s, ",")
	if len(keys) > MaxPubkeys {
		return &commands.InputError{Field: field, Value: fmt.Sprintf("%d keys", len(keys)), Reason: fmt.Sprintf("at most %d keys", MaxPubkeys)}
	}
	for _, k := range keys {
		if !nkeys.IsValidPublicServerKey(k) {
			v := k
			if len(v) > 64 {
				v = v[:64] + "…"
			}
			return &commands.InputError{Field: field, Value: fmt.Sprintf("%q", v),
				Reason: "not a checkpoint public key (jetflow audit pubkey prints one), comma-separated"}
		}
	}
	return nil
}

// NewestKey is the key the newest checkpoint of the log names, and the
// checkpoint's sequence: commands.ErrNotFound when the log has none. It is
// what the log claims, not a key to trust: whoever can write the log can
// write a checkpoint naming a key of its own.
func NewestKey(ctx context.Context, js jetstream.JetStream) (string, uint64, error) {
	s, err := js.Stream(ctx, streams.EventsStream)
	if err != nil {
		return "", 0, fmt.Errorf("events stream: %w", err)
	}
	m, err := s.GetLastMsgForSubject(ctx, streams.CheckpointSubject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", 0, fmt.Errorf("the event log has no checkpoint: %w", commands.ErrNotFound)
	}
	if err != nil {
		return "", 0, fmt.Errorf("last checkpoint: %w", err)
	}
	ev, err := streams.DecodeEvent(m.Data)
	if err != nil || ev.Checkpoint == nil || ev.Checkpoint.Key == "" {
		return "", 0, fmt.Errorf("the last message on %s (seq %d) is not a checkpoint (audit verify names it): %w",
			streams.CheckpointSubject, m.Sequence, commands.ErrNotFound)
	}
	return ev.Checkpoint.Key, m.Sequence, nil
}
