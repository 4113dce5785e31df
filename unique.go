package jetflow

import "time"

// UniqueScope is while which of its states a unique job keeps its key
// from another job (docs/unique.md).
type UniqueScope string

// Unique scopes.
const (
	UniqueActive       UniqueScope = "active"        // until it finishes (the default)
	UniqueNotSucceeded UniqueScope = "not-succeeded" // until it succeeds
	UniqueAny          UniqueScope = "any"           // in every state, until it is purged
)

// UniqueKey makes the job unique by key (within its namespace; at most
// 256 bytes): while it holds the key (UniqueWhile, UniqueFor), a submit of
// the same key gets this job, with created false (Send), and the job
// records a job.duplicate event. Not with IdempotencyKey.
func UniqueKey(key string) SubmitOption {
	return func(r *SubmitRequest) { r.UniqueKey = key }
}

// UniqueFields makes the job unique by a key derived from its namespace,
// queue, type and the values of these payload fields (at most 8; "a.b" is
// field b of object a), whatever their order or the payload's other
// fields. Not with UniqueKey.
func UniqueFields(fields ...string) SubmitOption {
	return func(r *SubmitRequest) { r.UniqueFields = append(r.UniqueFields, fields...) }
}

// UniqueFor ends a unique job's hold of its key d after it was submitted
// (at most 366 days), even while its state is in its scope. 0 (the
// default): for as long as the scope holds.
func UniqueFor(d time.Duration) SubmitOption {
	return func(r *SubmitRequest) { r.UniqueFor = &d }
}

// UniqueWhile sets the states in which a unique job holds its key:
// UniqueActive (the default), UniqueNotSucceeded or UniqueAny.
func UniqueWhile(s UniqueScope) SubmitOption {
	return func(r *SubmitRequest) { r.UniqueWhile = s }
}
