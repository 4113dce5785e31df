package streams

// BulkBucket holds the progress of the HTTP gateways' bulk operations
// (POST /api/v1/jobs/bulk), one key per operation, so that any gateway
// answers GET /api/v1/bulk/{id}. Derived, informational state: each key
// expires an hour after its last write.
const BulkBucket = "jetflow_bulk"
