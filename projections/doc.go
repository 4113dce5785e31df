// Package projections folds the event log into read models. Fold is the job
// projection: the one function that turns a job's events into its state, used
// by every writer (after its append), by the Projector (which verifies every
// event against the KV bucket and repairs what a crash left behind) and by
// Verify (replay --verify: rebuild everything from the log and diff).
//
// A projection never decides: if an event is in the log, it happened.
package projections
