package domain

import (
	"strconv"
	"time"
)

// A unique job's state scope (Unique.While): while which of its states it
// keeps its key from another job.
const (
	UniqueWhileActive       = "active"        // until it finishes (succeeded, failed or cancelled)
	UniqueWhileNotSucceeded = "not-succeeded" // until it succeeds
	UniqueWhileAny          = "any"           // in every state, until it is purged
)

// Events of unique jobs.
const (
	// EvDuplicate is appended to a unique job's subject when a submit of
	// its key was answered with it: no state change.
	EvDuplicate = "job.duplicate"
	// EvUniqueClaimed is appended to a unique key's subject
	// (streams.UniqueSubject) with the job that holds the key from then on
	// (Event.JobID), on the condition that the subject's last event is the
	// one the holder was derived from.
	EvUniqueClaimed = "unique.claimed"
)

// Unique is what makes a job unique (Spec.Unique): its key within its
// namespace, given or derived from its queue, type and payload fields,
// and how long it holds it: for For after it was submitted (0: no end)
// and while its state is in the scope While. A job that no longer holds
// its key (finished outside the scope, its window passed, purged) lets
// the next submit of the key create a job.
type Unique struct {
	Key    string        `msgpack:"key"`
	Fields []string      `msgpack:"fields,omitempty"` // the payload fields Key was derived from (sorted); none: given
	For    time.Duration `msgpack:"for,omitempty"`
	While  string        `msgpack:"while"`
}

// UniqueID is the id of the job a submit of unique key creates when the
// key's subject's last event is at sequence after (0: none): every submit
// that finds the key free at the same event derives the same id, so of
// any number racing exactly one creates it (its first event must be new
// on every subject), and the others find it.
func UniqueID(namespace, key string, after uint64) string {
	return KeyedID(namespace, "unique\x00"+key+"\x00"+strconv.FormatUint(after, 10))
}
