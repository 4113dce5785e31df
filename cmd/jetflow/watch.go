package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jetflow/jetflow"
)

// Pace of get --watch: the job is read again after each of its events,
// at most every watchMin, and every watchEvery whatever happens (its
// record follows its events by a moment: the read after the last event
// may still see the one before).
const (
	watchMin   = 200 * time.Millisecond
	watchEvery = time.Second
)

// watchJob redraws the job's line until the job ends: on a terminal in
// place, otherwise a line per change (--json: the job, a line per
// change); then prints the job as get does, and returns wait's exit code.
func (c *cli) watchJob(ctx context.Context, cl *jetflow.Client, job *jetflow.JobInfo) int {
	tty := isTerminal(c.out)
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan struct{}, 1)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		_ = cl.Follow(fctx, job.ID, func(*jetflow.EventInfo) error {
			select {
			case changed <- struct{}{}:
			default:
			}
			return nil
		})
	}()
	tick := time.NewTicker(watchEvery)
	defer tick.Stop()
	last := ""
	show := func(j *jetflow.JobInfo) {
		line := jobLine(j)
		if c.json {
			b, _ := json.Marshal(j)
			line = string(b)
		}
		if line == last {
			return
		}
		last = line
		if tty && !c.json {
			fmt.Fprint(c.out, "\r\x1b[K"+line)
		} else {
			fmt.Fprintln(c.out, line)
		}
	}
	show(job)
	for !job.State.Terminal() {
		select {
		case <-ctx.Done():
			if tty && !c.json {
				fmt.Fprintln(c.out)
			}
			return exitUsage
		case <-followed:
			// The job's last event was delivered: its record ends it.
			followed = nil
			done, err := cl.Wait(ctx, job.ID)
			if err != nil {
				return c.fail(err)
			}
			job = done
		case <-changed:
		case <-tick.C:
		}
		if !job.State.Terminal() {
			cur, err := cl.Get(ctx, job.ID)
			if err != nil {
				return c.fail(err)
			}
			job = cur
		}
		show(job)
		if !job.State.Terminal() { // a pace: a busy job's events come faster than a line is read
			select {
			case <-ctx.Done():
			case <-time.After(watchMin):
			}
		}
	}
	if tty && !c.json {
		fmt.Fprintln(c.out)
	}
	if !c.json {
		fmt.Fprintln(c.out)
		c.printJob(job)
	}
	if job.State == jetflow.Succeeded {
		return exitOK
	}
	return exitFailed
}

// jobLine is a job in one line: id, type, state, and its progress bar,
// a fan-out's counts, its attempt or why it waits.
func jobLine(j *jetflow.JobInfo) string {
	parts := []string{j.ID, j.Type, string(j.State)}
	switch {
	case j.Fanout != nil:
		f := j.Fanout
		parts = append(parts, fmt.Sprintf("%s %d/%d %s: %d succeeded, %d failed, %d cancelled", progressBar(f.Percent),
			f.Finished, f.Total, f.Kind, f.Succeeded, f.Failed, f.Cancelled))
	case j.Progress != nil:
		p := fmt.Sprintf("%d/%d", j.Progress.Current, j.Progress.Total)
		if j.Progress.Percent != nil {
			p = progressBar(*j.Progress.Percent) + " " + p + fmt.Sprintf(" (%.1f%%)", *j.Progress.Percent)
		}
		if j.Progress.Message != "" {
			p += " " + j.Progress.Message
		}
		parts = append(parts, p)
	}
	if j.Attempts > 1 {
		parts = append(parts, fmt.Sprintf("attempt %d", j.Attempts))
	}
	if j.Hold != nil {
		parts = append(parts, "waits: "+j.Hold.Message)
	}
	return strings.Join(parts, "  ")
}

// isTerminal reports whether w (a reader or a writer) is a terminal (a
// character device).
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
