package jetflow

import (
	"net/url"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow/jetflow/engine"
)

// NATS users of an embedded server that requires credentials
// (ServerConfig.Users): one per role, each limited to its role's subjects.
// See docs/security.md.
type (
	// NATSUser is one user of an embedded server that requires credentials.
	NATSUser struct {
		Role     string `json:"role"`
		User     string `json:"user"`
		Password string `json:"password"`
		// Namespace binds a worker user to one namespace: its jobs'
		// events and its type registrations go there only.
		Namespace string `json:"namespace,omitempty"`
	}
	// NATSUsers are the users of such a server: one per role.
	NATSUsers []NATSUser
)

// Role returns the user that has role.
func (u NATSUsers) Role(role string) (NATSUser, bool) {
	for _, x := range u {
		if x.Role == role {
			return x, true
		}
	}
	return NATSUser{}, false
}

func (u NATSUsers) engine() engine.NATSUsers {
	if u == nil {
		return nil
	}
	out := make(engine.NATSUsers, len(u))
	for i, x := range u {
		out[i] = engine.NATSUser(x)
	}
	return out
}

// NATS roles.
const (
	NATSRoleEngine = engine.NATSRoleEngine // everything: serve, and the Go Client and CLI, which write to JetStream
	NATSRoleWorker = engine.NATSRoleWorker // an SDK worker: claim, settle and record its jobs, heartbeats
	NATSRoleClient = engine.NATSRoleClient // the command protocol and reading the event log
)

// NATSInboxPrefix is the inbox prefix a user of a role connects with
// (nats.CustomInboxPrefix): "_INBOX_worker" and "_INBOX_client"; the
// engine keeps the default "_INBOX". A user may subscribe to its role's
// inboxes only.
func NATSInboxPrefix(role string) string { return engine.NATSInboxPrefix(role) }

// NATSWorkerInboxPrefix is the inbox prefix a worker user bound to
// namespace ns (NATSUser.Namespace) connects with: "_INBOX_worker.ns.<ns>".
// Such a user may subscribe to its namespace's inboxes only, so the
// replies to another namespace's workers are not its to read. A worker
// user of every namespace may use it too.
func NATSWorkerInboxPrefix(ns string) string { return engine.NATSWorkerInboxPrefix(ns) }

// NATSUsersFile is the file in the data directory of `jetflow serve
// --nats-auth` that holds its NATS users and their passwords.
const NATSUsersFile = engine.NATSUsersFile

// LoadOrCreateNATSUsers reads the users of path, or creates one user per
// role with a random password and writes them there (mode 0600).
func LoadOrCreateNATSUsers(path string) (users NATSUsers, created bool, err error) {
	eu, created, err := engine.LoadOrCreateNATSUsers(path)
	if err != nil {
		return nil, false, err
	}
	return fromEngine(eu), created, nil
}

func fromEngine(eu engine.NATSUsers) NATSUsers {
	users := make(NATSUsers, len(eu))
	for i, x := range eu {
		users[i] = NATSUser(x)
	}
	return users
}

// AddNATSWorkers adds to users, read from path by LoadOrCreateNATSUsers, a
// worker user bound to each namespace that has none (worker-<namespace>,
// a random password), and writes path again if it added one; added names
// them. docs/security.md says what such a user may do.
func AddNATSWorkers(path string, users NATSUsers, namespaces []string) (out NATSUsers, added []string, err error) {
	eu, added, err := engine.AddNATSWorkers(path, users.engine(), namespaces)
	if err != nil {
		return nil, nil, err
	}
	return fromEngine(eu), added, nil
}

// NATSPermissions are the subject permissions of a NATS role (nil for an
// unknown one), as the embedded server gives them.
func NATSPermissions(role string) *server.Permissions { return engine.NATSPermissions(role) }

// RedactURL is a NATS URL (or comma-separated URLs) fit for a log or an
// error: a password or token in it is replaced by "xxxxx".
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil || u.User == nil {
			if strings.Contains(p, "@") { // unparsable, and may hold a secret
				parts[i] = "xxxxx@" + p[strings.LastIndex(p, "@")+1:]
			}
			continue
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		} else {
			u.User = url.User("xxxxx") // a token
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
