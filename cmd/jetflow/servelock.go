package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile is the file of the data directory that the serve using it
// holds locked (flock): a second serve of the directory is refused at
// once, and a serve that was killed leaves no lock (the kernel drops it).
const lockFile = "jetflow.lock"

// claimDataDir locks dir for this process, or reports who holds it
// (naming --data). release unlocks it.
func (c *cli) claimDataDir(dir string) (release func(), ok bool) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.refuseFlag("data", strconv.Quote(dir), unwrapPath(err).Error())
		return nil, false
	}
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		c.refuseFlag("data", strconv.Quote(dir), fmt.Sprintf("cannot open %s: %v", lockFile, unwrapPath(err)))
		return nil, false
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = " (pid " + pid + ")"
			}
		}
		f.Close()
		// The whole path (refuseFlag would shorten a long one).
		if errors.Is(err, syscall.EWOULDBLOCK) {
			c.reportAs(problemInput("--data"), "--data %q: in use by another jetflow serve%s: stop it, or give another --data", dir, holder)
		} else {
			c.reportAs(problemInput("--data"), "--data %q: cannot lock %s: %v", dir, lockFile, err)
		}
		return nil, false
	}
	// Who holds it, for the message of the next one.
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, true
}

// checkFree refuses an address that something listens on already (naming
// its flag): the embedded server would otherwise try for 30 s before it
// says it is not ready, and the HTTP API would fail after the engine
// started. Port 0 (any free port) is always free.
func (c *cli) checkFree(flagName, addr string) bool {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		return true
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		reason := err.Error()
		if errors.Is(err, syscall.EADDRINUSE) {
			reason = "address in use (another jetflow serve, or another server, listens there): stop it, or give another --" + flagName
		}
		c.refuseFlag(flagName, strconv.Quote(addr), reason)
		return false
	}
	l.Close()
	return true
}
