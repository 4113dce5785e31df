package store

// HeldAfterError is heldAfterError, for the tests of the claim's read-back.
var HeldAfterError = (*Store).heldAfterError

// PurgeQueueSubject is purgeQueueSubject, for its test.
var PurgeQueueSubject = (*Store).purgeQueueSubject
