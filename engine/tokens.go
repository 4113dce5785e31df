package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
	"github.com/jetflow/jetflow/streams"
)

// Tokens are the access tokens: created and revoked as events on the log
// (jetflow.reg.token.<id>), projected into the tokens bucket (a hash of
// each secret, never the secret), and checked through a cache that a watch
// of the bucket keeps current, so that a request costs no round trip and a
// revocation reaches every process as fast as the watch (milliseconds).
type Tokens struct {
	store *Store
	kv    jetstream.KeyValue

	once  sync.Once
	ready chan struct{}
	mu    sync.RWMutex
	byID  map[string]*domain.TokenRecord
}

func openTokens(ctx context.Context, s *Store) (*Tokens, error) {
	kv, err := s.JS.KeyValue(ctx, streams.TokensBucket)
	if err != nil {
		return nil, fmt.Errorf("tokens bucket: %w", err)
	}
	return &Tokens{store: s, kv: kv, ready: make(chan struct{}), byID: map[string]*domain.TokenRecord{}}, nil
}

func (t *Tokens) watch(ctx context.Context) error {
	t.once.Do(func() {
		go func() {
			var wg sync.WaitGroup
			wg.Add(1)
			go followBucket(t.store, t.kv, &wg, func(e jetstream.KeyValueEntry) {
				var r domain.TokenRecord
				if streams.Unmarshal(e.Value(), &r) == nil {
					t.remember(&r)
				}
			})
			wg.Wait()
			close(t.ready)
		}()
	})
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (t *Tokens) remember(r *domain.TokenRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur := t.byID[r.ID]; cur == nil || cur.Seq < r.Seq {
		t.byID[r.ID] = r
	}
}

// Principal is who a request acts for: a token's holder.
type Principal struct {
	TokenID   string
	Name      string
	Namespace string // commands.AllNamespaces: every namespace
	Role      commands.Role
}

// Actor is how events written on the principal's behalf name it.
func (p *Principal) Actor() string { return "token:" + p.Name + "/" + p.TokenID }

// Sees reports whether the principal may see or touch namespace ns.
func (p *Principal) Sees(ns string) bool {
	return p.Namespace == commands.AllNamespaces || p.Namespace == ns
}

// Scope is the namespace a request of the principal acts in: the one it
// names (asked), else the principal's own. A namespaced principal naming
// another is refused (403, whether that namespace exists or not). A nil
// principal (access control off) acts where it asks.
func (p *Principal) Scope(act commands.Action, asked string) (string, error) {
	if p == nil || p.Namespace == commands.AllNamespaces {
		return asked, nil
	}
	if asked != "" && asked != p.Namespace {
		return "", &commands.ForbiddenError{Role: p.Role, Action: act, Namespace: asked}
	}
	return p.Namespace, nil
}

// Can refuses an action the principal's role does not allow
// (*commands.ForbiddenError).
func (p *Principal) Can(act commands.Action) error {
	if !commands.RoleAllows(p.Role, act) {
		return &commands.ForbiddenError{Role: p.Role, Action: act}
	}
	return nil
}

// Verify returns the principal of a presented token, or an error matching
// commands.ErrUnauthenticated: malformed, unknown, wrong secret, revoked or
// expired. A token created a moment ago on another process, not yet seen
// by the watch, is read from the bucket (and repaired from the log).
func (t *Tokens) Verify(ctx context.Context, token string) (*Principal, error) {
	id, secret, err := commands.ParseToken(token)
	if err != nil {
		return nil, err
	}
	if err := t.watch(ctx); err != nil {
		return nil, err
	}
	t.mu.RLock()
	rec := t.byID[id]
	t.mu.RUnlock()
	if rec == nil {
		if rec, _, err = t.load(ctx, id); err != nil {
			return nil, err
		}
	}
	if err := commands.CheckToken(rec, secret, time.Now()); err != nil {
		return nil, err
	}
	return &Principal{TokenID: rec.ID, Name: rec.Name, Namespace: rec.Namespace, Role: commands.Role(rec.Role)}, nil
}

// Create creates a token and returns its record and the token itself,
// which is not stored anywhere: the caller hands it out once.
func (t *Tokens) Create(ctx context.Context, spec commands.TokenSpec, actor string) (*domain.TokenRecord, string, error) {
	id, token, hash, err := commands.NewToken()
	if err != nil {
		return nil, "", err
	}
	ev, err := commands.CreateToken(id, hash, spec, actor, time.Now().UTC())
	if err != nil {
		return nil, "", err
	}
	seq, err := t.store.W.AppendAsync(streams.TokenSubject(id), ev, 0).Wait(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("create token: %w", err)
	}
	ev.Seq = seq
	rec, err := projections.FoldToken(nil, ev)
	if err != nil {
		return nil, "", err
	}
	if _, err := t.put(ctx, rec, 0); err != nil {
		// The event is in the log: the Projector writes the record.
		t.store.Log.Warn("token record", "token", id, "err", err)
	}
	t.remember(rec)
	return rec, token, nil
}

// Revoke revokes a token (commands.ErrUnknownToken if there is none); a
// token revoked already is returned as it is.
func (t *Tokens) Revoke(ctx context.Context, id, actor string) (*domain.TokenRecord, error) {
	if !domain.ValidID(id) {
		return nil, fmt.Errorf("token %q: %w", id, commands.ErrUnknownToken)
	}
	for try := 0; ; try++ {
		cur, rev, err := t.load(ctx, id)
		if err != nil {
			return nil, err
		}
		ev, err := commands.RevokeToken(cur, id, actor, time.Now().UTC())
		if err != nil || ev == nil {
			return cur, err
		}
		seq, err := t.store.W.AppendAsync(streams.TokenSubject(id), ev, cur.Seq).Wait(ctx)
		if streams.IsConflict(err) && try < maxDecisions {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("revoke token %s: %w", id, err)
		}
		ev.Seq = seq
		next, err := projections.FoldToken(cur, ev)
		if err != nil {
			return nil, err
		}
		if _, err := t.put(ctx, next, rev); err != nil {
			t.store.Log.Warn("token record", "token", id, "err", err)
		}
		t.remember(next)
		return next, nil
	}
}

// List returns every token, newest first.
func (t *Tokens) List(ctx context.Context) ([]*domain.TokenRecord, error) {
	if err := t.watch(ctx); err != nil {
		return nil, err
	}
	t.mu.RLock()
	out := make([]*domain.TokenRecord, 0, len(t.byID))
	for _, r := range t.byID {
		out = append(out, r)
	}
	t.mu.RUnlock()
	sort.Slice(out, func(i, k int) bool { return out[i].ID > out[k].ID })
	return out, nil
}

func (t *Tokens) put(ctx context.Context, r *domain.TokenRecord, rev uint64) (uint64, error) {
	b, err := streams.Marshal(r)
	if err != nil {
		return 0, err
	}
	if rev == 0 {
		return t.kv.Create(ctx, r.ID, b)
	}
	return t.kv.Update(ctx, r.ID, b, rev)
}

// load reads a token's record and revision (nil, 0: no such token),
// folding in the events the record is missing (a writer that crashed
// between its append and its record) and writing them back.
func (t *Tokens) load(ctx context.Context, id string) (*domain.TokenRecord, uint64, error) {
	for try := 0; ; try++ {
		var cur *domain.TokenRecord
		var rev uint64
		e, err := t.kv.Get(ctx, id)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return nil, 0, fmt.Errorf("token %s: %w", id, err)
		default:
			var r domain.TokenRecord
			if err := streams.Unmarshal(e.Value(), &r); err != nil {
				return nil, 0, fmt.Errorf("token %s record: %w", id, err)
			}
			cur, rev = &r, e.Revision()
		}
		folded, behind, err := catchUp(ctx, t.store, streams.TokenSubject(id), cur,
			func(r *domain.TokenRecord) uint64 { return r.Seq }, projections.FoldToken)
		if err != nil || !behind {
			return cur, rev, err
		}
		rev, err = t.put(ctx, folded, rev)
		if err != nil {
			if try < maxDecisions {
				continue // repaired by another meanwhile: read theirs
			}
			return nil, 0, fmt.Errorf("token %s record: %w", id, err)
		}
		t.store.Repairs.Add(1)
		t.remember(folded)
		return folded, rev, nil
	}
}

type principalKey struct{}

// WithPrincipal returns a context of a request made with p's token: the
// events the Store writes for it name p as their actor.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalOf is the principal of a request's context (nil: none, as with
// authentication off or a process acting for itself).
func PrincipalOf(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

// ActorOf is who a write made in ctx is recorded as: the request's
// principal, else this process.
func (s *Store) ActorOf(ctx context.Context) string {
	if p := PrincipalOf(ctx); p != nil {
		return p.Actor()
	}
	return s.Actor
}

// CheckRefs refuses a submit of a namespaced principal whose parent or
// retry_of names a job it may not see (or none): the link would tie its
// job to another namespace's (its page, its cascade, whether it runs).
func (s *Store) CheckRefs(ctx context.Context, p *Principal, req *commands.SubmitRequest) error {
	if p == nil || p.Namespace == commands.AllNamespaces {
		return nil
	}
	for _, ref := range []struct{ field, id string }{{"parent", req.Parent}, {"retry_of", req.RetryOf}} {
		if ref.id == "" {
			continue
		}
		snap, err := s.Lookup(ctx, ref.id)
		if err != nil && !errors.Is(err, commands.ErrNotFound) && !errors.Is(err, commands.ErrInvalidInput) {
			return err
		}
		if err != nil || !p.Sees(snap.Job.Spec.Namespace) {
			return &commands.InputError{Field: ref.field, Value: fmt.Sprintf("%q", ref.id), Reason: "no job of this namespace has the id"}
		}
	}
	return nil
}

// stamp names the token of the request on an event its actor wrote on the
// token's behalf (a worker writing through a worker token): every event
// names the token that caused it.
func stamp(ctx context.Context, ev *domain.Event) {
	if p := PrincipalOf(ctx); p != nil {
		if a := p.Actor(); a != ev.Actor {
			ev.By = a
		}
	}
}
