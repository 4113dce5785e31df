package commands

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jetflow/jetflow/internal/domain"
)

// Access control: who may do what. A token belongs to one namespace (or,
// AllNamespaces, to every one) and has one role; a role allows a set of
// actions. The HTTP API and the command protocol ask roleAllows before they
// act, and scope every read and write to the token's namespace.

// Role is what a token may do.
type Role string

// Roles.
const (
	// RoleAdmin may do everything, in every namespace: @global types,
	// tokens, queues, namespace settings.
	RoleAdmin Role = "admin"
	// RoleProducer submits, reads, cancels, retries and follows events.
	RoleProducer Role = "producer"
	// RoleWorker registers, beats, claims and reports the jobs it holds,
	// and registers its namespace's types.
	RoleWorker Role = "worker"
	// RoleReader reads.
	RoleReader Role = "reader"
)

// roles lists the roles.
var roles = []Role{RoleAdmin, RoleProducer, RoleWorker, RoleReader}

// AllNamespaces is the namespace of a token good in every namespace.
const AllNamespaces = "*"

// Action is something a request does, that a role allows or not.
type Action string

// Actions.
const (
	ActRead         Action = "read"          // jobs, events, types, queues, workers, stats, metrics
	ActSubmit       Action = "submit"        // submit a job
	ActCancel       Action = "cancel"        // cancel a job
	ActRetry        Action = "retry"         // retry a terminal job
	ActWork         Action = "work"          // register as a worker, beat, claim, report held jobs
	ActRegisterType Action = "register-type" // register a type of the token's namespace
	ActAdmin        Action = "admin"         // queues, namespace settings, @global types, tokens
	// ActSchedule creates, changes, pauses, resumes and deletes the
	// schedules of the token's namespace (reading them is ActRead).
	ActSchedule Action = "schedule"
)

var roleActions = map[Role][]Action{
	RoleAdmin:    {ActRead, ActSubmit, ActCancel, ActRetry, ActWork, ActRegisterType, ActAdmin, ActSchedule},
	RoleProducer: {ActRead, ActSubmit, ActCancel, ActRetry, ActSchedule},
	RoleWorker:   {ActWork, ActRegisterType},
	RoleReader:   {ActRead},
}

// roleAllows reports whether role may do act.
func roleAllows(role Role, act Action) bool {
	for _, a := range roleActions[role] {
		if a == act {
			return true
		}
	}
	return false
}

// Errors of access control; each matches ErrDenied too.
var (
	ErrDenied = errors.New("access denied")
	// ErrUnauthenticated: no token, or one that is malformed, unknown,
	// revoked or expired (HTTP 401). The reason is not told apart to the
	// caller beyond "missing" and "not valid".
	ErrUnauthenticated = &registryError{slug: "unauthenticated", base: ErrDenied}
	// errForbidden: a valid token whose role may not do this (HTTP 403).
	errForbidden = &registryError{slug: "forbidden", base: ErrDenied}
	// ErrUnknownToken: no token has the id (revoke).
	ErrUnknownToken = &registryError{slug: "unknown-token", base: ErrNotFound}
)

// forbiddenError is a request the token's role or namespace does not allow.
type forbiddenError struct {
	Role   Role
	Action Action
	// Namespace, if set: the namespace the request named that the token is
	// not good in.
	Namespace string
}

func (e *forbiddenError) Error() string {
	if e.Namespace != "" {
		return fmt.Sprintf("this token may not %s in namespace %q", e.Action, e.Namespace)
	}
	return fmt.Sprintf("a %s token may not %s", e.Role, e.Action)
}

// Unwrap makes errors.Is(err, errForbidden) hold.
func (e *forbiddenError) Unwrap() error { return errForbidden }

// Token format: "jft_" + id + "_" + secret, where id is the token's
// record key (a 26-character job-style id) and secret 32 random bytes in
// unpadded base64url (43 characters).
const (
	tokenPrefix      = "jft_"
	tokenIDLen       = 26
	tokenSecretLen   = 43
	tokenLen         = len(tokenPrefix) + tokenIDLen + 1 + tokenSecretLen
	maxTokenNameLen  = 128
	maxTokenTTL      = 10 * 365 * 24 * time.Hour
	minTokenTTL      = time.Second
	tokenSecretBytes = 32
)

// NewToken returns a new token's id, the token to hand out (once), and
// the hash of its secret (what is stored).
func NewToken() (id, token, hash string, err error) {
	var b [tokenSecretBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", "", err
	}
	id = domain.NewID()
	secret := base64.RawURLEncoding.EncodeToString(b[:])
	return id, tokenPrefix + id + "_" + secret, hashSecret(secret), nil
}

// hashSecret is the stored form of a token's secret.
func hashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// ParseToken splits a token into its id and secret, refusing anything
// that is not in the format NewToken hands out (ErrUnauthenticated).
func ParseToken(tok string) (id, secret string, err error) {
	bad := fmt.Errorf("the token is not a jetflow token: %w", ErrUnauthenticated)
	if len(tok) != tokenLen || !strings.HasPrefix(tok, tokenPrefix) {
		return "", "", bad
	}
	rest := tok[len(tokenPrefix):]
	id, secret = rest[:tokenIDLen], rest[tokenIDLen+1:]
	if rest[tokenIDLen] != '_' || !domain.ValidID(id) {
		return "", "", bad
	}
	for i := 0; i < len(secret); i++ {
		c := secret[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return "", "", bad
		}
	}
	return id, secret, nil
}

// CheckToken judges a presented secret against the token's record at
// now: nil if it is the token's and the token is neither revoked nor
// expired; otherwise ErrUnauthenticated (the hash is compared in constant
// time).
func CheckToken(rec *domain.TokenRecord, secret string, now time.Time) error {
	if rec == nil {
		return fmt.Errorf("unknown token: %w", ErrUnauthenticated)
	}
	if subtle.ConstantTimeCompare([]byte(rec.Hash), []byte(hashSecret(secret))) != 1 {
		return fmt.Errorf("the token's secret does not match: %w", ErrUnauthenticated)
	}
	if rec.Revoked {
		return fmt.Errorf("the token was revoked: %w", ErrUnauthenticated)
	}
	if !rec.ExpiresAt.IsZero() && !now.Before(rec.ExpiresAt) {
		return fmt.Errorf("the token expired: %w", ErrUnauthenticated)
	}
	return nil
}

// TokenSpec is what a token is created with.
type TokenSpec struct {
	Name      string        `json:"name"`
	Namespace string        `json:"namespace"` // AllNamespaces for every one; required
	Role      Role          `json:"role"`
	TTL       time.Duration `json:"ttl,omitempty"` // 0: never expires
}

// parseRole refuses a role that is not one of Roles.
func parseRole(s string) (Role, error) {
	for _, r := range roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", &InputError{Field: "role", Value: fmt.Sprintf("%q", s), Reason: "want admin, producer, worker or reader"}
}

// Check refuses a spec out of range: a role that does not exist, a
// namespace that is not valid (or an admin bound to one namespace), a name
// that is empty, too long or has control characters, a TTL below a second
// or above ten years.
func (s TokenSpec) Check() error {
	if _, err := parseRole(string(s.Role)); err != nil {
		return err
	}
	if s.Namespace != AllNamespaces {
		if err := CheckNamespace(s.Namespace); err != nil {
			return err
		}
		if s.Role == RoleAdmin {
			return &InputError{Field: "namespace", Value: fmt.Sprintf("%q", s.Namespace),
				Reason: "an admin token is good in every namespace: give \"*\""}
		}
	}
	if s.Name == "" || len(s.Name) > maxTokenNameLen || !utf8.ValidString(s.Name) ||
		strings.IndexFunc(s.Name, unicode.IsControl) >= 0 {
		return &InputError{Field: "name", Value: fmt.Sprintf("%q", s.Name),
			Reason: fmt.Sprintf("want 1-%d bytes of UTF-8 without control characters", maxTokenNameLen)}
	}
	if s.TTL != 0 && (s.TTL < minTokenTTL || s.TTL > maxTokenTTL) {
		return &InputError{Field: "ttl", Value: s.TTL.String(), Reason: "want 0 (never expires) or 1s to 87600h"}
	}
	return nil
}

// CreateToken decides a token's creation.
func CreateToken(id, hash string, s TokenSpec, actor string, now time.Time) (*domain.Event, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	ch := &domain.TokenChange{ID: id, Name: s.Name, Namespace: s.Namespace, Role: string(s.Role), Hash: hash}
	if s.TTL > 0 {
		ch.ExpiresAt = now.Add(s.TTL)
	}
	return &domain.Event{Type: domain.EvTokenCreated, JobID: id, Time: now, Actor: actor, Level: domain.LevelInfo,
		Message: fmt.Sprintf("token %q (%s, namespace %s) created", s.Name, s.Role, s.Namespace), Token: ch}, nil
}

// RevokeToken decides a token's revocation: ErrUnknownToken if there is
// none, nil and no event if it is revoked already.
func RevokeToken(cur *domain.TokenRecord, id, actor string, now time.Time) (*domain.Event, error) {
	if cur == nil {
		return nil, fmt.Errorf("token %s: %w", id, ErrUnknownToken)
	}
	if cur.Revoked {
		return nil, nil
	}
	return &domain.Event{Type: domain.EvTokenRevoked, JobID: id, Time: now, Actor: actor, Level: domain.LevelInfo,
		Message: fmt.Sprintf("token %q revoked", cur.Name), Token: &domain.TokenChange{ID: id}}, nil
}

// errUserNotAllowed: a submit that names another user than the token's
// own, by a token whose role may not (HTTP 403).
var errUserNotAllowed = &registryError{slug: "user-not-allowed", base: ErrDenied}

// userError is a submit naming a user its token may not submit for.
type userError struct {
	Role      Role
	Token     string // the token's name: the user its jobs run for
	Requested string
}

func (e *userError) Error() string {
	return fmt.Sprintf("a %s token submits as its own user %q; only an admin token may name another (%q)", e.Role, e.Token, e.Requested)
}

// Unwrap makes errors.Is(err, errUserNotAllowed) (and ErrDenied) hold.
func (e *userError) Unwrap() error { return errUserNotAllowed }

// SubmitUser decides who a job submitted with access control runs for
// (quotas count its slots against that user): the token's name, unless an
// admin token names another. A token of another role naming anyone but
// itself is refused (*userError). Without access control there is no
// token, and the user is as given: callers do not ask.
func SubmitUser(role Role, tokenName, requested string) (string, error) {
	if requested == "" || requested == tokenName {
		return tokenName, nil
	}
	if role == RoleAdmin {
		return requested, nil
	}
	return "", &userError{Role: role, Token: tokenName, Requested: requested}
}
