package shell

import (
	"log/slog"
	"sync"
	"syscall"
)

const prSetChildSubreaper = 36 // PR_SET_CHILD_SUBREAPER, linux/prctl.h

var subreaper sync.Once

// becomeSubreaper makes this process the reaper of its descendants'
// orphans: a job's background processes, orphaned when the command exits,
// become our children, so that Runner waits for them (and reaps them,
// where PID 1 would not, as in a container without an init).
func becomeSubreaper(log *slog.Logger) {
	subreaper.Do(func() {
		if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
			log.Warn("become a child subreaper: a job's orphaned processes are left to init", "err", errno)
		}
	})
}
