// Package maintenance holds the engine's background components, one file
// each, all with the same life (Start(ctx) error, Stop(ctx), idempotent,
// safe to stop twice, through lifecycle.Loop) and one constructor shape,
// NewX(store, XConfig), whose config's zero value means the defaults
// (withDefaults) and whose validate() refuses what cannot run (reported by
// Start). On every engine: the Projector and the Promoter. On the one that
// leads (Leader): the fan-in counter, the lease sweeper, the type and file
// sweepers, the reaper, the purger and the admitter.
package maintenance
