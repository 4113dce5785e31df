// Package engine runs jetflow: the Store (the write path every transition
// takes: decide with package commands, append to the job's subject with its
// expected sequence, project into the KV bucket, dispatch), the worker
// Runtime (claim, run, renew the lease, complete), the remote worker
// protocol, and the background components that keep the system whole (the
// Projector, the Promoter, the command server, and under a Leader the
// fan-in counter, the sweepers, the reaper, the purger and the admitter).
//
// This package is machinery for jetflow's own packages (the root package,
// the gateway, cmd/jetflow, the tests), not for users: programs use the
// root package. It assembles the engine (NewEngine) and is a facade over
// the rooms in engine/internal, each with one job: store (the write and
// read core), registry, auth, runtime, remote, maintenance (one file per
// background component), cmdservice, problems, natsserver, pull, replay.
package engine
