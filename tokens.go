package jetflow

import (
	"context"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/projections"
)

// Access tokens for the HTTP API and the dashboard (served with access
// control on: gateway.Config.Auth, `jetflow serve --auth`). A token belongs
// to one namespace, or to every one (AllNamespaces), and has one role.
// Creating and revoking one are events on the log; only a hash of the
// secret is stored. These calls write through the client's NATS
// connection: they need the engine's NATS permissions, which is what makes
// an operator an operator (docs/security.md).
type (
	// TokenSpec is what a token is created with.
	TokenSpec = commands.TokenSpec
	// TokenInfo is a token as an admin sees it; Token (the secret) is set
	// only in what CreateToken returns.
	TokenInfo = projections.TokenView
	// Role is what a token may do.
	Role = commands.Role
)

// Roles of tokens.
const (
	RoleAdmin     = commands.RoleAdmin
	RoleProducer  = commands.RoleProducer
	RoleWorker    = commands.RoleWorker
	RoleReader    = commands.RoleReader
	AllNamespaces = commands.AllNamespaces
)

// CreateToken creates a token and returns it, with the token itself in
// Token: the only time it is shown. A spec out of range is an error
// matching ErrInvalidInput that names the field.
func (c *Client) CreateToken(ctx context.Context, spec TokenSpec) (*TokenInfo, error) {
	if c.store == nil {
		return nil, c.needsEngine("create a token")
	}
	rec, tok, err := c.store.Tokens.Create(ctx, spec, c.store.ActorOf(ctx))
	if err != nil {
		return nil, err
	}
	v := projections.ViewToken(rec)
	v.Token = tok
	return v, nil
}

// Tokens lists every token, newest first, revoked ones included.
func (c *Client) Tokens(ctx context.Context) ([]*TokenInfo, error) {
	if c.store == nil {
		return nil, c.needsEngine("tokens")
	}
	recs, err := c.store.Tokens.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*TokenInfo, len(recs))
	for i, r := range recs {
		out[i] = projections.ViewToken(r)
	}
	return out, nil
}

// RevokeToken revokes a token: every gateway refuses it from then on
// (within the time its watch of the tokens takes to see it, milliseconds).
// An unknown id is an error matching ErrNotFound; revoking twice is not
// an error.
func (c *Client) RevokeToken(ctx context.Context, id string) (*TokenInfo, error) {
	if c.store == nil {
		return nil, c.needsEngine("revoke a token")
	}
	rec, err := c.store.Tokens.Revoke(ctx, id, c.store.ActorOf(ctx))
	if err != nil {
		return nil, err
	}
	return projections.ViewToken(rec), nil
}
