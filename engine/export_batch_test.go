package engine

import "time"

// ParseBatchID exposes what a batch id says, for tests.
func ParseBatchID(id string) (claimed time.Time, parent, stream string, seq uint64, delivered int, err error) {
	ref, err := parseBatchID(id)
	return ref.claimed, ref.parent, ref.stream, ref.seq, ref.delivered, err
}

// MakeBatchID makes a batch id, for tests.
func MakeBatchID(claimed time.Time, parent, ack string) string { return batchID(claimed, parent, ack) }

// DecodeCommandBody decodes the body of a wait, history or list command as
// the command server does, for fuzzing: the command, or its problem.
func DecodeCommandBody(verb string, body []byte, asJSON bool) (any, error) {
	var v any
	switch verb {
	case "wait":
		v = &waitCommand{}
	case "history":
		v = &historyCommand{}
	default:
		v = &listCommand{}
	}
	if err := decodeCommand(body, asJSON, v); err != nil {
		return nil, undecodable(verb, body, asJSON, v, err)
	}
	return v, nil
}
