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

// rebuildRegistry folds every registry event of the log.
func rebuildRegistry(ctx context.Context, js jetstream.JetStream) (*projections.Registry, error) {
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
	reg, err := rebuildRegistry(ctx, js)
	if err != nil {
		return nil, 0, err
	}
	var diffs []projections.Diff
	types := map[string]*domain.TypeRecord{}
	for _, t := range reg.Types {
		types[streams.TypeKey(t.Scope, t.Category, t.Name)] = t
	}
	err = errors.Join(
		verifyBucket(ctx, js, streams.TypesBucket, types, &diffs, "in the log, missing from the types bucket",
			func(key string, t *domain.TypeRecord) string { return "type " + t.FullName() },
			func(got, want *domain.TypeRecord) string {
				if got.Seq != want.Seq || got.Deleted != want.Deleted || !bytes.Equal(got.Schema, want.Schema) || got.Description != want.Description {
					return fmt.Sprintf("record at event %d (deleted %v), log at %d (deleted %v), or another schema", got.Seq, got.Deleted, want.Seq, want.Deleted)
				}
				return ""
			}),
		verifyBucket(ctx, js, streams.NamespacesBucket, reg.Namespaces, &diffs, "in the log, missing from the namespaces bucket",
			func(ns string, _ *domain.NamespaceRecord) string { return "namespace " + ns },
			func(got, want *domain.NamespaceRecord) string {
				if got.Seq != want.Seq || got.Settings != want.Settings {
					return fmt.Sprintf("record at event %d, log at %d", got.Seq, want.Seq)
				}
				return ""
			}),
		verifyBucket(ctx, js, streams.TokensBucket, reg.Tokens, &diffs, "in the log, missing from the tokens bucket",
			func(id string, _ *domain.TokenRecord) string { return "token " + id },
			func(got, want *domain.TokenRecord) string {
				if got.Seq != want.Seq || got.Revoked != want.Revoked || got.Hash != want.Hash || got.Role != want.Role || got.Namespace != want.Namespace {
					return fmt.Sprintf("record at event %d (revoked %v), log at %d (revoked %v)", got.Seq, got.Revoked, want.Seq, want.Revoked)
				}
				return ""
			}),
	)
	if err != nil {
		return nil, 0, err
	}
	queues := map[string]*domain.QueueRecord{}
	for name, q := range reg.Queues {
		queues[name] = &q
	}
	err = verifyBucket(ctx, js, streams.QueuesBucket, queues, &diffs, "limits in the log, queue missing from the queues bucket",
		func(name string, _ *domain.QueueRecord) string { return "queue " + name },
		func(got, want *domain.QueueRecord) string {
			if got.LimitsSeq != want.LimitsSeq || got.Limits != want.Limits {
				return fmt.Sprintf("limits %+v at event %d, log says %+v at %d", got.Limits, got.LimitsSeq, want.Limits, want.LimitsSeq)
			}
			return ""
		})
	if err != nil {
		return nil, 0, err
	}
	return diffs, len(reg.Types) + len(reg.Namespaces) + len(reg.Tokens) + len(reg.Queues), nil
}

// verifyBucket compares the records of a bucket with what the log says
// they are (want, by key), adding a difference to diffs for each that is
// missing (saying missing) or differs (differ says how, "" if not).
func verifyBucket[R any](ctx context.Context, js jetstream.JetStream, bucket string, want map[string]*R, diffs *[]projections.Diff,
	missing string, id func(key string, want *R) string, differ func(got, want *R) string) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return err
	}
	for key, w := range want {
		e, err := kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			*diffs = append(*diffs, projections.Diff{ID: id(key, w), Reason: missing})
			continue
		}
		if err != nil {
			return err
		}
		var got R
		if err := streams.Unmarshal(e.Value(), &got); err != nil {
			return err
		}
		if reason := differ(&got, w); reason != "" {
			*diffs = append(*diffs, projections.Diff{ID: id(key, w), Reason: reason})
		}
	}
	return nil
}
