// Package runtime runs the handlers of the workers that live in a jetflow
// process (the Go SDK's Worker, `jetflow worker`): one Runtime per queue
// pulls that queue's run and batch consumers in a Fetch loop (package
// pull), claims each item's job (store.Claim: the claim is the item's
// lease), runs its handler with the job's timeout, renews the leases of
// what it holds, and records each attempt's end (outcome.go: the handler's
// return becomes a commands.Outcome, decided on the job as it is and
// written by Store.Apply, then Store.RecordOutcome settles the item). It
// also makes a coordinator's fan-out (FanOut), reads a step's inputs, and
// keeps the worker's presence record.
//
// Quiet stops claiming; Stop quiets, gives running handlers the shutdown
// grace, then cancels and requeues what is left. Both return at once while
// Start is still making its consumers, and that Start then ends unstarted.
//
// Machinery: users reach it through the root package's Worker.
package runtime
