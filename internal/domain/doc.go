// Package domain is jetflow's vocabulary: the states of a job, the events
// that move it, the records folded from them (jobs, types, namespaces,
// tokens, queues, workers) and the rules for names and ids. Their msgpack
// tags are the wire contract of the event log and the KV buckets.
//
// Nothing here does I/O or decides anything: package commands decides,
// projections folds, streams writes and reads JetStream, engine runs.
package domain
