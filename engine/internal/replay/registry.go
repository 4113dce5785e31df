package replay

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// RebuildRegistry folds every registry event of the log.
func RebuildRegistry(ctx context.Context, js jetstream.JetStream) (*projections.Registry, error) {
	reg := projections.NewRegistry()
	_, err := streams.ReadSubject(ctx, js.Conn(), streams.EventsStream, streams.RegistryPrefix+".>", 1, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return fmt.Errorf("registry event %d: %w", seq, err)
		}
		ev.Seq = seq
		return reg.Fold(ev)
	})
	return reg, err
}

// verifyRegistry compares the rebuilt registry with its buckets. A record
// behind the log (its writer crashed before projecting) is repaired by the
// next read of it; it counts as a difference here all the same.
func verifyRegistry(ctx context.Context, js jetstream.JetStream) ([]projections.Diff, int, error) {
	reg, err := RebuildRegistry(ctx, js)
	if err != nil {
		return nil, 0, err
	}
	var diffs []projections.Diff
	types, err := js.KeyValue(ctx, streams.TypesBucket)
	if err != nil {
		return nil, 0, err
	}
	for _, want := range reg.Types {
		e, err := types.Get(ctx, streams.TypeKey(want.Scope, want.Category, want.Name))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			diffs = append(diffs, projections.Diff{ID: "type " + want.FullName(), Reason: "in the log, missing from the types bucket"})
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		var got domain.TypeRecord
		if err := streams.Unmarshal(e.Value(), &got); err != nil {
			return nil, 0, err
		}
		if got.Seq != want.Seq || got.Deleted != want.Deleted || !bytes.Equal(got.Schema, want.Schema) || got.Description != want.Description {
			diffs = append(diffs, projections.Diff{ID: "type " + want.FullName(), Reason: fmt.Sprintf(
				"record at event %d (deleted %v), log at %d (deleted %v), or another schema", got.Seq, got.Deleted, want.Seq, want.Deleted)})
		}
	}
	nss, err := js.KeyValue(ctx, streams.NamespacesBucket)
	if err != nil {
		return nil, 0, err
	}
	for ns, want := range reg.Namespaces {
		e, err := nss.Get(ctx, ns)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			diffs = append(diffs, projections.Diff{ID: "namespace " + ns, Reason: "in the log, missing from the namespaces bucket"})
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		var got domain.NamespaceRecord
		if err := streams.Unmarshal(e.Value(), &got); err != nil {
			return nil, 0, err
		}
		if got.Seq != want.Seq || got.Settings != want.Settings {
			diffs = append(diffs, projections.Diff{ID: "namespace " + ns, Reason: fmt.Sprintf("record at event %d, log at %d", got.Seq, want.Seq)})
		}
	}
	toks, err := js.KeyValue(ctx, streams.TokensBucket)
	if err != nil {
		return nil, 0, err
	}
	for id, want := range reg.Tokens {
		e, err := toks.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			diffs = append(diffs, projections.Diff{ID: "token " + id, Reason: "in the log, missing from the tokens bucket"})
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		var got domain.TokenRecord
		if err := streams.Unmarshal(e.Value(), &got); err != nil {
			return nil, 0, err
		}
		if got.Seq != want.Seq || got.Revoked != want.Revoked || got.Hash != want.Hash || got.Role != want.Role || got.Namespace != want.Namespace {
			diffs = append(diffs, projections.Diff{ID: "token " + id, Reason: fmt.Sprintf("record at event %d (revoked %v), log at %d (revoked %v)", got.Seq, got.Revoked, want.Seq, want.Revoked)})
		}
	}
	qs, err := js.KeyValue(ctx, streams.QueuesBucket)
	if err != nil {
		return nil, 0, err
	}
	for name, want := range reg.Queues {
		e, err := qs.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			diffs = append(diffs, projections.Diff{ID: "queue " + name, Reason: "limits in the log, queue missing from the queues bucket"})
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		var got domain.QueueRecord
		if err := streams.Unmarshal(e.Value(), &got); err != nil {
			return nil, 0, err
		}
		if got.LimitsSeq != want.LimitsSeq || got.Limits != want.Limits {
			diffs = append(diffs, projections.Diff{ID: "queue " + name, Reason: fmt.Sprintf("limits %+v at event %d, log says %+v at %d",
				got.Limits, got.LimitsSeq, want.Limits, want.LimitsSeq)})
		}
	}
	return diffs, len(reg.Types) + len(reg.Namespaces) + len(reg.Tokens) + len(reg.Queues), nil
}
