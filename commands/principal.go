package commands

import (
	"errors"
	"fmt"
)

// Principal is who a request acts for: a token's holder. Its methods are
// the rules of what it may see and do.
type Principal struct {
	TokenID   string
	Name      string
	Namespace string // AllNamespaces: every namespace
	Role      Role
}

// Actor is how events written on the principal's behalf name it.
func (p *Principal) Actor() string { return "token:" + p.Name + "/" + p.TokenID }

// Sees reports whether the principal may see or touch namespace ns.
func (p *Principal) Sees(ns string) bool {
	return p.Namespace == AllNamespaces || p.Namespace == ns
}

// Unseen is err as a principal p that may not see a purged job of another
// namespace is told it: the error of a job that does not exist, not its
// purge (a GoneError says when and why). Any other err is returned as it is.
func Unseen(p *Principal, id string, err error) error {
	var gone *GoneError
	if p.Scoped() && errors.As(err, &gone) && !p.Sees(gone.Namespace) {
		return fmt.Errorf("job %s: %w", id, ErrNotFound)
	}
	return err
}

// Scoped reports whether the principal is held to one namespace (a nil
// principal, access control off, is not).
func (p *Principal) Scoped() bool { return p != nil && p.Namespace != AllNamespaces }

// Scope is the namespace a request of the principal acts in: the one it
// names (asked), else the principal's own. A namespaced principal naming
// another is refused (403, whether that namespace exists or not). A nil
// principal (access control off) acts where it asks.
func (p *Principal) Scope(act Action, asked string) (string, error) {
	if !p.Scoped() {
		return asked, nil
	}
	if asked != "" && asked != p.Namespace {
		return "", &forbiddenError{Role: p.Role, Action: act, Namespace: asked}
	}
	return p.Namespace, nil
}

// Can refuses an action the principal's role does not allow
// (*forbiddenError).
func (p *Principal) Can(act Action) error {
	if !roleAllows(p.Role, act) {
		return &forbiddenError{Role: p.Role, Action: act}
	}
	return nil
}

// verbActions is the action of each verb of the command protocol
// (jetflow.cmd.<verb>), for a token's role.
var verbActions = map[string]Action{"submit": ActSubmit, "get": ActRead,
	"cancel": ActCancel, "list": ActRead, "events": ActRead,
	"wait": ActRead, "history": ActRead, "list_at": ActRead,
	"submit_workflow": ActSubmit, "get_workflow": ActRead, "retry_workflow": ActRetry,
	"schedule.create": ActSchedule, "schedule.update": ActSchedule, "schedule.pause": ActSchedule,
	"schedule.resume": ActSchedule, "schedule.delete": ActSchedule, "schedule.list": ActRead, "schedule.get": ActRead}

// VerbAction is the action a command of the protocol does ("" for a verb
// the protocol does not have).
func VerbAction(verb string) Action { return verbActions[verb] }

// ClaimableBy reports whether a remote worker held to namespace only ("":
// every namespace, as its token allows) may claim a job of namespace ns.
func ClaimableBy(only, ns string) bool { return only == "" || only == ns }
