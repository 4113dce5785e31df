package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/projections"
)

// Access control (Config.Auth). Every request but /healthz, the login page
// and the dashboard's static files carries a token: "Authorization: Bearer
// <token>", or the dashboard's cookie. The middleware turns it into the
// request's principal (engine.PrincipalOf); each route names the action it
// does (act, jobAct), which the principal's role must allow; what a route
// reads or writes is then scoped to the principal's namespace:
//   - a job, worker or type of another namespace is 404, as if it did not
//     exist;
//   - a list, count or stream shows the principal's namespace only (asking
//     for another is 403, whether it exists or not);
//   - a submit or a worker registration goes to the principal's namespace.
//
// With Auth off every request acts as the process itself, as before.

// tokenCookie holds the dashboard's token (HttpOnly, SameSite=Strict).
const tokenCookie = "jetflow_token"

// presented is the token a request carries ("": none).
func presented(r *http.Request) string {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, tok, _ := strings.Cut(h, " ")
		if strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return h // not a bearer token: refused as malformed
	}
	if c, err := r.Cookie(tokenCookie); err == nil {
		return c.Value
	}
	return ""
}

// authenticate puts the principal of the request's token into its
// context. A token that is presented and not valid is refused at once
// (401); a request without one goes on without a principal and is refused
// by the routes that need one.
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if !g.cfg.Auth {
		return r, true
	}
	if p := r.URL.Path; p == "/login" || p == "/logout" || p == "/healthz" || strings.HasPrefix(p, "/static/") {
		return r, true // open: a stale cookie must not keep anyone from signing in again
	}
	tok := presented(r)
	if tok == "" {
		return r, true
	}
	p, err := g.store.Tokens.Verify(r.Context(), tok)
	if err != nil {
		if !errors.Is(err, commands.ErrUnauthenticated) {
			fail(w, r, err, "") // NATS unreachable: not the token's fault
			return nil, false
		}
		g.unauthenticated(w, r, "the token is not valid (malformed, unknown, revoked or expired)")
		return nil, false
	}
	return r.WithContext(engine.WithPrincipal(r.Context(), p)), true
}

func (g *Gateway) unauthenticated(w http.ResponseWriter, r *http.Request, detail string) {
	if isPage(r) {
		http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="jetflow"`)
	writeProblem(w, r, problemOf(fmt.Errorf("%s: %w", detail, commands.ErrUnauthenticated)))
}

// isPage reports whether r asks for a dashboard page (not the API or the
// operations endpoints): those send a browser to the login page.
func isPage(r *http.Request) bool {
	p := r.URL.Path
	return r.Method == http.MethodGet && !strings.HasPrefix(p, "/api/") && p != "/metrics" && p != "/readyz"
}

// principal is the request's principal: nil with Auth off.
func principal(r *http.Request) *engine.Principal { return engine.PrincipalOf(r.Context()) }

// act wraps a handler with the action it does: with Auth on, a request
// without a principal is 401 and one whose role does not allow act 403.
// A namespaced principal's ?namespace= is checked and filled in, so that
// every list, count and stream behind it shows its namespace only.
func (g *Gateway) act(act commands.Action, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !g.cfg.Auth {
			h(w, r)
			return
		}
		p := principal(r)
		if p == nil {
			g.unauthenticated(w, r, "this needs a token (Authorization: Bearer <token>)")
			return
		}
		if err := p.Can(act); err != nil {
			fail(w, r, err, "")
			return
		}
		if p.Namespace != commands.AllNamespaces {
			q := r.URL.Query()
			ns, err := p.Scope(act, q.Get("namespace"))
			if err != nil {
				fail(w, r, err, "")
				return
			}
			q.Set("namespace", ns)
			r.URL.RawQuery = q.Encode()
		}
		h(w, r)
	}
}

// jobAct is act for a route about one job ({id}): a job of another
// namespace is not found, answered exactly as an id no job has.
func (g *Gateway) jobAct(act commands.Action, h http.HandlerFunc) http.HandlerFunc {
	return g.act(act, func(w http.ResponseWriter, r *http.Request) {
		p := principal(r)
		if p == nil || p.Namespace == commands.AllNamespaces {
			h(w, r)
			return
		}
		id, err := jobID(r)
		if err != nil {
			fail(w, r, err, "")
			return
		}
		if err := g.visible(r.Context(), p, id); err != nil {
			fail(w, r, err, id)
			return
		}
		h(w, r)
	})
}

// visible refuses a job the principal may not see with the error of a
// job that does not exist.
func (g *Gateway) visible(ctx context.Context, p *engine.Principal, id string) error {
	if s := g.index.Get(id); s != nil {
		if p.Sees(s.Namespace) {
			return nil
		}
		// Another namespace's: answered as an unknown id is, after the
		// reads an unknown id costs, so that neither the answer nor its
		// time tells the two apart.
		return g.store.NotSeen(ctx, id)
	}
	_, err := g.store.ReadSeen(ctx, p, id) // not indexed yet
	return err
}

// scopeNamespace is the namespace a write of the request goes to: the one
// it names, else its principal's. A namespaced principal naming another
// is refused (403).
func scopeNamespace(r *http.Request, act commands.Action, asked string) (string, error) {
	return principal(r).Scope(act, asked)
}

// ownsWorker refuses a request about an HTTP worker that another token
// registered (404, as a worker that does not exist): a worker token
// reports, beats and claims for its own workers only. An admin's may act
// for any.
func ownsWorker(r *http.Request, rec *workerRecord) error {
	if principal(r).OwnsWorker(rec) {
		return nil
	}
	return errNoWorker(rec.ID)
}

// seesWorker refuses a worker of another namespace (404).
func seesWorker(r *http.Request, rec *workerRecord) error {
	if principal(r).SeesWorker(rec) {
		return nil
	}
	return errNoWorker(rec.ID)
}

// workerView is rec's view as the request's principal may see it: only
// the claims of jobs of a namespace it sees (engine.ClaimsSeen), their
// namespaces from the index (a claim it does not know yet is left out).
func (g *Gateway) workerView(r *http.Request, rec *workerRecord) *WorkerView {
	v := g.workers.View(rec)
	v.Claims = engine.ClaimsSeen(principal(r), v.Claims, func(job string) (string, bool) {
		if s := g.index.Get(job); s != nil {
			return s.Namespace, true
		}
		return "", false
	})
	return v
}

// seesType reports whether the request's principal may see a type of
// scope: its namespace's and @global ones.
func seesType(r *http.Request, scope string) bool { return principal(r).SeesType(scope) }

// mayRegister refuses a type registration the principal may not make: a
// type of another namespace (403), or an @global one by anyone but an
// admin (403). A worker's registration (serving) may name an active
// @global type as it is.
func (g *Gateway) mayRegister(r *http.Request, def commands.TypeDef, serving bool) error {
	return principal(r).MayRegisterType(def.Name, serving, func() bool {
		cur, err := g.store.Types.Type(r.Context(), def.Name)
		if err != nil || cur.Deleted {
			return false
		}
		canon, cerr := engine.CanonicalSchema(def.Schema)
		return len(def.Schema) == 0 || cerr == nil && commands.SchemaEqualBytes(canon, cur.Schema)
	})
}

// tokenBody is the body of POST /tokens.
type tokenBody struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
	Role      string `json:"role"`
	TTL       string `json:"ttl,omitempty"` // a Go duration; "": never expires
}

// POST /tokens: the answer carries the token, the only time it is shown.
func (g *Gateway) createToken(w http.ResponseWriter, r *http.Request) {
	var b tokenBody
	if err := g.readJSON(w, r, &b, false); err != nil {
		fail(w, r, err, "")
		return
	}
	spec, err := tokenSpecOf(b.Name, b.Namespace, b.Role, b.TTL)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	rec, tok, err := g.store.Tokens.Create(r.Context(), spec, g.store.ActorOf(r.Context()))
	if err != nil {
		fail(w, r, err, "")
		return
	}
	v := projections.ViewToken(rec)
	v.Token = tok
	w.Header().Set("Location", "/api/v1/tokens/"+rec.ID)
	writeJSON(w, http.StatusCreated, v)
}

// tokenSpecOf reads a token's spec from its fields as given, refusing any
// out of range (the ttl is a Go duration, "" for none).
func tokenSpecOf(name, ns, role, ttl string) (commands.TokenSpec, error) {
	return commands.ParseTokenSpec(name, ns, role, ttl)
}

// GET /tokens
func (g *Gateway) listTokens(w http.ResponseWriter, r *http.Request) {
	recs, err := g.store.Tokens.List(r.Context())
	if err != nil {
		fail(w, r, err, "")
		return
	}
	out := make([]*projections.TokenView, len(recs))
	for i, t := range recs {
		out[i] = projections.ViewToken(t)
	}
	writeJSON(w, http.StatusOK, map[string]any{"tokens": out})
}

// DELETE /tokens/{id}
func (g *Gateway) revokeToken(w http.ResponseWriter, r *http.Request) {
	rec, err := g.store.Tokens.Revoke(r.Context(), r.PathValue("id"), g.store.ActorOf(r.Context()))
	if err != nil {
		fail(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, projections.ViewToken(rec))
}

// ops wraps an operations endpoint: open with OpenOps; otherwise it needs
// a token that may read, and /metrics (allNS), whose figures span every
// namespace, one good in every namespace.
func (g *Gateway) ops(h http.HandlerFunc, allNS bool) http.HandlerFunc {
	guarded := g.act(commands.ActRead, func(w http.ResponseWriter, r *http.Request) {
		if allNS {
			if err := principal(r).InEveryNamespace(commands.ActRead); err != nil {
				fail(w, r, err, "")
				return
			}
		}
		h(w, r)
	})
	return func(w http.ResponseWriter, r *http.Request) {
		if g.cfg.OpenOps {
			h(w, r)
			return
		}
		guarded(w, r)
	}
}

// GET /login
func (g *Gateway) pageLogin(w http.ResponseWriter, r *http.Request) {
	g.render(w, r, http.StatusOK, "login", "Sign in", map[string]string{"Next": safeNext(r.URL.Query().Get("next"))})
}

// POST /login: a form with the token; a valid one is kept in an HttpOnly,
// SameSite=Strict cookie (Secure over TLS) and the browser sent on.
func (g *Gateway) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		g.render(w, r, http.StatusBadRequest, "login", "Sign in", map[string]string{"Error": "the form did not decode"})
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	if _, err := g.store.Tokens.Verify(r.Context(), tok); err != nil {
		status, msg := http.StatusUnauthorized, "That token is not valid (mistyped, revoked or expired)."
		if !errors.Is(err, commands.ErrUnauthenticated) {
			status, msg = http.StatusServiceUnavailable, "The token could not be checked now; try again."
		}
		g.render(w, r, status, "login", "Sign in", map[string]string{"Next": next, "Error": msg})
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: tok, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// POST /logout forgets the cookie.
func (g *Gateway) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// safeNext keeps a redirect after sign-in on this site: a path, not
// another host ("//evil", "/\evil") or a scheme.
func safeNext(next string) string {
	if next == "" || next[0] != '/' || strings.HasPrefix(next, "//") || strings.ContainsRune(next, '\\') ||
		strings.IndexFunc(next, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0 {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, "/") || strings.HasPrefix(u.Path, "//") {
		return "/"
	}
	return next
}

// ownNamespace is the namespace of a namespaced token's request, "" for
// one of every namespace or without access control.
func ownNamespace(r *http.Request) string {
	if p := principal(r); p != nil && p.Namespace != commands.AllNamespaces {
		return p.Namespace
	}
	return ""
}

// tokenRecheck is how often a request that stays open (a stream, a long
// poll) checks that its token is still valid.
const tokenRecheck = 250 * time.Millisecond

// revocable is the request's context, ended as well when its token stops
// being valid (revoked or expired), so that a stream or a long poll does
// not outlive its token by more than tokenRecheck (a check is a lookup in
// the watched cache).
func (g *Gateway) revocable(r *http.Request) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	if principal(r) == nil {
		return ctx, cancel
	}
	tok := presented(r)
	go func() {
		t := time.NewTicker(tokenRecheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := g.store.Tokens.Verify(ctx, tok); errors.Is(err, commands.ErrUnauthenticated) {
					cancel()
					return
				}
			}
		}
	}()
	return ctx, cancel
}
