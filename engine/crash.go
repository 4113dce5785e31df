package engine

import (
	"os"
	"syscall"
)

// crashAt names one crash point (see crash calls in store.go and worker.go).
// When JETFLOW_CRASH_AT names the point a process reaches, the process kills
// itself with SIGKILL there: the crash tests use it to stop a process between
// two writes and show that the system repairs itself.
var crashAt = os.Getenv("JETFLOW_CRASH_AT")

func crash(point string) {
	if crashAt != "" && crashAt == point {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal is on its way
	}
}
