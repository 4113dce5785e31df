package engine

import (
	"github.com/jetflow/jetflow/engine/internal/cmdservice"
)

// The command service (jetflow.cmd.<verb>) as clients see it.
const (
	CommandService = cmdservice.CommandService
	AuthHeader     = cmdservice.AuthHeader
)

// VerbStats is the data of an endpoint in $SRV.STATS.
type VerbStats = cmdservice.VerbStats

// FieldOf finds the field of v (a pointer to a struct) whose value in body
// does not decode, and that value's error.
func FieldOf(body []byte, asJSON bool, v any) (string, error) {
	return cmdservice.FieldOf(body, asJSON, v)
}
