// Package gateway is jetflow's HTTP face: the JSON API under /api/v1 (jobs,
// the worker protocol for workers in any language, queues), the dashboard at
// /, and the operations endpoints /healthz, /readyz and /metrics.
//
// A Gateway keeps no state that another gateway needs: job state is in the
// jobs bucket, a remote worker's lease is its work item's ack deadline
// (engine.Remote), and the worker registry is a KV bucket. What it keeps in
// memory is derived and rebuilt at start: an index of job summaries fed by
// one watch of the jobs bucket (for lists, counts and the dashboard's live
// stream) and the Prometheus counters, fed by a consumer of the event log.
// Any number of gateways can stand behind a load balancer against one NATS
// system.
package gateway
