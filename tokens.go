package jetflow

import (
	"context"
)

// Access tokens for the HTTP API and the dashboard (served with access
// control on: gateway.Config.Auth, `jetflow serve --auth`). A token belongs
// to one namespace, or to every one (AllNamespaces), and has one role.
// Creating and revoking one are events on the log; only a hash of the
// secret is stored. A client with the engine's NATS permissions writes
// them itself (an operator is whoever holds those: docs/security.md); a
// token client needs an admin token.
// CreateToken creates a token and returns it, with the token itself in
// Token: the only time it is shown. A spec out of range is an error
// matching ErrInvalidInput that names the field.
func (c *Client) CreateToken(ctx context.Context, spec TokenSpec) (*TokenInfo, error) {
	t, err := c.b.createToken(ctx, spec.command())
	if err != nil {
		return nil, publicErr(err)
	}
	return tokenInfo(t), nil
}

// Tokens lists every token, newest first, revoked ones included.
func (c *Client) Tokens(ctx context.Context) ([]*TokenInfo, error) {
	ts, err := c.b.tokens(ctx)
	return all(ts, err, tokenInfo)
}

// RevokeToken revokes a token: every gateway refuses it from then on
// (within the time its watch of the tokens takes to see it, milliseconds).
// An unknown id is an error matching ErrNotFound; revoking twice is not
// an error.
func (c *Client) RevokeToken(ctx context.Context, id string) (*TokenInfo, error) {
	t, err := c.b.revokeToken(ctx, id)
	if err != nil {
		return nil, publicErr(err)
	}
	return tokenInfo(t), nil
}
