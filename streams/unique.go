package streams

import (
	"crypto/sha256"
	"encoding/hex"
)

// UniqueSubject is the subject of a unique key's claims (unique.claimed)
// in the event log: jetflow.reg.unique.<namespace>.<hash of the key>. Its
// last event names the job that holds the key.
func UniqueSubject(ns, key string) string {
	h := sha256.Sum256([]byte(key))
	return RegistryPrefix + ".unique." + Token(ns) + "." + hex.EncodeToString(h[:16])
}

// UniqueFilter matches the claims of every unique key.
const UniqueFilter = RegistryPrefix + ".unique.>"
