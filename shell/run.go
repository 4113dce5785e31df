package shell

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jetflow/jetflow"
)

const (
	// watchEvery is how often the directory's size is looked at.
	watchEvery = 100 * time.Millisecond
	// drainWait bounds the reading of stdout and stderr once the group is
	// gone: a process that left the group may hold them open.
	drainWait = time.Second
)

// supervisor is the group's leader: it runs the command ($1) with bash -c
// and exits with its status (128+n for signal n). Its watchdog waits for
// fd 3 to reach its end, which happens when the worker dies, and then kills
// the whole group: no job runs on without its worker, even one killed with
// SIGKILL. When the command ends, the watchdog is stopped.
// (The watchdog is disowned so that bash does not report its end on the
// job's stderr.)
const supervisor = `( read -r _ <&3; kill -KILL 0 ) >/dev/null 2>&1 &
watchdog=$!
disown "$watchdog"
exec 3<&-
bash -c "$1" &
command=$!
wait "$command"
status=$?
kill -KILL "$watchdog" 2>/dev/null
exit "$status"`

// run runs the command in a's directory until its process group is gone,
// and tells how it went: a Result, or the error of the attempt.
func (r *Runner) run(ctx context.Context, job *jetflow.RawJob, a *Attempt, log *slog.Logger) (*Result, error) {
	logs, err := openLogs(a)
	if err != nil {
		return nil, jetflow.WithCode(CodeStartFailed, err)
	}
	defer logs.close()
	b := newBudget(r.cfg.MaxOutput)
	stdout := &logFile{f: logs.out, budget: b}
	stderr := &logFile{f: logs.err, budget: b}

	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, jetflow.WithCode(CodeStartFailed, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, jetflow.WithCode(CodeStartFailed, err)
	}
	defer outR.Close()
	defer errR.Close()
	base, _ := dirBytes(a.Dir) // the payload and the input files

	// lifeR is the group's end of a pipe whose other end only this process
	// holds: when it dies, even by SIGKILL, the watchdog kills the group.
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		outW.Close()
		errW.Close()
		return nil, jetflow.WithCode(CodeStartFailed, err)
	}
	defer lifeW.Close() // once the group is gone; and keeps lifeW from the collector until then
	cmd := exec.Command("bash", "-c", supervisor, "jetflow-job", r.cfg.Command)
	cmd.Dir = a.Dir
	cmd.Env = r.env(ctx, job, a)
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = []*os.File{lifeR} // fd 3
	// Its own session (and so its own process group): a process that
	// moves to a group of its own (GNU timeout does) stays in the session,
	// where stop finds it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := time.Now()
	err = cmd.Start()
	outW.Close()
	errW.Close()
	lifeR.Close()
	if err != nil {
		return nil, jetflow.WithCode(CodeStartFailed, fmt.Errorf("start bash: %w", err))
	}
	// The group's members are reaped by g, never by cmd.Wait.
	g := watch(cmd.Process.Pid)
	defer cmd.Process.Release()
	r.track(g, true)
	defer r.track(g, false)
	log.Debug("started", "pgid", g.pgid)

	so := &stdoutReader{ctx: ctx, job: job, log: log, out: stdout}
	var readers sync.WaitGroup
	readers.Add(2)
	go func() { defer readers.Done(); so.read(outR) }()
	go func() { defer readers.Done(); drainStderr(errR, stderr) }()
	stopWatch, watched := make(chan struct{}), make(chan struct{})
	go func() { defer close(watched); b.watchDir(a.Dir, base, watchEvery, stopWatch) }()

	// The group is stopped whatever ends the attempt: what the command
	// left running when it exited, too. A command over its output limit
	// is killed at once, before it writes more.
	var killed error // why the group was killed before the command ended
	grace := r.cfg.KillGrace
	select {
	case code := <-g.leader:
		a.ExitCode = code
	case <-ctx.Done():
		killed = context.Cause(ctx)
	case <-b.over:
		killed, grace = r.tooLarge(), 0
	}
	if !g.stop(grace) {
		log.Error("a job's process group outlived SIGKILL", "pgid", g.pgid)
	}
	a.Duration = time.Since(start)
	close(stopWatch)
	<-watched
	b.look(a.Dir, base) // a last look: the command may have ended between two
	b.check()
	_ = outR.SetReadDeadline(time.Now().Add(drainWait))
	_ = errR.SetReadDeadline(time.Now().Add(drainWait))
	readers.Wait()
	if err := logs.close(); err != nil {
		log.Warn("write the logs", "err", err)
	}
	a.Outputs = listOutputs(a.OutputDir)
	select {
	case <-b.over:
		if killed == nil { // the command ended as its output passed the limit
			killed = r.tooLarge()
		}
		// What it left is not kept (Collect would archive a bomb): no
		// outputs, and logs of at most MaxOutput each.
		a.Outputs = nil
		for _, p := range []string{a.Stdout, a.Stderr} {
			if fi, err := os.Stat(p); err == nil && fi.Size() > r.cfg.MaxOutput {
				_ = os.Truncate(p, r.cfg.MaxOutput)
			}
		}
	default:
	}
	log.Debug("ended", "exit", a.ExitCode, "killed", killed, "duration", a.Duration)
	return r.outcome(a, killed, so, stderr)
}

func (r *Runner) tooLarge() error {
	return jetflow.WithCode(CodeOutputTooLarge, fmt.Errorf("the command wrote more than %d bytes to its directory and logs", r.cfg.MaxOutput))
}

// outcome tells how the attempt ended: see the package documentation.
func (r *Runner) outcome(a *Attempt, killed error, so *stdoutReader, stderr *logFile) (*Result, error) {
	msg := strings.TrimRight(stderr.Tail(), " \t\r\n")
	switch {
	case killed != nil:
		if msg != "" {
			return nil, fmt.Errorf("%w; stderr: %s", killed, msg)
		}
		return nil, killed
	case a.ExitCode == ExitRetryLater:
		reason := fmt.Sprintf("exit %d (retry later)", ExitRetryLater)
		if msg != "" {
			reason += ": " + msg
		}
		return nil, jetflow.RetryLater(retryDelay(so.last), reason)
	case a.ExitCode != 0:
		if msg == "" {
			msg = fmt.Sprintf("exit status %d", a.ExitCode)
		}
		return nil, jetflow.WithCode(fmt.Sprintf("EXIT_%d", a.ExitCode), errors.New(msg))
	}
	res := &Result{ExitCode: 0, DurationSeconds: a.Duration.Seconds(), StdoutTail: so.out.Tail(),
		Outputs: []string{}, OutputCount: len(a.Outputs)}
	for i, f := range a.Outputs {
		if i < MaxListedOutputs {
			res.Outputs = append(res.Outputs, f.Name)
		}
		res.OutputBytes += f.Size
	}
	return res, nil
}

// track adds a running group to those Close kills, or removes it.
func (r *Runner) track(g *group, running bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if running {
		r.groups[g] = struct{}{}
	} else {
		delete(r.groups, g)
	}
}

// logs are an attempt's stdout.txt and stderr.txt.
type logs struct {
	out, err *os.File
	once     sync.Once
	closeErr error
}

func openLogs(a *Attempt) (*logs, error) {
	out, err := os.OpenFile(a.Stdout, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	errf, err := os.OpenFile(a.Stderr, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		out.Close()
		return nil, err
	}
	return &logs{out: out, err: errf}, nil
}

func (l *logs) close() error {
	l.once.Do(func() { l.closeErr = errors.Join(l.out.Close(), l.err.Close()) })
	return l.closeErr
}
