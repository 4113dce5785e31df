package streams

import "time"

// Access tokens are event-sourced like the registry: their events go to
// the event log on a subject of their own, and their state is a
// projection in a KV bucket. Only a hash of a token's secret is stored.
//
//	jetflow.reg.token.<id>   a token's creation and revocation
const TokensBucket = "jetflow_tokens"

// Event types of tokens.
const (
	EvTokenCreated = "token.created"
	EvTokenRevoked = "token.revoked"
)

// TokenSubject is the subject of a token's events.
func TokenSubject(id string) string { return RegistryPrefix + ".token." + Token(id) }

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
}
