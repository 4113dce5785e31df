package auth

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// NATS roles: what a NATS user of a jetflow system may do. docs/security.md
// explains each permission.
const (
	// NATSRoleEngine may do everything: serve, the HTTP gateway, and the Go
	// Client and CLI, which write to JetStream themselves.
	NATSRoleEngine = "engine"
	// NATSRoleWorker is an SDK worker (jetflow worker, jetflow.Worker): it
	// claims and settles work items, writes its jobs' events and records
	// and its heartbeats, and nothing else.
	NATSRoleWorker = "worker"
	// NATSRoleClient uses the command protocol and reads the event log.
	NATSRoleClient = "client"
)

// clientResponseWindow is how long a client user may answer a request it
// received (an audit_export chunk's acknowledgement).
const clientResponseWindow = time.Minute

// NATSRoles are the roles, in the order nats-users.json lists them.
var NATSRoles = []string{NATSRoleEngine, NATSRoleWorker, NATSRoleClient}

// NATSInboxPrefix is the inbox prefix a user of role must connect with
// (nats.CustomInboxPrefix): replies come only there, and a user may
// subscribe to its role's inboxes only, so it cannot read the replies the
// engine gets (every job's record) or another role's. The engine keeps
// nats.go's default, "_INBOX".
func NATSInboxPrefix(role string) string {
	if role == NATSRoleEngine || role == "" {
		return "_INBOX"
	}
	return "_INBOX_" + role
}

// kvSubjects is everything under a bucket's keys.
func kvSubjects(bucket string) string { return "$KV." + bucket + ".>" }

// NATSPermissions are the subject permissions of a role; nil for an
// unknown role. docs/security.md has them as a nats-server configuration.
func NATSPermissions(role string) *server.Permissions {
	switch role {
	case NATSRoleEngine:
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: []string{">"}},
			Subscribe: &server.SubjectPermission{Allow: []string{">"}},
		}
	case NATSRoleWorker:
		return &server.Permissions{
			Publish: &server.SubjectPermission{Allow: workerPublish("")},
			Subscribe: &server.SubjectPermission{Allow: []string{
				NATSInboxPrefix(NATSRoleWorker) + ".>", // JetStream API replies, KV watches, pulled messages
				streams.CancelSubject,                  // cancels of the jobs it runs
			}},
		}
	case NATSRoleClient:
		return &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{
				streams.CommandPrefix + ".>", // the command protocol
				"$SRV.>",                     // its discovery: PING, INFO, STATS
				// The event log's history, read only (direct gets).
				"$JS.API.DIRECT.GET." + streams.EventsStream,
				"$JS.API.DIRECT.GET." + streams.EventsStream + ".>",
			}},
			Subscribe: &server.SubjectPermission{Allow: []string{
				NATSInboxPrefix(NATSRoleClient) + ".>", // replies
				streams.EventsPrefix + ".>",
				streams.PiecesPrefix + ".>",
				streams.RegistryPrefix + ".>",
			}},
			// One answer to each request it receives: the acknowledgement
			// of each chunk of an audit_export.
			Response: &server.ResponsePermission{MaxMsgs: 1, Expires: clientResponseWindow},
		}
	}
	return nil
}

// workerPublish is what an SDK worker publishes: JetStream API requests
// that read, consume and watch (never create, change or delete a stream,
// purge one, or delete a consumer other than its own watches), and the
// writes of its jobs. They were found by running every kind of job under
// them (TestNATSWorkerRole), which meets a violation without any one of
// them, except the flow control of the watches and the end of the types
// and namespaces watches: read from the code, not reached by the test.
//
// ns (not ""): a worker of that namespace's jobs only, whose events and
// type registrations go to that namespace's subjects only (the other
// writes' subjects do not name a namespace).
func workerPublish(ns string) []string {
	watched := []string{streams.QueuesBucket, streams.TypesBucket, streams.NamespacesBucket}
	out := []string{
		"$JS.API.STREAM.INFO.*",
		// The durable consumers its handlers pull from, shared by every
		// worker of a type: run_<type> on a queue stream, batch_<type> on
		// a queue's batch stream (their filter is the last tokens; only a
		// queue's streams capture jetflow.q.>).
		"$JS.API.CONSUMER.CREATE.*.*.jetflow.q.*.run.*",
		"$JS.API.CONSUMER.CREATE.*.*.jetflow.q.*.batch.*.*",
		"$JS.API.CONSUMER.MSG.NEXT.*.*",
		"$JS.API.DIRECT.GET.>", // records, a job's log, a work item
		"$JS.ACK.>",            // acks, naks and lease renewals of its work items
	}
	for _, b := range watched {
		// KV watches (ordered consumers), their flow control, and their
		// end (a watch deletes its consumer when it stops).
		out = append(out,
			"$JS.API.CONSUMER.CREATE."+kvStream(b)+".*."+kvSubjects(b),
			"$JS.API.CONSUMER.DELETE."+kvStream(b)+".*",
			"$JS.FC."+kvStream(b)+".>")
	}
	// Jobs' files (docs/files.md): reading an input (a direct get of its
	// meta, an ordered consumer of its chunks, their flow control and
	// end) and storing a result archive (its chunks, its meta, and the
	// purge of the archive it replaces).
	obj := "OBJ_" + streams.FilesBucket
	out = append(out,
		"$JS.API.CONSUMER.CREATE."+obj+".*.$O."+streams.FilesBucket+".C.*",
		"$JS.API.CONSUMER.DELETE."+obj+".*",
		"$JS.FC."+obj+".>",
		"$O."+streams.FilesBucket+".C.*",
		"$O."+streams.FilesBucket+".M.*",
		"$JS.API.STREAM.PURGE."+obj,
	)
	return append(out,
		// Its jobs' writes: events and piece events, records, work items,
		// schedules and batches (retries, fan-outs), type registrations,
		// unique keys' claims, heartbeats.
		inNamespace(streams.EventsPrefix, streams.Token(ns)),
		streams.PiecesPrefix+".>",
		kvSubjects(streams.JobsBucket),
		"jetflow.q.*.run.*",
		"jetflow.q.*.sched.*",
		"jetflow.q.*.batch.*.*",
		inNamespace(streams.RegistryPrefix+".type", streams.Token(ns)),
		streams.UniqueFilter, // the claims of the unique jobs its handlers submit
		inNamespace("$KV."+streams.TypesBucket, streams.KVToken(ns)),
		kvSubjects(streams.WorkersBucket),
	)
}

// inNamespace is everything under prefix, or under its namespace token
// tok ("": every namespace).
func inNamespace(prefix, tok string) string {
	if tok == "" {
		return prefix + ".>"
	}
	return prefix + "." + tok + ".>"
}

// NATSWorkerPermissions are the permissions of a worker user bound to
// namespace ns (docs/security.md): the worker role's, but its jobs' events
// and its type registrations in ns only.
func NATSWorkerPermissions(ns string) *server.Permissions {
	p := NATSPermissions(NATSRoleWorker)
	p.Publish.Allow = workerPublish(ns)
	// Its own namespace's inboxes only: the replies to another namespace's
	// workers (JetStream reads, pulled work items) are not its to read.
	p.Subscribe = &server.SubjectPermission{Allow: []string{NATSWorkerInboxPrefix(ns) + ".>", streams.CancelSubject}}
	return p
}

// NATSWorkerInboxPrefix is the inbox prefix of a worker bound to namespace
// ns ("_INBOX_worker.ns.<ns>"; "": a worker of every namespace,
// "_INBOX_worker"). A worker user of every namespace may use either.
func NATSWorkerInboxPrefix(ns string) string {
	if ns == "" {
		return NATSInboxPrefix(NATSRoleWorker)
	}
	return NATSInboxPrefix(NATSRoleWorker) + ".ns." + ns
}

func kvStream(bucket string) string { return "KV_" + bucket }

// NATSUser is a user of the embedded server and the role it has; a worker
// user may be bound to one namespace.
type NATSUser struct {
	Role      string `json:"role"`
	User      string `json:"user"`
	Password  string `json:"password"`
	Namespace string `json:"namespace,omitempty"`
}

// NATSUsers are the users of an embedded server that requires credentials:
// one per role.
type NATSUsers []NATSUser

// Role returns the user that has role.
func (u NATSUsers) Role(role string) (NATSUser, bool) {
	for _, x := range u {
		if x.Role == role {
			return x, true
		}
	}
	return NATSUser{}, false
}

// Server is what nats-server is configured with.
func (u NATSUsers) Server() ([]*server.User, error) {
	out := make([]*server.User, 0, len(u))
	for _, x := range u {
		p := NATSPermissions(x.Role)
		if p == nil {
			return nil, fmt.Errorf("NATS user %q: unknown role %q", x.User, x.Role)
		}
		if x.Namespace != "" {
			if x.Role != NATSRoleWorker || !domain.ValidNamespace(x.Namespace) {
				return nil, fmt.Errorf("NATS user %q: a namespace (%q) is for a worker user, and must be a namespace name", x.User, x.Namespace)
			}
			p = NATSWorkerPermissions(x.Namespace)
		}
		if x.User == "" || x.Password == "" {
			return nil, fmt.Errorf("NATS user of role %q: no user name or no password", x.Role)
		}
		out = append(out, &server.User{Username: x.User, Password: x.Password, Permissions: p})
	}
	return out, nil
}

// NATSUsersFile is the file in an embedded server's data directory that
// holds its users when it requires credentials.
const NATSUsersFile = "nats-users.json"

// LoadOrCreateNATSUsers reads the users of path, or, if it does not exist,
// creates one user per role (named after it) with a random password and
// writes them there, readable by its owner only. created says which.
func LoadOrCreateNATSUsers(path string) (users NATSUsers, created bool, err error) {
	data, err := os.ReadFile(path)
	if err == nil {
		var f natsUsersFile
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, false, fmt.Errorf("NATS users %s: %w", path, err)
		}
		for _, role := range NATSRoles {
			if _, ok := f.Users.Role(role); !ok {
				return nil, false, fmt.Errorf("NATS users %s: no user of role %s", path, role)
			}
		}
		if _, err := f.Users.Server(); err != nil {
			return nil, false, fmt.Errorf("NATS users %s: %w", path, err)
		}
		return f.Users, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, false, fmt.Errorf("NATS users: %w", err)
	}
	for _, role := range NATSRoles {
		users = append(users, NATSUser{Role: role, User: role, Password: rand.Text()})
	}
	// Linked into place: of two processes starting on one directory, one
	// writes the file and the other reads it whole.
	err = writeUsers(path, users, os.Link)
	if errors.Is(err, fs.ErrExist) {
		return LoadOrCreateNATSUsers(path)
	}
	if err != nil {
		return nil, false, fmt.Errorf("NATS users: %w", err)
	}
	return users, true, nil
}

// AddNATSWorkers adds to the users of path (read by LoadOrCreateNATSUsers)
// a worker user bound to each of namespaces that has none, named
// worker-<namespace> with a random password, and writes the file again
// (mode 0600) if it added one; added names them.
func AddNATSWorkers(path string, users NATSUsers, namespaces []string) (out NATSUsers, added []string, err error) {
	out = append(NATSUsers(nil), users...)
	for _, ns := range namespaces {
		if !domain.ValidNamespace(ns) {
			return nil, nil, fmt.Errorf("%q is not a namespace name", ns)
		}
		if slices.ContainsFunc(out, func(u NATSUser) bool { return u.Role == NATSRoleWorker && u.Namespace == ns }) {
			continue
		}
		name := "worker-" + ns
		if slices.ContainsFunc(out, func(u NATSUser) bool { return u.User == name }) {
			return nil, nil, fmt.Errorf("a user named %s is not the worker of namespace %s", name, ns)
		}
		out = append(out, NATSUser{Role: NATSRoleWorker, User: name, Password: rand.Text(), Namespace: ns})
		added = append(added, name)
	}
	if len(added) == 0 {
		return out, nil, nil
	}
	if _, err := out.Server(); err != nil {
		return nil, nil, err
	}
	if err := writeUsers(path, out, os.Rename); err != nil {
		return nil, nil, fmt.Errorf("NATS users: %w", err)
	}
	return out, added, nil
}

// writeUsers writes users to a file beside path (owner only), then puts it
// in place with place (os.Link: only if path is not there; os.Rename).
func writeUsers(path string, users NATSUsers, place func(oldpath, newpath string) error) error {
	data, _ := json.MarshalIndent(natsUsersFile{Users: users}, "", "  ")
	tmp, err := os.CreateTemp(filepath.Dir(path), ".nats-users-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(append(data, '\n'))
	if err == nil {
		err = tmp.Chmod(0o600)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = place(tmp.Name(), path)
	}
	return err
}

type natsUsersFile struct {
	Users NATSUsers `json:"users"`
}
