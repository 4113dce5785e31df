package engine

import (
	"github.com/nats-io/nats-server/v2/server"

	"github.com/jetflow/jetflow/engine/internal/auth"
)

// NATS roles: what a NATS user of a jetflow system may do
// (docs/security.md).
const (
	NATSRoleEngine = auth.NATSRoleEngine
	NATSRoleWorker = auth.NATSRoleWorker
	NATSRoleClient = auth.NATSRoleClient
)

// NATSRoles are the roles, in the order nats-users.json lists them.
var NATSRoles = auth.NATSRoles

// NATSUsersFile is the file in an embedded server's data directory that
// holds its users when it requires credentials.
const NATSUsersFile = auth.NATSUsersFile

// NATSUser is a user of the embedded server and the role it has.
type NATSUser = auth.NATSUser

// NATSUsers are the users of an embedded server that requires credentials.
type NATSUsers = auth.NATSUsers

// NATSInboxPrefix is the inbox prefix a user of role must connect with.
func NATSInboxPrefix(role string) string { return auth.NATSInboxPrefix(role) }

// NATSPermissions are the subject permissions of a role; nil for an
// unknown role.
func NATSPermissions(role string) *server.Permissions { return auth.NATSPermissions(role) }

// LoadOrCreateNATSUsers reads the users of path, or creates one user per
// role with a random password and writes them there.
func LoadOrCreateNATSUsers(path string) (NATSUsers, bool, error) {
	return auth.LoadOrCreateNATSUsers(path)
}
