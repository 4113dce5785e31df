package commands

import (
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// LeaseGrace is how long after a lease ran out it is judged lost. The
// clocks of workers, NATS servers and engines differ a little; a live
// worker must never lose its job to that.
const LeaseGrace = 2 * time.Second

// Beat is the last heartbeat of a job's holder, as the worker registry
// has it.
type Beat struct {
	At    time.Time // when the holder last beat (server time); zero: it has no record
	Holds bool      // whether that heartbeat listed the job among its claims
}

// Held reports whether j is claimed or running: held by a worker under a
// lease.
func Held(j *domain.Job) bool {
	return HeldState(j.State)
}

// CancelNotifies reports whether a job cancelled in state from has a
// worker to tell: its handler runs (claimed or running), or its batches do
// (waiting for its pieces).
func CancelNotifies(from domain.State) bool {
	return from == domain.StateClaimed || from == domain.StateRunning || from == domain.StateWaiting
}

// LeaseLeft is how long the lease of a held job has left at now (negative:
// how long ago it ran out). A lease lasts lease (the AckWait of the consumer
// that delivered the job) from the last sign of life of its holder: an
// event of the attempt (the claim, progress, a handler's event: the
// record's UpdatedAt), or a heartbeat that listed the job.
//
// A redelivery of the job's work item is not such a sign either way: the
// server redelivers after a restart too, while the holder is alive.
func LeaseLeft(j *domain.Job, b Beat, lease time.Duration, now time.Time) time.Duration {
	renewed := j.UpdatedAt
	if b.Holds && b.At.After(renewed) {
		renewed = b.At
	}
	return renewed.Add(lease).Sub(now)
}

// LeaseExpired reports whether j is held and its lease ran out more than
// LeaseGrace ago: its holder is gone (or frozen), and LeaseLost decides
// what becomes of the job.
func LeaseExpired(j *domain.Job, b Beat, lease time.Duration, now time.Time) bool {
	return Held(j) && LeaseLeft(j, b, lease, now) < -LeaseGrace
}
