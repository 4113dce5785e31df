package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/shell"
)

// execFlags are the flags of `jetflow worker` that run job types as
// processes (package shell, docs/shell.md).
type execFlags struct {
	execs     stringList
	workDir   string
	maxOutput byteSize
	killGrace time.Duration
}

func (e *execFlags) add(fs *flag.FlagSet) {
	e.maxOutput = shell.DefaultMaxOutput
	fs.Var(&e.execs, "exec", "run jobs of TYPE as processes: `TYPE=COMMAND`, run with bash -c in a private directory (TYPE= runs "+shell.DefaultCommand+"); a file of the worker's directory named by a relative path is found there; repeatable; with it, the demo handlers are not run")
	fs.StringVar(&e.workDir, "work-dir", filepath.Join(os.TempDir(), "jetflow-jobs"), "--exec: where the attempts' directories are made")
	fs.Var(&e.maxOutput, "max-output", "--exec: most `bytes` a job may write to its directory, stdout and stderr included (suffixes KiB, MiB, GiB)")
	durationVar(fs, &e.killGrace, "kill-grace", shell.DefaultKillGrace, "--exec: time between SIGTERM and SIGKILL of a job's process group")
}

// check refuses a bad --exec or shell flag (exit 2, naming the flag).
func (e *execFlags) check(c *cli) bool {
	if !c.checkFlags(
		when("max-output", e.maxOutput <= 0, "must be more than 0"),
		when("kill-grace", e.killGrace <= 0, "must be more than 0"),
		when("work-dir", e.workDir == "", "must not be empty"),
	) {
		return false
	}
	seen := map[string]bool{}
	for _, v := range e.execs {
		typ, _, ok := strings.Cut(v, "=")
		reason := ""
		switch {
		case !ok:
			reason = "want TYPE=COMMAND (TYPE= runs " + shell.DefaultCommand + ")"
		case typ == "":
			reason = "the type must not be empty"
		case strings.IndexFunc(typ, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			reason = "the type must not contain spaces or control characters"
		case seen[typ]:
			reason = "the type is given twice"
		}
		if reason != "" {
			c.refuseFlag("exec", strconv.Quote(v), reason)
			return false
		}
		seen[typ] = true
	}
	return true
}

// register registers a shell.Runner for each --exec on w (on queue only, if
// not ""); none without --exec. The runners place the jobs' input files
// and store their result archives through cl (execfiles.go).
func (e *execFlags) register(w *jetflow.Worker, cl *jetflow.Client, queue string, log *slog.Logger) ([]*shell.Runner, error) {
	var on []jetflow.HandlerOption
	if queue != "" {
		on = append(on, jetflow.OnQueue(queue))
	}
	var runners []*shell.Runner
	// A job runs in a directory of its own: the files of the worker's
	// directory that the commands name are named by their absolute paths.
	start, _ := os.Getwd()
	for _, v := range e.execs {
		typ, command, _ := strings.Cut(v, "=")
		if command != "" && start != "" { // not the default, bash run.sh: run.sh is an input file
			var resolved []string
			if command, resolved = resolveCommand(command, start); resolved != nil {
				log.Info("--exec: files of the worker's directory named by their absolute paths", "type", typ,
					"files", resolved, "command", command)
			}
		}
		r, err := shell.New(shell.Config{Command: command, WorkDir: e.workDir, MaxOutput: int64(e.maxOutput),
			KillGrace: e.killGrace, Logger: log.With("type", typ),
			Prepare: fileHooks{cl}.prepare, Collect: fileHooks{cl}.collect})
		if err != nil {
			return nil, fmt.Errorf("--exec %s: %w", v, err)
		}
		w.Handle(typ, r, on...)
		runners = append(runners, r)
	}
	return runners, nil
}

// what names what the worker runs, for its banner.
func (e *execFlags) what() string {
	if len(e.execs) == 0 {
		return "demo handlers"
	}
	types := make([]string, len(e.execs))
	for i, v := range e.execs {
		types[i], _, _ = strings.Cut(v, "=")
	}
	return "shell jobs of " + strings.Join(types, ", ")
}

// close waits for the runners' attempts to end once the worker stopped
// (their process groups killed), SIGKILLing what is still there after the
// kill grace.
func (e *execFlags) close(runners []*shell.Runner) {
	ctx, cancel := context.WithTimeout(context.Background(), e.killGrace+2*time.Second)
	defer cancel()
	for _, r := range runners {
		_ = r.Close(ctx)
	}
}

// byteSize is a flag's count of bytes: 1048576, 1024KiB, 64MiB, 1GiB (KB,
// MB, GB, K, M, G mean the same).
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	num := strings.TrimRightFunc(s, unicode.IsLetter)
	unit := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s[len(num):]), "IB"), "B")
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
	sh, ok := shift[unit]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n > (1<<62)>>sh || n < -(1<<62)>>sh {
		return fmt.Errorf("want a number of bytes, e.g. 67108864 or 64MiB")
	}
	*b = byteSize(n << sh)
	return nil
}
