// Package clientstore gives jetflow's own packages (the gateway, the
// tests) the engine's store under a *jetflow.Client, which keeps it to
// itself: the root package sets Of when it is loaded. Users cannot import
// it (internal).
package clientstore

import "github.com/jetflow/jetflow/engine"

// Of returns the store of client (a *jetflow.Client), or nil for a token
// client, which has none (it speaks the engine's command service).
var Of func(client any) *engine.Store
