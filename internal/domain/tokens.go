package domain

import "time"

// Event types of tokens.
const (
	EvTokenCreated = "token.created"
	EvTokenRevoked = "token.revoked"
)

// TokenChange is what a token event carries: on token.created the whole
// token (its secret's hash, never the secret), on token.revoked its id.
type TokenChange struct {
	ID        string    `msgpack:"id"`
	Name      string    `msgpack:"name,omitempty"`
	Namespace string    `msgpack:"namespace,omitempty"` // "*": every namespace
	Role      string    `msgpack:"role,omitempty"`
	Hash      string    `msgpack:"hash,omitempty"` // hex SHA-256 of the secret
	ExpiresAt time.Time `msgpack:"expires_at,omitempty"`
}

// TokenRecord is a token: the fold of its events, in TokensBucket.
type TokenRecord struct {
	ID        string    `msgpack:"id"`
	Name      string    `msgpack:"name"`
	Namespace string    `msgpack:"namespace"`
	Role      string    `msgpack:"role"`
	Hash      string    `msgpack:"hash"`
	CreatedAt time.Time `msgpack:"created_at"`
	CreatedBy string    `msgpack:"created_by,omitempty"`
	ExpiresAt time.Time `msgpack:"expires_at,omitempty"` // zero: never
	Revoked   bool      `msgpack:"revoked,omitempty"`
	RevokedAt time.Time `msgpack:"revoked_at,omitempty"`
	RevokedBy string    `msgpack:"revoked_by,omitempty"`
	Seq       uint64    `msgpack:"seq"`
	LastHash  []byte    `msgpack:"last_hash,omitempty" json:"-"` // the chain hash of the event at Seq
}
