// Package remote serves the workers that run outside any jetflow process,
// over the HTTP worker protocol of package gateway: claims (a job or a
// batch), heartbeats, progress, outcomes and a coordinator's fan-out. It
// keeps no state of its own: a claim's lease is its work item's ack
// deadline, whose ack subject the job record keeps (LeaseAck), so any
// gateway can renew or settle it. Decisions are package commands', writes
// package store's.
//
// Machinery: users reach it through the gateway's /api/v1/workers routes.
package remote
