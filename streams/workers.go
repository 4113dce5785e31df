package streams

import "time"

// WorkersBucket is the KV bucket of live workers, SDK and HTTP alike: one
// record per worker, written at every heartbeat. It is not derived from the
// log (a heartbeat is not a transition of any job); records expire
// defaultWorkerExpiry after their last write, so a worker that died leaves
// nothing behind for long. The lease sweeper reads it to tell a live holder
// from a dead one.
const WorkersBucket = "jetflow_workers"

// defaultWorkerExpiry is how long a worker that stopped beating stays in
// WorkersBucket (shown as not live once its lease passed).
const defaultWorkerExpiry = 10 * time.Minute
