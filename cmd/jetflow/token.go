package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jetflow/jetflow"
)

// tokenFlags maps a token spec's fields to the flags that set them.
var tokenFlags = map[string]string{"name": "name", "namespace": "namespace", "role": "role", "ttl": "ttl"}

// cmdToken: jetflow token create|ls|revoke. These write and read the
// tokens through NATS with the engine's permissions: an operator's
// commands, not an HTTP client's.
func cmdToken(c *cli, args []string) int {
	sub := ""
	for _, a := range args {
		if slices.Contains([]string{"create", "ls", "list", "revoke"}, a) {
			sub = a
			break
		}
	}
	if sub != "" {
		c.name = "token " + sub
	}
	fs := c.clientFlags()
	var name, ns, role string
	var ttl time.Duration
	if sub == "create" {
		fs.StringVar(&name, "name", "", "what the token is for (shown in the events it writes; default: ROLE@NAMESPACE)")
		fs.StringVar(&ns, "namespace", "", `the token's namespace ("*": every namespace; required)`)
		fs.StringVar(&role, "role", "", "admin, producer, worker or reader (required)")
		durationVar(fs, &ttl, "ttl", 0, "the token expires after this long (default: never)")
	}
	pos, ok := c.parse(args, 1, 2)
	if !ok {
		return exitUsage
	}
	switch {
	case pos[0] == "create" && len(pos) == 1:
		return c.tokenCreate(name, ns, role, ttl)
	case pos[0] == "ls" && len(pos) == 1, pos[0] == "list" && len(pos) == 1:
		return c.tokenList()
	case pos[0] == "revoke" && len(pos) == 2:
		return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
			t, err := cl.RevokeToken(ctx, pos[1])
			if err != nil {
				if errors.Is(err, jetflow.ErrNotFound) {
					c.errorf("token %q: no such token", pos[1])
					return exitFailed
				}
				return c.fail(err)
			}
			if c.json {
				c.printJSON(t)
				return exitOK
			}
			fmt.Fprintf(c.out, "%s\trevoked\n", t.ID)
			return exitOK
		})
	}
	c.errorf("want: jetflow token create --namespace NS --role ROLE [--ttl D] [--name N] | token ls | token revoke ID; got: %s",
		strings.Join(append([]string{"token"}, pos...), " "))
	return exitUsage
}

func (c *cli) tokenCreate(name, ns, role string, ttl time.Duration) int {
	for _, req := range []string{"namespace", "role"} {
		if !c.given(req) {
			c.refuseFlag(req, "", "is required")
			return exitUsage
		}
	}
	if !c.checkFlags(when("ttl", ttl <= 0, "must be more than 0 (leave it out for a token that never expires)")) {
		return exitUsage
	}
	if name == "" && !c.given("name") {
		name = role + "@" + ns
	}
	spec := jetflow.TokenSpec{Name: name, Namespace: ns, Role: jetflow.Role(role), TTL: ttl}
	if err := spec.Check(); err != nil {
		if c.flagInput(err, tokenFlags) {
			return exitUsage
		}
		return c.fail(err)
	}
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		t, err := cl.CreateToken(ctx, spec)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			c.printJSON(t)
			return exitOK
		}
		fmt.Fprintf(c.errw, "token %s (%s, %s, namespace %s) created; it is shown this once:\n", t.ID, t.Name, t.Role, t.Namespace)
		fmt.Fprintln(c.out, t.Token)
		return exitOK
	})
}

func (c *cli) tokenList() int {
	return c.withClient(func(ctx context.Context, cl *jetflow.Client) int {
		ts, err := cl.Tokens(ctx)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			c.printJSON(map[string]any{"tokens": ts})
			return exitOK
		}
		tw := tabwriter.NewWriter(c.out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tNAME\tROLE\tNAMESPACE\tCREATED\tEXPIRES\tSTATE")
		for _, t := range ts {
			exp, state := "never", "active"
			if t.ExpiresAt != nil {
				exp = t.ExpiresAt.UTC().Format(time.RFC3339)
				if !time.Now().Before(*t.ExpiresAt) {
					state = "expired"
				}
			}
			if t.Revoked {
				state = "revoked"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, t.Role, t.Namespace,
				t.CreatedAt.UTC().Format(time.RFC3339), exp, state)
		}
		_ = tw.Flush()
		return exitOK
	})
}

// isLoopback reports whether a listen address (HOST:PORT) is reachable
// from this machine only.
func isLoopback(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	// A name: loopback only if every address it has is (localhost can be
	// mapped elsewhere).
	ips, err := net.LookupIP(host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.IsLoopback() {
			return false
		}
	}
	return true
}

// bootstrapAdmin makes sure that serve --auth can be used: when no active
// admin token exists, it creates one and writes it to path (mode 0600),
// logging the path, never the token. With no path (an external NATS
// system and no --admin-token-file) it says how to create one.
func bootstrapAdmin(ctx context.Context, c *cli, cl *jetflow.Client, path string) error {
	ts, err := cl.Tokens(ctx)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(ts, func(t *jetflow.TokenInfo) bool {
		return t.Role == jetflow.RoleAdmin && !t.Revoked && (t.ExpiresAt == nil || time.Now().Before(*t.ExpiresAt))
	}) {
		return nil
	}
	log := c.logger()
	if path == "" {
		log.Warn("access control is on and no admin token exists: create one with " +
			"`jetflow token create --role admin --namespace '*'` (with the engine's NATS credentials)")
		return nil
	}
	t, err := cl.CreateToken(ctx, jetflow.TokenSpec{Name: "first-admin", Namespace: jetflow.AllNamespaces, Role: jetflow.RoleAdmin})
	if err != nil {
		return err
	}
	if err := writeSecret(path, t.Token); err != nil {
		// Nobody would hold it: take it back.
		if _, rerr := cl.RevokeToken(context.WithoutCancel(ctx), t.ID); rerr != nil {
			log.Warn("revoke the admin token no file holds", "token_id", t.ID, "err", rerr)
		}
		return fmt.Errorf("admin token file %s: %w", path, err)
	}
	log.Info("no admin token existed: created one; it is in the file (mode 0600)", "path", path, "token_id", t.ID)
	return nil
}

// writeSecret writes a secret to a new file of mode 0600 at path: an
// existing file (a token of before) is removed first, and a symlink there
// is not followed.
func writeSecret(path, secret string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintln(f, secret); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
