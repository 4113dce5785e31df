package projections

import (
	"fmt"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// FoldToken folds a token event into the token's record (nil before its
// creation). Events at or below the record's Seq are ignored.
func FoldToken(t *domain.TokenRecord, ev *domain.Event) (*domain.TokenRecord, error) {
	if ev.Token == nil {
		return nil, fmt.Errorf("%s event %d without a token", ev.Type, ev.Seq)
	}
	if t != nil && ev.Seq != 0 && ev.Seq <= t.Seq {
		return t, nil
	}
	var n domain.TokenRecord
	if t != nil {
		n = *t
	}
	switch ev.Type {
	case domain.EvTokenCreated:
		if t != nil {
			return nil, fmt.Errorf("token %s: created twice", ev.Token.ID)
		}
		c := ev.Token
		n = domain.TokenRecord{ID: c.ID, Name: c.Name, Namespace: c.Namespace, Role: c.Role, Hash: c.Hash,
			CreatedAt: ev.Time.UTC(), CreatedBy: ev.Actor, ExpiresAt: c.ExpiresAt.UTC()}
	case domain.EvTokenRevoked:
		if t == nil {
			return nil, fmt.Errorf("token %s: revoked before it was created", ev.Token.ID)
		}
		n.Revoked, n.RevokedAt, n.RevokedBy = true, ev.Time.UTC(), ev.Actor
	default:
		return nil, fmt.Errorf("token %s: %s is not a token event", ev.Token.ID, ev.Type)
	}
	n.Seq, n.LastHash = ev.Seq, ev.Hash
	return &n, nil
}

// TokenView is a token as an admin sees it: never its secret or hash.
type TokenView struct {
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Namespace string     `json:"namespace"`
	Role      string     `json:"role"`
	CreatedAt time.Time  `json:"created_at"`
	CreatedBy string     `json:"created_by,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	Revoked   bool       `json:"revoked"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	RevokedBy string     `json:"revoked_by,omitempty"`
	// Token is the token itself: only in the answer to its creation.
	Token string `json:"token,omitempty"`
}

// ViewToken renders a token's record.
func ViewToken(t *domain.TokenRecord) *TokenView {
	v := &TokenView{ID: t.ID, Name: t.Name, Namespace: t.Namespace, Role: t.Role, CreatedAt: t.CreatedAt,
		CreatedBy: t.CreatedBy, Revoked: t.Revoked, RevokedBy: t.RevokedBy}
	if !t.ExpiresAt.IsZero() {
		e := t.ExpiresAt
		v.ExpiresAt = &e
	}
	if t.Revoked {
		r := t.RevokedAt
		v.RevokedAt = &r
	}
	return v
}
