package domain

import "errors"

// ErrConflict is returned (wrapped) when an expected-sequence check failed:
// someone else appended to the job's subject, or wrote its KV record, first.
var ErrConflict = errors.New("jetflow: concurrent write conflict")
