// Package engine runs jetflow: the Store (the write path every transition
// takes: decide with package commands, append to the job's subject with its
// expected sequence, project into the KV bucket, dispatch), the worker
// Runtime (claim, run, renew the lease, complete), and the background
// components that keep the system whole: the Projector (verifies the KV
// bucket against every event and repairs it), the Promoter (moves due
// scheduled jobs to their queue), and the command server (jetflow.cmd.*).
//
// Every component has the same life: Start(ctx) error, Stop(ctx), both
// idempotent; none assumes it is the only instance.
package engine
