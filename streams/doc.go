// Package streams is jetflow's JetStream layer: the topology (the events
// stream, the job and queue KV buckets, one work-queue stream per queue), the
// subjects and how names are encoded into them, the records stored there
// (Event, Job, WorkItem) with their msgpack tags, which are the wire
// contract, and the write primitives the rest of jetflow builds on:
// expected-sequence appends, revision-checked KV writes and scheduled work
// items.
//
// Nothing here decides anything about a job; commands decides, projections
// folds, engine runs. This package only knows how to put bytes on JetStream
// safely and get them back.
package streams
