package domain

import "time"

// Kinds of workers.
const (
	WorkerSDK  = "sdk"  // a Go worker (jetflow.Worker, jetflow worker)
	WorkerHTTP = "http" // a worker of the HTTP worker protocol
	// WorkerShell is a Go worker that runs jobs as shell commands
	// (jetflow worker --exec).
	WorkerShell = "shell"
)

// WorkerRecord is a worker's entry in WorkersBucket (msgpack; JSON in the
// API).
type WorkerRecord struct {
	ID          string   `msgpack:"id" json:"id"`
	Name        string   `msgpack:"name" json:"name"`
	Kind        string   `msgpack:"kind,omitempty" json:"kind"`
	Types       []string `msgpack:"types" json:"types"`
	Queues      []string `msgpack:"queues" json:"queues"` // empty: every queue
	Concurrency int      `msgpack:"concurrency" json:"concurrency"`
	// QueueConcurrency is a Go worker's handlers at once on each queue it
	// serves (Concurrency is their sum): one runtime per queue.
	QueueConcurrency map[string]int `msgpack:"queue_conc,omitempty" json:"queue_concurrency,omitempty"`
	RegisteredAt     time.Time      `msgpack:"registered_at" json:"registered_at"`
	LastHeartbeat    time.Time      `msgpack:"last_heartbeat" json:"last_heartbeat"`
	// Claims are the jobs it holds as of LastHeartbeat: an SDK worker lists
	// the attempts it runs; for an HTTP worker, the jobs it claimed and has
	// not reported the end of.
	Claims []string `msgpack:"claims" json:"claims"`
	// Namespace is the namespace it registered in; TokenID the token it
	// registered with (access control on), which alone may act for it. A
	// worker registered with a token of one namespace is handed only that
	// namespace's jobs (OnlyNamespace).
	Namespace     string `msgpack:"namespace,omitempty" json:"namespace,omitempty"`
	TokenID       string `msgpack:"token,omitempty" json:"-"`
	OnlyNamespace bool   `msgpack:"only_ns,omitempty" json:"-"`

	// BatchTypes are the batch types an HTTP worker runs (batches of
	// fan-outs); its Claims list the batches it holds too.
	BatchTypes []string `msgpack:"batch_types,omitempty" json:"batch_types"`
	// Token names the token that registered it (token:<name>/<id>), with
	// access control.
	Token string `msgpack:"by,omitempty" json:"token,omitempty"`
}

// ValidWorkerID reports whether id can name a worker: 1-128 of
// [A-Za-z0-9_.-], not beginning or ending with a dot (it is the key of
// the worker's record, and a KV key allows no more).
func ValidWorkerID(id string) bool {
	if id == "" || len(id) > maxTypeLen || id[0] == '.' || id[len(id)-1] == '.' {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !PlainByte(c) && c != '.' {
			return false
		}
	}
	return true
}
