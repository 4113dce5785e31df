package store

import (
	"os"
	"syscall"
)

// crashAt names one crash point (see the calls of crash and Crash).
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

// Crash is a crash point of another room of the engine (the runtime's
// claim:done and batch:recorded).
func Crash(point string) { crash(point) }
