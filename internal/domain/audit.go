package domain

// EvCheckpoint is a checkpoint of the event log (docs/audit.md): on
// CheckpointSubject, JobID "checkpoint", with Checkpoint set.
const EvCheckpoint = "audit.checkpoint"

// Checkpoint commits, signed, to the chain heads of every subject of the
// event log that changed in (From, UpTo]: Root is the Merkle root over
// their (subject, sequence, hash) sorted by subject, Count their number.
// The event's Prev is the previous checkpoint's hash, so the checkpoints
// are a chain of their own. Sig is the ed25519 signature by Key (an nkeys
// public key) of the checkpoint's signed bytes (audit.SignedBytes).
type Checkpoint struct {
	From  uint64 `msgpack:"from"`
	UpTo  uint64 `msgpack:"upto"`
	Count int    `msgpack:"count"`
	Root  []byte `msgpack:"root"`
	Key   string `msgpack:"key"`
	Sig   []byte `msgpack:"sig"`
}
