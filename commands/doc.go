// Package commands decides. Every change to a job starts here: a command
// (submit, start, succeed, fail, cancel, ...) and the job's current state go
// in, and either the one event that records the change comes out, or a typed
// refusal (ErrInvalidTransition, ErrInvalidInput, ErrTerminal).
//
// The lifecycle transition table is Lifecycle, as data, in lifecycle.go;
// every decision is checked against it. Nothing here performs I/O: engine
// appends the events this package produces, and projections folds them.
package commands
