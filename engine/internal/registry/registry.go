package registry

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Registry is the type registry and the namespaces' settings: event-sourced
// like jobs (their events on jetflow.reg.> in the event log, appended with
// the expected last sequence of their subject, so two registrations at
// once decide one after the other), projected into the types and
// namespaces buckets, and read through a cache that a watch of the buckets
// keeps current, so that resolving and validating a submit costs no round
// trip. Compiled schemas are cached by type and event sequence.
type Registry struct {
	store *store.Store
	types *store.Aggregate[domain.TypeRecord]
	nss   *store.Aggregate[domain.NamespaceRecord]

	// Categories, when not empty, are the only categories a type may be
	// registered under.
	Categories []string
	// MaxTypes is how many types one scope may hold; 0:
	// commands.MaxTypesPerScope.
	MaxTypes int

	warm    store.Warm
	mu      sync.RWMutex
	byName  map[string]*domain.TypeRecord // by full name
	spaces  map[string]*domain.NamespaceRecord
	schemas map[string]*compiledSchema // by full name
}

type compiledSchema struct {
	seq    uint64
	schema *jsonschema.Schema // nil: any payload
}

// Open opens the registry of a store, and makes the store resolve the
// types of its submits with it.
func Open(ctx context.Context, s *store.Store) (*Registry, error) {
	r := &Registry{store: s,
		byName: map[string]*domain.TypeRecord{}, spaces: map[string]*domain.NamespaceRecord{},
		schemas: map[string]*compiledSchema{}}
	var err error
	r.types, err = store.NewAggregate(ctx, s, store.Kind[domain.TypeRecord]{
		Name:   "type",
		Bucket: streams.TypesBucket,
		Seq:    func(t *domain.TypeRecord) uint64 { return t.Seq },
		Head:   func(t *domain.TypeRecord) []byte { return t.LastHash },
		Fold:   projections.FoldType,
		RefOf: func(ev *domain.Event) (store.Ref, bool) {
			if ev.TypeDef == nil {
				return store.Ref{}, false
			}
			return typeRef(commands.TypeName{Scope: ev.TypeDef.Scope, Category: ev.TypeDef.Category, Name: ev.TypeDef.Name}), true
		},
		Written: r.remember,
	})
	if err != nil {
		return nil, err
	}
	r.nss, err = store.NewAggregate(ctx, s, store.Kind[domain.NamespaceRecord]{
		Name:     "namespace",
		Bucket:   streams.NamespacesBucket,
		Seq:      func(n *domain.NamespaceRecord) uint64 { return n.Seq },
		Head:     func(n *domain.NamespaceRecord) []byte { return n.LastHash },
		Fold:     projections.FoldNamespace,
		LastOnly: true, // a namespace's record is its last settings
		RefOf: func(ev *domain.Event) (store.Ref, bool) {
			if ev.Namespace == nil {
				return store.Ref{}, false
			}
			return namespaceRef(ev.Namespace.Name), true
		},
		Written: r.rememberNamespace,
	})
	if err != nil {
		return nil, err
	}
	s.UseTypes(r)
	return r, nil
}

func typeRef(n commands.TypeName) store.Ref {
	return store.Ref{Key: streams.TypeKey(n.Scope, n.Category, n.Name), Subject: streams.TypeSubject(n.Scope, n.Category, n.Name)}
}

func namespaceRef(ns string) store.Ref {
	return store.Ref{Key: ns, Subject: streams.NamespaceSubject(ns)}
}

// watch starts, once, the watches that keep the cache current, and waits
// for their first full read.
func (r *Registry) watch(ctx context.Context) error {
	return r.warm.Wait(ctx, r.types.Feed(r.remember), r.nss.Feed(r.rememberNamespace))
}

func (r *Registry) remember(t *domain.TypeRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.byName[t.FullName()]; cur == nil || cur.Seq < t.Seq {
		r.byName[t.FullName()] = t
	}
}

func (r *Registry) rememberNamespace(n *domain.NamespaceRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur := r.spaces[n.Name]; cur == nil || cur.Seq < n.Seq {
		r.spaces[n.Name] = n
	}
}

// Register registers a type, or reactivates a deleted one
// (commands.RegisterType): created says it did not exist before. An active
// type registered again with the same schema (or none) writes nothing.
func (r *Registry) Register(ctx context.Context, def commands.TypeDef, actor string) (rec *domain.TypeRecord, created bool, err error) {
	if err := def.Name.Check(r.Categories); err != nil {
		return nil, false, err
	}
	if def.Schema, err = CanonicalSchema(def.Schema); err != nil {
		return nil, false, err
	}
	var before *domain.TypeRecord
	next, ev, err := r.types.Change(ctx, "register", typeRef(def.Name), func(cur *domain.TypeRecord) (*domain.Event, error) {
		before = cur
		if err := r.roomFor(ctx, cur, def.Name); err != nil {
			return nil, err
		}
		return commands.RegisterType(cur, def, actor, time.Now().UTC(), commands.SchemaEqualBytes)
	})
	if ev == nil {
		return before, false, err
	}
	if err != nil {
		return nil, false, err
	}
	return next.Rec, before == nil, nil
}

// Check decides a registration as Register would, on the type as it is
// now, and writes nothing: for a caller with several registrations that
// must all be accepted before any is written (a worker's types).
func (r *Registry) Check(ctx context.Context, def commands.TypeDef) error {
	if err := def.Name.Check(r.Categories); err != nil {
		return err
	}
	schema, err := CanonicalSchema(def.Schema)
	if err != nil {
		return err
	}
	def.Schema = schema
	cur, err := r.types.Current(ctx, typeRef(def.Name))
	if err != nil {
		return err
	}
	if err := r.roomFor(ctx, cur.Rec, def.Name); err != nil {
		return err
	}
	_, err = commands.RegisterType(cur.Rec, def, "", time.Now().UTC(), commands.SchemaEqualBytes)
	return err
}

// roomFor refuses a new type in a scope that holds MaxTypesPerScope types
// already (deleted ones count: they can come back). It counts what this
// engine's cache holds: engines registering at the same moment may pass
// the limit by a few.
func (r *Registry) roomFor(ctx context.Context, cur *domain.TypeRecord, n commands.TypeName) error {
	if cur != nil {
		return nil
	}
	if err := r.watch(ctx); err != nil {
		return err
	}
	r.mu.RLock()
	count := 0
	for _, t := range r.byName {
		if t.Scope == n.Scope {
			count++
		}
	}
	r.mu.RUnlock()
	limit := r.MaxTypes
	if limit <= 0 {
		limit = commands.MaxTypesPerScope
	}
	if count >= limit {
		return fmt.Errorf("%s holds %d types, at most %d: %w", n.Scope, count, limit, commands.ErrTypeLimit)
	}
	return nil
}

// Delete soft-deletes a type (commands.DeleteType), decided on the type
// as it is; check, if not nil, must still hold of it.
func (r *Registry) Delete(ctx context.Context, n commands.TypeName, reason, actor string, check func(*domain.TypeRecord) bool) (*domain.TypeRecord, error) {
	var decided *domain.TypeRecord
	next, ev, err := r.types.Change(ctx, "delete-type", typeRef(n), func(cur *domain.TypeRecord) (*domain.Event, error) {
		decided = cur
		if cur != nil && check != nil && !check(cur) {
			return nil, fmt.Errorf("type %s changed: %w", n, commands.ErrInvalidTransition)
		}
		return commands.DeleteType(cur, reason, actor, time.Now().UTC())
	})
	if ev == nil {
		return decided, err
	}
	if err != nil {
		return nil, err
	}
	return next.Rec, nil
}

// Type returns a type's record (ErrUnknownType if never registered).
func (r *Registry) Type(ctx context.Context, n commands.TypeName) (*domain.TypeRecord, error) {
	v, err := r.types.Current(ctx, typeRef(n))
	if err != nil {
		return nil, err
	}
	if v.Rec == nil {
		return nil, fmt.Errorf("type %s: %w", n, commands.ErrUnknownType)
	}
	return v.Rec, nil
}

// Types lists the types visible from namespace ns (its own and @global;
// every type when ns is empty), soft-deleted ones only with deleted, by
// full name. It reads the bucket, not the cache: a type registered an
// instant ago by another process is listed.
func (r *Registry) Types(ctx context.Context, ns string, deleted bool) ([]*domain.TypeRecord, error) {
	all, err := r.types.All(ctx)
	if err != nil {
		return nil, err
	}
	out := []*domain.TypeRecord{}
	for _, t := range all {
		r.remember(t)
		if (t.Deleted && !deleted) || (ns != "" && t.Scope != ns && t.Scope != commands.ScopeGlobal) {
			continue
		}
		out = append(out, t)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].FullName() < out[k].FullName() })
	return out, nil
}

// lookup returns the record of a full name: the cache's, else the bucket's
// (a type registered an instant ago by another process).
func (r *Registry) lookup(ctx context.Context, n commands.TypeName) (*domain.TypeRecord, error) {
	r.mu.RLock()
	t := r.byName[n.String()]
	r.mu.RUnlock()
	if t != nil {
		return t, nil
	}
	v, err := r.types.Current(ctx, typeRef(n))
	if v.Rec != nil {
		r.remember(v.Rec)
	}
	return v.Rec, err
}

// Resolve turns the type of a submit into the job's type: a free-form one
// (no ':') as it is, unless the namespace accepts only registered types; a
// full name or category:name (in ns, then @global) into the full name of an
// active registered type (ErrUnknownType otherwise), whose schema the
// payload must then satisfy (a *commands.SchemaViolationError,
// ErrSchemaViolation).
func (r *Registry) Resolve(ctx context.Context, ns, jobType string, payload []byte) (string, error) {
	if err := r.watch(ctx); err != nil {
		return "", err
	}
	if !commands.Registered(jobType) {
		r.mu.RLock()
		strict := r.spaces[ns] != nil && r.spaces[ns].Settings.StrictTypes
		r.mu.RUnlock()
		if strict {
			return "", fmt.Errorf("type %q is free-form; namespace %s accepts only registered types (category:name): %w",
				jobType, ns, commands.ErrUnknownType)
		}
		return jobType, nil
	}
	names, err := commands.Candidates(ns, jobType)
	if err != nil {
		return "", err
	}
	for _, n := range names {
		t, err := r.lookup(ctx, n)
		if err != nil {
			return "", err
		}
		if t == nil || t.Deleted {
			continue
		}
		if err := r.validate(t, payload); err != nil {
			return "", err
		}
		return t.FullName(), nil
	}
	looked := make([]string, len(names))
	for i, n := range names {
		looked[i] = n.String()
	}
	return "", fmt.Errorf("type %s: no active type %s: %w", jobType, strings.Join(looked, " or "), commands.ErrUnknownType)
}

// Scopes are the namespaces with settings or with registered types
// (soft-deleted ones too), as the watch has them: for a list of names to
// choose from, where an instant's lag does not matter (Types and
// Namespaces read the bucket).
func (r *Registry) Scopes(ctx context.Context) ([]string, error) {
	if err := r.watch(ctx); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := map[string]bool{}
	for n := range r.spaces {
		seen[n] = true
	}
	for _, t := range r.byName {
		if !strings.HasPrefix(t.Scope, "@") {
			seen[t.Scope] = true
		}
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// Namespace returns a namespace's settings record (nil: never set).
func (r *Registry) Namespace(ctx context.Context, ns string) (*domain.NamespaceRecord, error) {
	if err := r.watch(ctx); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.spaces[ns], nil
}

// Namespaces lists the namespaces whose settings were set, read from the
// bucket (one set an instant ago by another process is listed).
func (r *Registry) Namespaces(ctx context.Context) ([]*domain.NamespaceRecord, error) {
	out, err := r.nss.All(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range out {
		r.rememberNamespace(n)
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Name < out[k].Name })
	return out, nil
}

// SetNamespace sets a namespace's settings (namespace.set), decided on its
// record as the log has it.
func (r *Registry) SetNamespace(ctx context.Context, ns string, s domain.NamespaceSettings, actor string) (*domain.NamespaceRecord, error) {
	if err := commands.CheckNamespace(ns); err != nil {
		return nil, err
	}
	var decided *domain.NamespaceRecord
	next, ev, err := r.nss.Change(ctx, "namespace", namespaceRef(ns), func(cur *domain.NamespaceRecord) (*domain.Event, error) {
		decided = cur
		return commands.SetNamespace(cur, ns, s, actor, time.Now().UTC())
	})
	if ev == nil {
		return decided, err
	}
	if err != nil {
		// The event is in the log; the Projector brings the record up to
		// it when it verifies this event.
		r.store.Log.Warn("namespace record", "namespace", ns, "err", err)
	}
	return next.Rec, nil
}
