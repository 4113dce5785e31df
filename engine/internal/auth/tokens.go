package auth

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/store"
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
	store *store.Store
	recs  *store.Aggregate[domain.TokenRecord]

	warm store.Warm
	mu   sync.RWMutex
	byID map[string]*domain.TokenRecord
}

// Open opens the tokens of a store.
func Open(ctx context.Context, s *store.Store) (*Tokens, error) {
	t := &Tokens{store: s, byID: map[string]*domain.TokenRecord{}}
	var err error
	t.recs, err = store.NewAggregate(ctx, s, store.Kind[domain.TokenRecord]{
		Name:   "token",
		Bucket: streams.TokensBucket,
		Seq:    func(r *domain.TokenRecord) uint64 { return r.Seq },
		Head:   func(r *domain.TokenRecord) []byte { return r.LastHash },
		Fold:   projections.FoldToken,
		RefOf: func(ev *domain.Event) (store.Ref, bool) {
			if ev.Token == nil {
				return store.Ref{}, false
			}
			return tokenRef(ev.Token.ID), true
		},
		Written: t.remember,
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

func tokenRef(id string) store.Ref { return store.Ref{Key: id, Subject: streams.TokenSubject(id)} }

func (t *Tokens) watch(ctx context.Context) error { return t.warm.Wait(ctx, t.recs.Feed(t.remember)) }

func (t *Tokens) remember(r *domain.TokenRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur := t.byID[r.ID]; cur == nil || cur.Seq < r.Seq {
		t.byID[r.ID] = r
	}
}

// Verify returns the principal of a presented token, or an error matching
// commands.ErrUnauthenticated: malformed, unknown, wrong secret, revoked or
// expired. A token created a moment ago on another process, not yet seen
// by the watch, is read from the bucket (and repaired from the log).
func (t *Tokens) Verify(ctx context.Context, token string) (*commands.Principal, error) {
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
		v, err := t.recs.Current(ctx, tokenRef(id))
		if err != nil {
			return nil, err
		}
		rec = v.Rec
	}
	if err := commands.CheckToken(rec, secret, time.Now()); err != nil {
		return nil, err
	}
	return &commands.Principal{TokenID: rec.ID, Name: rec.Name, Namespace: rec.Namespace, Role: commands.Role(rec.Role)}, nil
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
	// A new id: nothing to read first, its subject is empty.
	w := &store.Write[domain.TokenRecord]{Ref: tokenRef(id), Ev: ev}
	t.recs.Write(ctx, "token", w)
	if !w.Appended() {
		return nil, "", fmt.Errorf("create token: %w", w.Err)
	}
	if w.Err != nil {
		// The event is in the log: the Projector writes the record.
		t.store.Log.Warn("token record", "token", id, "err", w.Err)
	}
	return w.Next.Rec, token, nil
}

// Revoke revokes a token (commands.ErrUnknownToken if there is none); a
// token revoked already is returned as it is.
func (t *Tokens) Revoke(ctx context.Context, id, actor string) (*domain.TokenRecord, error) {
	if !domain.ValidID(id) {
		return nil, fmt.Errorf("token %q: %w", id, commands.ErrUnknownToken)
	}
	var decided *domain.TokenRecord
	next, ev, err := t.recs.Change(ctx, "revoke", tokenRef(id), func(cur *domain.TokenRecord) (*domain.Event, error) {
		decided = cur
		return commands.RevokeToken(cur, id, actor, time.Now().UTC())
	})
	if ev == nil {
		return decided, err
	}
	if err != nil {
		t.store.Log.Warn("token record", "token", id, "err", err)
	}
	return next.Rec, nil
}

// List returns every token, newest first, as the bucket has it now (not
// the watch: a token revoked a moment ago through another process is
// listed revoked).
func (t *Tokens) List(ctx context.Context) ([]*domain.TokenRecord, error) {
	out, err := t.recs.All(ctx)
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, k int) bool { return out[i].ID > out[k].ID })
	return out, nil
}

// CheckRefs refuses a submit of a namespaced principal whose parent or
// retry_of names a job it may not see (or none): the link would tie its
// job to another namespace's (its page, its cascade, whether it runs).
func CheckRefs(ctx context.Context, s *store.Store, p *commands.Principal, req *commands.SubmitRequest) error {
	if !p.Scoped() {
		return nil
	}
	for _, ref := range []struct{ field, id string }{{"parent", req.Parent}, {"retry_of", req.RetryOf}} {
		if ref.id == "" {
			continue
		}
		// Another namespace's job is read as an unknown id is (ReadSeen):
		// the answer and its time are the same.
		_, err := s.ReadSeen(ctx, p, ref.id)
		if err != nil && !errors.Is(err, commands.ErrNotFound) && !errors.Is(err, commands.ErrInvalidInput) {
			return err
		}
		if err != nil {
			return &commands.InputError{Field: ref.field, Value: fmt.Sprintf("%q", ref.id), Reason: "no job of this namespace has the id"}
		}
	}
	return nil
}
