package jetflow

import (
	"time"
)

// SubmitOption sets an option of a job at submit.
type SubmitOption func(*SubmitRequest)

// Queue submits the job to queue q (default "default").
func Queue(q string) SubmitOption { return func(r *SubmitRequest) { r.Queue = q } }

// Namespace submits the job in namespace ns (default "default").
func Namespace(ns string) SubmitOption { return func(r *SubmitRequest) { r.Namespace = ns } }

// Delay makes the job due d from now; until then it is scheduled.
func Delay(d time.Duration) SubmitOption {
	return func(r *SubmitRequest) { r.Delay = &d }
}

// RunAt makes the job due at t.
func RunAt(t time.Time) SubmitOption { return func(r *SubmitRequest) { r.RunAt = &t } }

// MaxRetries sets how often a failed attempt is retried (default 3; 0: never).
func MaxRetries(n int) SubmitOption { return func(r *SubmitRequest) { r.MaxRetries = &n } }

// Backoff sets the delay before the first retry (default 30s); retry n waits
// min(base*2^(n-1), cap), spread by the jitter.
func Backoff(base time.Duration) SubmitOption {
	return func(r *SubmitRequest) { r.Backoff = &base }
}

// BackoffCap bounds a retry's delay (default 1h).
func BackoffCap(limit time.Duration) SubmitOption {
	return func(r *SubmitRequest) { r.BackoffCap = &limit }
}

// Jitter spreads retry delays by +-fraction (default 0.1; 0: exact).
func Jitter(fraction float64) SubmitOption { return func(r *SubmitRequest) { r.Jitter = &fraction } }

// Timeout bounds one attempt (default 1h): the handler's context is
// cancelled with ErrTimeout and the attempt fails with code TIMEOUT.
func Timeout(d time.Duration) SubmitOption {
	return func(r *SubmitRequest) { r.Timeout = &d }
}

// IdempotencyKey makes submits with the same key in a namespace return the
// one job the first of them created.
func IdempotencyKey(key string) SubmitOption {
	return func(r *SubmitRequest) { r.IdempotencyKey = key }
}

// User names who the job runs for: its slots count against the user's
// limit in a queue with limits (SetQueueLimits). With access control the
// engine takes the token's name, and only an admin may name another.
func User(u string) SubmitOption { return func(r *SubmitRequest) { r.User = u } }

// ConcurrencyKey groups the job with the others of its key (within its
// namespace): in a queue with MaxRunningPerKey they hold at most that many
// slots at once (1: one at a time, in submit order); a queue whose rate
// limit is per "concurrency_key" counts their starts together.
func ConcurrencyKey(key string) SubmitOption {
	return func(r *SubmitRequest) { r.ConcurrencyKey = key }
}

// Tags labels the job.
func Tags(tags ...string) SubmitOption {
	return func(r *SubmitRequest) { r.Tags = append(r.Tags, tags...) }
}

// Priority sets the job's priority, -1000 to 1000, higher first: in a
// queue with priorities (QueueLimits.Priorities) pending jobs start by
// priority (docs/quotas.md); elsewhere it is recorded and work is FIFO.
func Priority(p int) SubmitOption { return func(r *SubmitRequest) { r.Priority = p } }

// Parent links the job to a parent job.
func Parent(id string) SubmitOption { return func(r *SubmitRequest) { r.Parent = id } }

// RetryOn limits retries to errors with these codes (see WithCode).
func RetryOn(codes ...string) SubmitOption {
	return func(r *SubmitRequest) { r.RetryOn = append(r.RetryOn, codes...) }
}

// NoRetryOn fails the job at once on errors with these codes.
func NoRetryOn(codes ...string) SubmitOption {
	return func(r *SubmitRequest) { r.NoRetryOn = append(r.NoRetryOn, codes...) }
}

// MaxLeaseRequeues sets how often a job whose worker died is requeued
// before it fails with job.lease_expired (default 3).
func MaxLeaseRequeues(n int) SubmitOption { return func(r *SubmitRequest) { r.MaxLeaseRequeues = &n } }

// QueueTimeout fails the job (code QUEUE_TIMEOUT) if it is still queued d
// after it was queued (default: never).
func QueueTimeout(d time.Duration) SubmitOption {
	return func(r *SubmitRequest) { r.QueueTimeout = &d }
}
