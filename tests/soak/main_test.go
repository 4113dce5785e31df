// Package soak runs the whole product at scale under mixed faults: the
// jetflow binary as serve and as several worker processes, a mix of quick,
// slow, flaky and failing jobs, fan-outs to children and to batches,
// cancels of queued, scheduled, running and waiting jobs, and delayed
// jobs, while workers are killed (SIGKILL: one at a time once its
// replacement runs, and now and then all of them at once, so that only the
// engine's lease sweeper can requeue their jobs) and stopped (SIGTERM),
// serve is killed and restarted on its data, and copies of work items are
// published. At the end it reads the event log and counts, exactly, every
// way the run could have gone wrong (check_test.go).
//
// `go test ./tests/soak/` runs the short size, a few thousand jobs;
// JETFLOW_SOAK=long runs the long one (over 100,000 jobs, and a 3-node
// cluster losing nodes): `go tool task soak`.
package soak

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jetflow/jetflow/internal/testkit"
)

var binary string

func TestMain(m *testing.M) {
	testkit.MainWithJetflow(m, &binary)
}

// size is how much a soak does and how hard it shakes.
type size struct {
	name    string
	jobs    int     // top-level jobs submitted
	rate    float64 // top-level jobs submitted a second at most (0: no limit)
	backlog int     // submitted top-level jobs not yet finished, at most
	batch   int     // jobs per pipelined submit

	workers     int // worker processes alive at once
	concurrency int // handler slots of each
	lease       time.Duration

	faultMin, faultMax time.Duration // pause between two faults
	serveEvery         int           // every n-th fault kills and restarts serve
	allEvery           int           // every n-th fault kills every worker at once
	termEvery          int           // every n-th fault (that is not a serve restart) is a SIGTERM
	nodeEvery          int           // cluster: every n-th fault kills a NATS node and brings it back
	// serveDown is the longest a killed serve stays down before its
	// restart (half the restarts are at once). Longer than the lease plus
	// commands.LeaseGrace, the leases of live workers run out while no one
	// can renew them: the short soak stays below.
	serveDown time.Duration

	// stall is how long the final drain may go without a job finishing
	// before the test fails.
	stall time.Duration
}

var (
	short = size{name: "short", jobs: 4000, rate: 80, backlog: 600, batch: 100,
		workers: 4, concurrency: 16, lease: 4 * time.Second,
		faultMin: 1500 * time.Millisecond, faultMax: 3 * time.Second, serveEvery: 6, allEvery: 11, termEvery: 4,
		serveDown: 2 * time.Second, stall: 90 * time.Second}
	long = size{name: "long", jobs: 120000, rate: 0, backlog: 6000, batch: 250,
		workers: 4, concurrency: 32, lease: 4 * time.Second,
		faultMin: 2 * time.Second, faultMax: 4 * time.Second, serveEvery: 10, allEvery: 23, termEvery: 4,
		serveDown: 8 * time.Second, stall: 3 * time.Minute}
	// A NATS node's loss stalls the cluster's writes for several seconds
	// (leader elections): with a 4 s lease every node loss took leases
	// from live workers (renewals could not be written for longer than the
	// lease plus commands.LeaseGrace). The cluster soak runs with 15 s.
	clusterLong = size{name: "cluster", jobs: 30000, rate: 0, backlog: 3000, batch: 200,
		workers: 4, concurrency: 32, lease: 15 * time.Second,
		faultMin: 2 * time.Second, faultMax: 4 * time.Second, serveEvery: 9, allEvery: 23, termEvery: 4, nodeEvery: 5,
		serveDown: 8 * time.Second, stall: 3 * time.Minute}
)

// longSoak reports whether the long soak was asked for (JETFLOW_SOAK=long).
func longSoak() bool { return os.Getenv("JETFLOW_SOAK") == "long" }

// sized is sz with its number of jobs from JETFLOW_SOAK_JOBS, if set.
func sized(t *testing.T, sz size) size {
	if v := os.Getenv("JETFLOW_SOAK_JOBS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("JETFLOW_SOAK_JOBS=%q: want a number of jobs", v)
		}
		sz.jobs = n
	}
	return sz
}
