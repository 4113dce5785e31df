package projections

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
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
	n.UpdatedAt, n.Seq, n.LastHash = ev.Time.UTC(), ev.Seq, ev.Hash
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
		UpdatedAt: ev.Time.UTC(), Seq: ev.Seq, LastHash: ev.Hash}, nil
}

// FoldQueueLimits folds a queue.set event into a queue's record.
func FoldQueueLimits(rec domain.QueueRecord, ev *domain.Event) domain.QueueRecord {
	if ev.Queue == nil || ev.Seq != 0 && ev.Seq <= rec.LimitsSeq {
		return rec
	}
	rec.Limits, rec.LimitsSeq, rec.LimitsAt, rec.LimitsBy = ev.Queue.Limits, ev.Seq, ev.Time.UTC(), ev.Actor
	rec.LimitsHash = ev.Hash
	if rec.Name == "" {
		rec.Name = ev.Queue.Name
	}
	return rec
}

// Registry is the type registry, the namespaces, the tokens and the
// queues' limits as the log says they are: types by full name, the others
// by name or id.
type Registry struct {
	Types      map[string]*domain.TypeRecord
	Namespaces map[string]*domain.NamespaceRecord
	Tokens     map[string]*domain.TokenRecord
	Queues     map[string]domain.QueueRecord // queues' limits (only the Limits fields)
}

// NewRegistry returns an empty registry, to fold the registry's events
// into, in log order.
func NewRegistry() *Registry {
	return &Registry{Types: map[string]*domain.TypeRecord{}, Namespaces: map[string]*domain.NamespaceRecord{},
		Tokens: map[string]*domain.TokenRecord{}, Queues: map[string]domain.QueueRecord{}}
}

// Fold folds one registry event (its Seq set) into the registry.
func (reg *Registry) Fold(ev *domain.Event) error {
	switch {
	case ev.TypeDef != nil:
		key := ev.TypeDef.Scope + ":" + ev.TypeDef.Category + ":" + ev.TypeDef.Name
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
