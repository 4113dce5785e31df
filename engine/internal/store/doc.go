// Package store writes and reads jetflow's records: every change of every
// job (and of the registry's types, namespaces, tokens and queue limits) is
// an event appended to the log with the expected sequence of its subject,
// then folded into its record in a KV bucket (Aggregate, Write). On top of
// that: the jobs' write path (Apply, ApplyMany, SubmitBatch, Cancel,
// Purge), what a transition implies (dispatch, piece events, cascades to
// the pieces of a fan-out and to the children linked by parent), the
// pieces of a fan-out (MakePieces) and a batch's outcome (SettleBatch),
// whoever runs the coordinator or the batch, the reads (Record: the KV
// record as it is; Current: reconciled with the log, for decisions; Read:
// the record, or Current only when it is missing, to show a job; List,
// History, WaitTerminal, View, QueuePosition), queues and their limits,
// the worker registry and the files bucket.
//
// It decides nothing: the decisions are package commands'. Nothing else
// writes events or records: the other rooms of the engine go through it.
package store
