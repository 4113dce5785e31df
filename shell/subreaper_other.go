//go:build !linux

package shell

import "log/slog"

// becomeSubreaper does nothing outside Linux: a job's orphaned processes
// are reaped by init, and Runner watches their group until it is empty.
func becomeSubreaper(*slog.Logger) {}
