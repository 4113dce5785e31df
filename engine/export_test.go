package engine

import "github.com/jetflow/jetflow/engine/internal/store"

// Internal is the internal store behind s, for the tests of this
// directory that build the engine's rooms on it.
func Internal(s *Store) *store.Store { return s.st }
