package engine

import (
	"time"

	"github.com/jetflow/jetflow/engine/internal/runtime"
	"github.com/jetflow/jetflow/internal/domain"
)

// The worker runtime (runtime): handlers, their tasks and the control flow
// they return.
type (
	Runtime         = runtime.Runtime
	RuntimeConfig   = runtime.Config
	Handler         = runtime.Handler
	Task            = runtime.Task
	BatchHandler    = runtime.BatchHandler
	BatchTask       = runtime.BatchTask
	FanOut          = runtime.FanOut
	PermanentError  = runtime.PermanentError
	RetryLaterError = runtime.RetryLaterError
)

// Defaults of RuntimeConfig.
const (
	DefaultConcurrency      = runtime.DefaultConcurrency
	DefaultLease            = runtime.DefaultLease
	DefaultShutdownGrace    = runtime.DefaultShutdownGrace
	DefaultProgressInterval = runtime.DefaultProgressInterval
)

// Error codes the runtime assigns.
const (
	CodeError   = runtime.CodeError
	CodeTimeout = runtime.CodeTimeout
	CodePanic   = runtime.CodePanic
)

// Causes of a handler's context being cancelled by the runtime.
var (
	ErrJobCancelled = runtime.ErrJobCancelled
	ErrShutdown     = runtime.ErrShutdown
	ErrTimeout      = runtime.ErrTimeout
)

// NewRuntime returns a runtime for one queue.
func NewRuntime(s *Store, cfg RuntimeConfig) (*Runtime, error) { return runtime.New(s.Store, cfg) }

// ProgressCoalescer holds back progress reports so that at most one
// job.progress per job per interval is written, the last value reported:
// the runtime's for handlers in process, and the gateway's for remote
// workers.
type ProgressCoalescer = runtime.Coalescer

// NewProgressCoalescer returns a coalescer whose held values flush writes
// at the end of their job's interval.
func NewProgressCoalescer(interval time.Duration, flush func(id, worker string, p domain.Progress)) *ProgressCoalescer {
	return runtime.NewCoalescer(interval, flush)
}
