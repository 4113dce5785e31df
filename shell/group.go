package shell

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

const (
	sigTerm = syscall.SIGTERM
	sigKill = syscall.SIGKILL
	// killWait bounds the wait for a group to be gone after SIGKILL: only
	// a process stuck in the kernel outlives it.
	killWait = 30 * time.Second
	// pollEvery is how often the group is looked at when none of its
	// members is our child to wait for.
	pollEvery = 10 * time.Millisecond
)

// group is a command's session and process group: their leader is the bash
// we started, and their ids the leader's pid. Signals go to the group and
// to every process of the session that left it (Linux: found in /proc).
type group struct {
	pgid   int
	leader chan int      // the leader's exit code (128+n for signal n), once
	gone   chan struct{} // closed when no process of the group is left
}

// watch starts reaping the group of the leader pgid.
func watch(pgid int) *group {
	g := &group{pgid: pgid, leader: make(chan int, 1), gone: make(chan struct{})}
	go g.reap()
	return g
}

// reap waits for the members of the group that are our children: the
// leader, and, since this process is a subreaper (Linux), every member
// orphaned by its parent's exit. When none is left, it watches the group
// until it is empty: a member below a process that left the group is not
// ours to wait for, and init reaps it.
func (g *group) reap() {
	defer close(g.gone)
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-g.pgid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			break // ECHILD: no child of ours left in the group
		}
		g.exited(pid, ws)
	}
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-g.pgid, &ws, syscall.WNOHANG, nil)
		if err == nil && pid > 0 {
			g.exited(pid, ws)
			continue
		}
		strays, ended := sessionStrays(g.pgid)
		for _, pid := range ended {
			// Orphans of the session are our children (a subreaper's):
			// reap those that ended.
			var ws syscall.WaitStatus
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		}
		if len(strays) == 0 && errors.Is(syscall.Kill(-g.pgid, 0), syscall.ESRCH) {
			return
		}
		time.Sleep(pollEvery)
	}
}

func (g *group) exited(pid int, ws syscall.WaitStatus) {
	if pid != g.pgid {
		return
	}
	code := ws.ExitStatus()
	if ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	g.leader <- code
}

// signal sends sig to every process of the group.
func (g *group) signal(sig syscall.Signal) {
	_ = syscall.Kill(-g.pgid, sig)
	strays, _ := sessionStrays(g.pgid)
	for _, pid := range strays {
		_ = syscall.Kill(pid, sig)
	}
	if sig == sigTerm {
		_ = syscall.Kill(-g.pgid, syscall.SIGCONT) // a stopped process acts on SIGTERM only once it runs
		for _, pid := range strays {
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
}

// empty reports whether the group is gone.
func (g *group) empty() bool {
	select {
	case <-g.gone:
		return true
	default:
		return false
	}
}

// stop ends the group: SIGTERM, then SIGKILL after grace (at once if grace
// is 0). It returns when the group is gone, or false if it is still there
// killWait after SIGKILL.
func (g *group) stop(grace time.Duration) bool {
	if g.empty() {
		return true
	}
	if grace > 0 {
		g.signal(sigTerm)
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-g.gone:
			return true
		case <-t.C:
		}
	}
	g.signal(sigKill)
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-g.gone:
		return true
	case <-t.C:
		return false
	}
}

// sessionStrays are the processes of session sid that are not in its
// leader's process group (they moved to one of their own), from /proc; none
// where there is no /proc: live the running ones, ended the zombies (gone
// but for their reaping).
func sessionStrays(sid int) (live, ended []int) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, nil
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp session ...: comm may hold spaces
		// and parentheses, so the fields are read after its last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 4 {
			continue
		}
		pgrp, err1 := strconv.Atoi(f[2])
		sess, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil || sess != sid || pgrp == sid {
			continue
		}
		if f[0] == "Z" {
			ended = append(ended, pid)
		} else {
			live = append(live, pid)
		}
	}
	return live, ended
}
