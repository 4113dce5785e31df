package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow"
)

// natsCreds are how a command proves who it is to NATS: a credentials
// file, a user and password, or a token. Each flag defaults to its
// environment variable, read when connecting (never as the flag's default:
// -h would print it).
type natsCreds struct {
	creds, user, password, token string
}

// The environment variables of the credential flags.
var natsCredsEnv = map[string]string{
	"nats-creds":    "JETFLOW_NATS_CREDS",
	"nats-user":     "JETFLOW_NATS_USER",
	"nats-password": "JETFLOW_NATS_PASSWORD",
	"nats-token":    "JETFLOW_NATS_TOKEN",
}

// natsFlags adds the credential flags.
func (c *cli) natsFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.nats.creds, "nats-creds", "", "NATS credentials file (env JETFLOW_NATS_CREDS)")
	fs.StringVar(&c.nats.user, "nats-user", "", "NATS user, with --nats-password (env JETFLOW_NATS_USER)")
	fs.StringVar(&c.nats.password, "nats-password", "", "NATS password (env JETFLOW_NATS_PASSWORD; prefer it: a flag shows in ps)")
	fs.StringVar(&c.nats.token, "nats-token", "", "NATS token (env JETFLOW_NATS_TOKEN; prefer it: a flag shows in ps)")
}

// natsCredsOnlyWith refuses a credential flag given when ok is false,
// naming the flag, never its value (a secret).
func (c *cli) natsCredsOnlyWith(ok bool, reason string) bool {
	for _, name := range []string{"nats-creds", "nats-user", "nats-password", "nats-token"} {
		if !ok && c.given(name) {
			c.errorf("--%s: %s", name, reason)
			return false
		}
	}
	return true
}

// natsSource is where a credential came from, for messages: the flag, or
// its environment variable.
func (c *cli) natsSource(name string) string {
	if c.given(name) {
		return "--" + name
	}
	return natsCredsEnv[name]
}

// natsOptions are the connection options of the credentials given, a flag
// winning over its environment variable. A bad combination or an
// unreadable credentials file is reported (naming the flag or variable,
// never a secret) and ok is false.
func (c *cli) natsOptions() (opts []nats.Option, ok bool) {
	if c.fs.Lookup("nats-creds") == nil {
		return nil, true
	}
	// What the server refuses (a permission this user lacks) is only said
	// asynchronously: log it, or a refused request is just a timeout.
	log := c.logger()
	opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		log.Warn("NATS error", "err", err)
	}))
	switch {
	case c.name == "worker":
		// The worker role's inboxes (an engine user may use any): its
		// namespace's, which a worker user bound to it needs.
		ns := ""
		if f := c.fs.Lookup("namespace"); f != nil {
			ns = f.Value.String()
		}
		opts = append(opts, nats.CustomInboxPrefix(jetflow.NATSWorkerInboxPrefix(ns)))
	case c.token != "":
		// A token client needs no more than the client role.
		opts = append(opts, nats.CustomInboxPrefix(jetflow.NATSInboxPrefix(jetflow.NATSRoleClient)))
	}
	value := func(name string, v *string) string {
		if !c.given(name) {
			*v = os.Getenv(natsCredsEnv[name])
		}
		return *v
	}
	creds := value("nats-creds", &c.nats.creds)
	user := value("nats-user", &c.nats.user)
	password := value("nats-password", &c.nats.password)
	token := value("nats-token", &c.nats.token)
	var used []string
	for _, n := range []struct {
		name string
		set  bool
	}{{"nats-creds", creds != ""}, {"nats-user", user != ""}, {"nats-token", token != ""}} {
		if n.set {
			used = append(used, n.name)
		}
	}
	switch {
	case len(used) > 1:
		c.errorf("%s: not with %s (one of a credentials file, a user and password, or a token)",
			c.natsSource(used[1]), c.natsSource(used[0]))
		return nil, false
	case user != "" && password == "":
		c.errorf("%s: needs a password (--nats-password or JETFLOW_NATS_PASSWORD)", c.natsSource("nats-user"))
		return nil, false
	case password != "" && user == "":
		c.errorf("%s: needs a user (--nats-user or JETFLOW_NATS_USER)", c.natsSource("nats-password"))
		return nil, false
	case creds != "":
		// Read now, so that a wrong path is a usage error naming the flag
		// rather than a failed connection.
		f, err := os.Open(creds)
		if err == nil {
			var st os.FileInfo
			if st, err = f.Stat(); err == nil && st.IsDir() {
				err = fmt.Errorf("is a directory")
			}
			f.Close()
		}
		if err != nil {
			c.errorf("%s %q: cannot read it: %v", c.natsSource("nats-creds"), creds, unwrapPath(err))
			return nil, false
		}
		return append(opts, nats.UserCredentials(filepath.Clean(creds))), true
	case user != "":
		return append(opts, nats.UserInfo(user, password)), true
	case token != "":
		return append(opts, nats.Token(token)), true
	}
	return opts, true
}

// unwrapPath drops the path of an *os.PathError (the message names it
// already).
func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// redact is a NATS URL fit for a message.
func redact(url string) string { return jetflow.RedactURL(url) }

// embeddedUsers are the users of serve --nats-auth: read from, or made
// once in, <dir>/nats-users.json; and the options serve connects with (as
// the engine). Where they are is logged, never a password.
func (c *cli) embeddedUsers(dir string, workerNamespaces []string, log *slog.Logger) (jetflow.NATSUsers, []nats.Option, bool) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.errorf("--data %q: %v", dir, unwrapPath(err))
		return nil, nil, false
	}
	path := filepath.Join(dir, jetflow.NATSUsersFile)
	users, created, err := jetflow.LoadOrCreateNATSUsers(path)
	if err != nil {
		c.errorf("--nats-auth: %v", err)
		return nil, nil, false
	}
	users, added, err := jetflow.AddNATSWorkers(path, users, workerNamespaces)
	if err != nil {
		c.errorf("--nats-worker-namespaces: %v", err)
		return nil, nil, false
	}
	if len(added) > 0 {
		log.Info("NATS worker users added, each bound to its namespace", "file", path, "users", added)
	}
	eng, _ := users.Role(jetflow.NATSRoleEngine)
	msg := "NATS users read"
	if created {
		msg = "NATS users created"
	}
	log.Info(msg, "file", path, "users", len(users), "see", "docs/security.md")
	return users, []nats.Option{nats.UserInfo(eng.User, eng.Password)}, true
}

// isLoopbackNATS reports whether a HOST:PORT listens on this machine only.
func isLoopbackNATS(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
