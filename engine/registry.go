package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/jetflow/jetflow/commands"
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
	store *Store
	types jetstream.KeyValue
	nss   jetstream.KeyValue

	// Categories, when not empty, are the only categories a type may be
	// registered under.
	Categories []string
	// MaxTypes is how many types one scope may hold; 0:
	// commands.MaxTypesPerScope.
	MaxTypes int

	once    sync.Once
	ready   chan struct{}
	mu      sync.RWMutex
	byName  map[string]*domain.TypeRecord // by full name
	spaces  map[string]*domain.NamespaceRecord
	schemas map[string]*compiledSchema // by full name
}

type compiledSchema struct {
	seq    uint64
	schema *jsonschema.Schema // nil: any payload
}

func openRegistry(ctx context.Context, s *Store) (*Registry, error) {
	types, err := s.JS.KeyValue(ctx, streams.TypesBucket)
	if err != nil {
		return nil, fmt.Errorf("types bucket: %w", err)
	}
	nss, err := s.JS.KeyValue(ctx, streams.NamespacesBucket)
	if err != nil {
		return nil, fmt.Errorf("namespaces bucket: %w", err)
	}
	return &Registry{store: s, types: types, nss: nss, ready: make(chan struct{}),
		byName: map[string]*domain.TypeRecord{}, spaces: map[string]*domain.NamespaceRecord{},
		schemas: map[string]*compiledSchema{}}, nil
}

// watch starts, once, the watches that keep the cache current, and waits
// for their first full read.
func (r *Registry) watch(ctx context.Context) error {
	r.once.Do(func() { go r.follow() })
	select {
	case <-r.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Registry) follow() {
	var wg sync.WaitGroup
	wg.Add(2)
	go followBucket(r.store, r.types, &wg, func(e jetstream.KeyValueEntry) {
		var t domain.TypeRecord
		if streams.Unmarshal(e.Value(), &t) == nil {
			r.remember(&t)
		}
	})
	go followBucket(r.store, r.nss, &wg, func(e jetstream.KeyValueEntry) {
		var n domain.NamespaceRecord
		if streams.Unmarshal(e.Value(), &n) == nil {
			r.rememberNamespace(&n)
		}
	})
	wg.Wait()
	close(r.ready)
}

// followBucket feeds fn every record of a bucket and its changes, for as
// long as the process lives; wg is told when the records there are now
// were read.
func followBucket(s *Store, kv jetstream.KeyValue, wg *sync.WaitGroup, fn func(jetstream.KeyValueEntry)) {
	synced := false
	for !s.NC.IsClosed() {
		w, err := kv.WatchAll(context.Background(), jetstream.IgnoreDeletes())
		if err != nil {
			time.Sleep(time.Second) // NATS is away: watch again when it is back
			continue
		}
		for e := range w.Updates() {
			if e == nil {
				if !synced {
					synced = true
					wg.Done()
				}
				continue
			}
			fn(e)
		}
		_ = w.Stop()
	}
	if !synced {
		wg.Done()
	}
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

// CanonicalSchema checks that b is a JSON Schema (draft 2020-12) and
// returns it compacted, with object keys in order, so that two schemas that
// say the same compare equal byte for byte. Empty: no schema.
func CanonicalSchema(b []byte) ([]byte, error) {
	if len(bytes.TrimSpace(b)) == 0 || string(bytes.TrimSpace(b)) == "null" {
		return nil, nil
	}
	if len(b) > commands.MaxSchemaBytes {
		return nil, fmt.Errorf("schema is %d bytes, at most %d: %w", len(b), commands.MaxSchemaBytes, commands.ErrInvalidSchema)
	}
	// json.Number keeps every number as written: a float64 would round
	// 12345678901234567891 and change what the schema says.
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("schema is not JSON: %v: %w", err, commands.ErrInvalidSchema)
	}
	if dec.More() {
		return nil, fmt.Errorf("schema is not one JSON value: %w", commands.ErrInvalidSchema)
	}
	canon, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("schema: %v: %w", err, commands.ErrInvalidSchema)
	}
	if _, err := compile(canon); err != nil {
		return nil, err
	}
	return canon, nil
}

// refuseLoader loads no URL: schemas are self-contained.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("$ref %q: a schema may refer only to itself", url)
}

func compile(schema []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		return nil, fmt.Errorf("schema is not JSON: %v: %w", err, commands.ErrInvalidSchema)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	// A $ref may point only inside the schema: the default loader would
	// read file:// URLs from the engine's disk for whoever registers a type.
	c.UseLoader(refuseLoader{})
	const url = "mem:///schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("schema: %v: %w", err, commands.ErrInvalidSchema)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("schema: %v: %w", err, commands.ErrInvalidSchema)
	}
	return sch, nil
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
	n := def.Name
	subject := streams.TypeSubject(n.Scope, n.Category, n.Name)
	for try := 0; ; try++ {
		cur, rev, err := r.load(ctx, n)
		if err != nil {
			return nil, false, err
		}
		if err := r.roomFor(ctx, cur, n); err != nil {
			return nil, false, err
		}
		ev, err := commands.RegisterType(cur, def, actor, time.Now().UTC(), bytes.Equal)
		if err != nil || ev == nil {
			return cur, false, err
		}
		expect := uint64(0)
		if cur != nil {
			expect = cur.Seq
		}
		seq, err := r.store.W.AppendAsync(subject, ev, expect).Wait(ctx)
		if streams.IsConflict(err) && try < maxDecisions {
			continue // another registration came first: decide again on it
		}
		if err != nil {
			return nil, false, fmt.Errorf("register type %s: %w", n, err)
		}
		ev.Seq = seq
		next, err := r.project(ctx, cur, rev, ev)
		if err != nil {
			return nil, false, err
		}
		return next, cur == nil, nil
	}
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
	cur, _, err := r.load(ctx, def.Name)
	if err != nil {
		return err
	}
	if err := r.roomFor(ctx, cur, def.Name); err != nil {
		return err
	}
	_, err = commands.RegisterType(cur, def, "", time.Now().UTC(), bytes.Equal)
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
	subject := streams.TypeSubject(n.Scope, n.Category, n.Name)
	for try := 0; ; try++ {
		cur, rev, err := r.load(ctx, n)
		if err != nil {
			return nil, err
		}
		if cur != nil && check != nil && !check(cur) {
			return cur, fmt.Errorf("type %s changed: %w", n, commands.ErrInvalidTransition)
		}
		ev, err := commands.DeleteType(cur, reason, actor, time.Now().UTC())
		if err != nil {
			return cur, err
		}
		seq, err := r.store.W.AppendAsync(subject, ev, cur.Seq).Wait(ctx)
		if streams.IsConflict(err) && try < maxDecisions {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("delete type %s: %w", n, err)
		}
		ev.Seq = seq
		return r.project(ctx, cur, rev, ev)
	}
}

// project writes the fold of ev into the type's record, revision-checked;
// a record that moved meanwhile is read again (load repairs it from the log).
func (r *Registry) project(ctx context.Context, cur *domain.TypeRecord, rev uint64, ev *domain.Event) (*domain.TypeRecord, error) {
	next, err := projections.FoldType(cur, ev)
	if err != nil {
		return nil, err
	}
	b, err := streams.Marshal(next)
	if err != nil {
		return nil, err
	}
	key := streams.TypeKey(next.Scope, next.Category, next.Name)
	if rev == 0 {
		_, err = r.types.Create(ctx, key, b)
	} else {
		_, err = r.types.Update(ctx, key, b, rev)
	}
	if err != nil {
		got, _, lerr := r.load(ctx, commands.TypeName{Scope: next.Scope, Category: next.Category, Name: next.Name})
		if lerr != nil {
			return nil, fmt.Errorf("project type %s: %w", next.FullName(), err)
		}
		next = got
	}
	r.remember(next)
	return next, nil
}

// load reads a type's record and its revision (nil, 0: never registered),
// folding in the events the record is missing (a writer that crashed
// between its append and its record) and writing them back.
func (r *Registry) load(ctx context.Context, n commands.TypeName) (*domain.TypeRecord, uint64, error) {
	for try := 0; ; try++ {
		cur, rev, err := r.loadOnce(ctx, n)
		if !errors.Is(err, errRepairRaced) || try >= maxDecisions {
			return cur, rev, err
		}
	}
}

// errRepairRaced: a record's write-back lost to another writer; read again.
var errRepairRaced = errors.New("record written by another meanwhile")

func (r *Registry) loadOnce(ctx context.Context, n commands.TypeName) (*domain.TypeRecord, uint64, error) {
	key := streams.TypeKey(n.Scope, n.Category, n.Name)
	var cur *domain.TypeRecord
	var rev uint64
	e, err := r.types.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
	case err != nil:
		return nil, 0, fmt.Errorf("type %s: %w", n, err)
	default:
		var t domain.TypeRecord
		if err := streams.Unmarshal(e.Value(), &t); err != nil {
			return nil, 0, fmt.Errorf("type %s record: %w", n, err)
		}
		cur, rev = &t, e.Revision()
	}
	folded, behind, err := catchUp(ctx, r.store, streams.TypeSubject(n.Scope, n.Category, n.Name), cur,
		func(t *domain.TypeRecord) uint64 { return t.Seq }, projections.FoldType)
	if err != nil || !behind {
		return cur, rev, err
	}
	b, err := streams.Marshal(folded)
	if err != nil {
		return nil, 0, err
	}
	if rev == 0 {
		rev, err = r.types.Create(ctx, key, b)
	} else {
		rev, err = r.types.Update(ctx, key, b, rev)
	}
	if err != nil {
		// Repaired by someone else meanwhile: read what they wrote.
		return nil, 0, fmt.Errorf("type %s: %w (%v)", n, errRepairRaced, err)
	}
	r.store.Repairs.Add(1)
	r.remember(folded)
	return folded, rev, nil
}

// Repair brings the record an event of the registry is about up to the
// log, when its writer died between the append and the record: the
// Projector calls it for every registry event it verifies.
func (r *Registry) Repair(ctx context.Context, ev *domain.Event) error {
	switch {
	case ev.TypeDef != nil:
		t, _, err := r.load(ctx, commands.TypeName{Scope: ev.TypeDef.Scope, Category: ev.TypeDef.Category, Name: ev.TypeDef.Name})
		if err == nil && t != nil {
			r.remember(t)
		}
		return err
	case ev.Namespace != nil:
		n, _, _, err := r.loadNamespace(ctx, ev.Namespace.Name)
		if err == nil && n != nil {
			r.rememberNamespace(n)
		}
		return err
	case ev.Token != nil:
		_, _, err := r.store.Tokens.load(ctx, ev.Token.ID)
		return err
	case ev.Queue != nil:
		_, _, _, err := r.store.loadQueueLimits(ctx, ev.Queue.Name)
		return err
	}
	return nil
}

// Type returns a type's record (ErrUnknownType if never registered).
func (r *Registry) Type(ctx context.Context, n commands.TypeName) (*domain.TypeRecord, error) {
	t, _, err := r.load(ctx, n)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("type %s: %w", n, commands.ErrUnknownType)
	}
	return t, nil
}

// Types lists the types visible from namespace ns (its own and @global;
// every type when ns is empty), soft-deleted ones only with deleted, by
// full name.
func (r *Registry) Types(ctx context.Context, ns string, deleted bool) ([]*domain.TypeRecord, error) {
	if err := r.watch(ctx); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := []*domain.TypeRecord{}
	for _, t := range r.byName {
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
	t, _, err := r.load(ctx, n)
	if t != nil {
		r.remember(t)
	}
	return t, err
}

// Resolve turns the type of a submit into the job's type: a free-form one
// (no ':') as it is, unless the namespace accepts only registered types; a
// full name or category:name (in ns, then @global) into the full name of an
// active registered type (ErrUnknownType otherwise), whose schema the
// payload must then satisfy (a *SchemaViolationError, ErrSchemaViolation).
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

// Violation is one way a payload breaks its type's schema.
type Violation = commands.Violation

// SchemaViolationError is a payload refused by its type's schema.
type SchemaViolationError = commands.SchemaViolationError

// validate checks a payload against a type's schema, compiled once per
// version of the type.
func (r *Registry) validate(t *domain.TypeRecord, payload []byte) error {
	if len(t.Schema) == 0 {
		return nil
	}
	r.mu.RLock()
	c := r.schemas[t.FullName()]
	r.mu.RUnlock()
	if c == nil || c.seq != t.Seq {
		sch, err := compile(t.Schema)
		if err != nil {
			return err
		}
		c = &compiledSchema{seq: t.Seq, schema: sch}
		r.mu.Lock()
		r.schemas[t.FullName()] = c
		r.mu.Unlock()
	}
	if len(payload) == 0 {
		payload = []byte("null")
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return &commands.InputError{Field: "payload", Reason: err.Error()}
	}
	err = c.schema.Validate(inst)
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return err
	}
	out := &SchemaViolationError{Type: t.FullName()}
	for _, u := range flatten(ve.BasicOutput()) {
		out.Violations = append(out.Violations, u)
	}
	return out
}

// flatten lists the leaves of a validation's output: each violation once.
func flatten(u *jsonschema.OutputUnit) []Violation {
	var out []Violation
	var walk func(u *jsonschema.OutputUnit)
	walk = func(u *jsonschema.OutputUnit) {
		if u.Error != nil && len(u.Errors) == 0 {
			ptr := u.InstanceLocation
			if ptr == "" {
				ptr = "/"
			}
			out = append(out, Violation{Pointer: ptr, Message: u.Error.String()})
		}
		for i := range u.Errors {
			walk(&u.Errors[i])
		}
	}
	walk(u)
	if len(out) == 0 {
		out = append(out, Violation{Pointer: "/", Message: "does not satisfy the schema"})
	}
	return out
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

// Namespaces lists the namespaces whose settings were set.
func (r *Registry) Namespaces(ctx context.Context) ([]*domain.NamespaceRecord, error) {
	if err := r.watch(ctx); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*domain.NamespaceRecord, 0, len(r.spaces))
	for _, n := range r.spaces {
		out = append(out, n)
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
	subject := streams.NamespaceSubject(ns)
	for try := 0; ; try++ {
		cur, rev, last, err := r.loadNamespace(ctx, ns)
		if err != nil {
			return nil, err
		}
		ev, err := commands.SetNamespace(cur, ns, s, actor, time.Now().UTC())
		if err != nil {
			return nil, err
		}
		if ev == nil {
			return cur, nil
		}
		seq, err := r.store.W.AppendAsync(subject, ev, last).Wait(ctx)
		if streams.IsConflict(err) && try < maxDecisions {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("set namespace %s: %w", ns, err)
		}
		ev.Seq = seq
		next, err := projections.FoldNamespace(cur, ev)
		if err != nil {
			return nil, err
		}
		b, err := streams.Marshal(next)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			_, err = r.nss.Create(ctx, ns, b)
		} else {
			_, err = r.nss.Update(ctx, ns, b, rev)
		}
		if err != nil {
			// Another writer's record came first; the Projector brings the
			// record up to the log when it verifies this event.
			r.store.Log.Warn("namespace record", "namespace", ns, "err", err)
		}
		r.rememberNamespace(next)
		return next, nil
	}
}

// loadNamespace reads a namespace's record, its revision and the sequence
// of its last event; a record behind the log (its writer crashed between
// the append and the record) is brought up to it and written back.
func (r *Registry) loadNamespace(ctx context.Context, ns string) (*domain.NamespaceRecord, uint64, uint64, error) {
	for try := 0; ; try++ {
		var cur *domain.NamespaceRecord
		var rev uint64
		e, err := r.nss.Get(ctx, ns)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, 0, 0, err
		default:
			var n domain.NamespaceRecord
			if err := streams.Unmarshal(e.Value(), &n); err != nil {
				return nil, 0, 0, err
			}
			cur, rev = &n, e.Revision()
		}
		ev, last, err := r.store.lastEvent(ctx, streams.NamespaceSubject(ns))
		if err != nil || last == 0 || cur != nil && cur.Seq >= last {
			return cur, rev, last, err
		}
		// The log is ahead of the record: fold its last event (a
		// namespace's record is its last settings) and write it back.
		next, err := projections.FoldNamespace(cur, ev)
		if err != nil {
			return nil, 0, 0, err
		}
		b, err := streams.Marshal(next)
		if err != nil {
			return nil, 0, 0, err
		}
		if rev == 0 {
			rev, err = r.nss.Create(ctx, ns, b)
		} else {
			rev, err = r.nss.Update(ctx, ns, b, rev)
		}
		if err != nil && try < maxDecisions {
			continue // repaired by another meanwhile: read theirs
		}
		if err != nil {
			return nil, 0, 0, fmt.Errorf("namespace %s record: %w", ns, err)
		}
		r.store.Repairs.Add(1)
		r.rememberNamespace(next)
		return next, rev, last, nil
	}
}

// catchUp folds into a record (cur; nil: none yet) the events of its
// subject it is missing, when its writer crashed between the append and
// the record: behind is false, and cur returned as it is, when the record
// is up to the subject's last event.
func catchUp[T any](ctx context.Context, s *Store, subject string, cur *T, seqOf func(*T) uint64,
	fold func(*T, *domain.Event) (*T, error)) (_ *T, behind bool, _ error) {
	last, err := s.lastSeq(ctx, subject)
	if err != nil || last == 0 || (cur != nil && seqOf(cur) >= last) {
		return cur, false, err
	}
	from := uint64(1)
	if cur != nil {
		from = seqOf(cur) + 1
	}
	folded := cur
	_, err = streams.ReadSubject(ctx, s.NC, streams.EventsStream, subject, from, func(seq uint64, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return err
		}
		ev.Seq = seq
		folded, err = fold(folded, ev)
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("read the events of %s: %w", subject, err)
	}
	return folded, true, nil
}
