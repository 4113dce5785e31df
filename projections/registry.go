package projections

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// FoldType folds one registry event into a type's record (nil before its
// first event). Events at or below the record's Seq are ignored.
func FoldType(t *domain.TypeRecord, ev *domain.Event) (*domain.TypeRecord, error) {
	if ev.TypeDef == nil {
		return nil, fmt.Errorf("%s event %d without a type", ev.Type, ev.Seq)
	}
	if t != nil && ev.Seq != 0 && ev.Seq <= t.Seq {
		return t, nil
	}
	var n domain.TypeRecord
	if t != nil {
		n = *t
	}
	d := ev.TypeDef
	switch ev.Type {
	case domain.EvTypeRegistered:
		if t == nil {
			n.RegisteredAt = ev.Time.UTC()
		}
		n.Scope, n.Category, n.Name = d.Scope, d.Category, d.Name
		n.Schema, n.Description, n.Deleted = d.Schema, d.Description, false
	case domain.EvTypeDeleted:
		if t == nil {
			return nil, fmt.Errorf("type %s: deleted before it was registered", ev.JobID)
		}
		n.Deleted = true
	default:
		return nil, fmt.Errorf("type %s: %s is not a type event", ev.JobID, ev.Type)
	}
	n.UpdatedAt, n.Seq = ev.Time.UTC(), ev.Seq
	return &n, nil
}

// FoldNamespace folds a namespace.set event into a namespace's record.
func FoldNamespace(r *domain.NamespaceRecord, ev *domain.Event) (*domain.NamespaceRecord, error) {
	if ev.Type != domain.EvNamespaceSet || ev.Namespace == nil {
		return nil, fmt.Errorf("namespace %s: %s is not a namespace event", ev.JobID, ev.Type)
	}
	if r != nil && ev.Seq != 0 && ev.Seq <= r.Seq {
		return r, nil
	}
	return &domain.NamespaceRecord{Name: ev.Namespace.Name, Settings: ev.Namespace.Settings,
		UpdatedAt: ev.Time.UTC(), Seq: ev.Seq}, nil
}

// FoldQueueLimits folds a queue.set event into a queue's record.
func FoldQueueLimits(rec domain.QueueRecord, ev *domain.Event) domain.QueueRecord {
	if ev.Queue == nil || ev.Seq != 0 && ev.Seq <= rec.LimitsSeq {
		return rec
	}
	rec.Limits, rec.LimitsSeq, rec.LimitsAt, rec.LimitsBy = ev.Queue.Limits, ev.Seq, ev.Time.UTC(), ev.Actor
	if rec.Name == "" {
		rec.Name = ev.Queue.Name
	}
	return rec
}

// Registry is the type registry and the namespaces as the log says they
// are, by their keys in TypesBucket and NamespacesBucket.
type Registry struct {
	Types      map[string]*domain.TypeRecord
	Namespaces map[string]*domain.NamespaceRecord
	Tokens     map[string]*domain.TokenRecord
	Queues     map[string]domain.QueueRecord // queues' limits (only the Limits fields)
}

// RebuildRegistry folds every registry event of the log.
func RebuildRegistry(ctx context.Context, js jetstream.JetStream) (*Registry, error) {
	reg := &Registry{Types: map[string]*domain.TypeRecord{}, Namespaces: map[string]*domain.NamespaceRecord{},
		Tokens: map[string]*domain.TokenRecord{}, Queues: map[string]domain.QueueRecord{}}
	_, err := streams.ReadSubject(ctx, js.Conn(), streams.EventsStream, streams.RegistryPrefix+".>", 1, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return fmt.Errorf("registry event %d: %w", seq, err)
		}
		ev.Seq = seq
		switch {
		case ev.TypeDef != nil:
			key := streams.TypeKey(ev.TypeDef.Scope, ev.TypeDef.Category, ev.TypeDef.Name)
			t, err := FoldType(reg.Types[key], ev)
			if err != nil {
				return err
			}
			reg.Types[key] = t
		case ev.Namespace != nil:
			r, err := FoldNamespace(reg.Namespaces[ev.Namespace.Name], ev)
			if err != nil {
				return err
			}
			reg.Namespaces[ev.Namespace.Name] = r
		case ev.Token != nil:
			t, err := FoldToken(reg.Tokens[ev.Token.ID], ev)
			if err != nil {
				return err
			}
			reg.Tokens[ev.Token.ID] = t
		case ev.Queue != nil:
			reg.Queues[ev.Queue.Name] = FoldQueueLimits(reg.Queues[ev.Queue.Name], ev)
		}
		return nil
	})
	return reg, err
}

// verifyRegistry compares the rebuilt registry with its buckets. A record
// behind the log (its writer crashed before projecting) is repaired by the
// next read of it; it counts as a difference here all the same.
func verifyRegistry(ctx context.Context, js jetstream.JetStream) ([]Diff, int, error) {
	reg, err := RebuildRegistry(ctx, js)
	if err != nil {
		return nil, 0, err
	}
	var diffs []Diff
	types, err := js.KeyValue(ctx, streams.TypesBucket)
	if err != nil {
		return nil, 0, err
	}
	for key, want := range reg.Types {
		e, err := types.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			diffs = append(diffs, Diff{ID: "type " + want.FullName(), Reason: "in the log, missing from the types bucket"})
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
			diffs = append(diffs, Diff{ID: "type " + want.FullName(), Reason: fmt.Sprintf(
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
			diffs = append(diffs, Diff{ID: "namespace " + ns, Reason: "in the log, missing from the namespaces bucket"})
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
			diffs = append(diffs, Diff{ID: "namespace " + ns, Reason: fmt.Sprintf("record at event %d, log at %d", got.Seq, want.Seq)})
		}
	}
	toks, err := js.KeyValue(ctx, streams.TokensBucket)
	if err != nil {
		return nil, 0, err
	}
	for id, want := range reg.Tokens {
		e, err := toks.Get(ctx, id)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			diffs = append(diffs, Diff{ID: "token " + id, Reason: "in the log, missing from the tokens bucket"})
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
			diffs = append(diffs, Diff{ID: "token " + id, Reason: fmt.Sprintf("record at event %d (revoked %v), log at %d (revoked %v)", got.Seq, got.Revoked, want.Seq, want.Revoked)})
		}
	}
	qs, err := js.KeyValue(ctx, streams.QueuesBucket)
	if err != nil {
		return nil, 0, err
	}
	for name, want := range reg.Queues {
		e, err := qs.Get(ctx, name)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			diffs = append(diffs, Diff{ID: "queue " + name, Reason: "limits in the log, queue missing from the queues bucket"})
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
			diffs = append(diffs, Diff{ID: "queue " + name, Reason: fmt.Sprintf("limits %+v at event %d, log says %+v at %d",
				got.Limits, got.LimitsSeq, want.Limits, want.LimitsSeq)})
		}
	}
	return diffs, len(reg.Types) + len(reg.Namespaces) + len(reg.Tokens) + len(reg.Queues), nil
}

// TypeView is a registered type as clients see it.
type TypeView struct {
	FullName     string          `json:"full_name"`
	Scope        string          `json:"scope"`
	Category     string          `json:"category"`
	Name         string          `json:"name"`
	Schema       json.RawMessage `json:"schema"` // null: any payload
	Description  string          `json:"description,omitempty"`
	Deleted      bool            `json:"deleted"`
	RegisteredAt time.Time       `json:"registered_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
}

// ViewType renders a type's record.
func ViewType(t *domain.TypeRecord) *TypeView {
	v := &TypeView{FullName: t.FullName(), Scope: t.Scope, Category: t.Category, Name: t.Name,
		Schema: json.RawMessage("null"), Description: t.Description, Deleted: t.Deleted,
		RegisteredAt: t.RegisteredAt, UpdatedAt: t.UpdatedAt}
	if len(t.Schema) > 0 {
		v.Schema = t.Schema
	}
	return v
}
