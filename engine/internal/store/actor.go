package store

import (
	"context"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
)

type principalKey struct{}

// WithPrincipal returns a context of a request made with p's token: the
// events the Store writes for it name p as their actor.
func WithPrincipal(ctx context.Context, p *commands.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalOf is the principal of a request's context (nil: none, as with
// authentication off or a process acting for itself).
func PrincipalOf(ctx context.Context) *commands.Principal {
	p, _ := ctx.Value(principalKey{}).(*commands.Principal)
	return p
}

// ActorOf is who a write made in ctx is recorded as: the request's
// principal, else this process.
func (s *Store) ActorOf(ctx context.Context) string {
	if p := PrincipalOf(ctx); p != nil {
		return p.Actor()
	}
	return s.actor
}

// stamp names the writer of an event that names none (ActorOf: the
// request's token, else this process: its client's name or NATS user),
// and the token of the request on an event its actor wrote on the token's
// behalf (a worker writing through a worker token): every event names who
// wrote it and the token that caused it.
func (s *Store) stamp(ctx context.Context, ev *domain.Event) {
	if ev.Actor == "" {
		ev.Actor = s.ActorOf(ctx)
	}
	if p := PrincipalOf(ctx); p != nil {
		if a := p.Actor(); a != ev.Actor {
			ev.By = a
		}
	}
}
