package shell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/tracing"
)

// Defaults of Config.
const (
	DefaultCommand   = "bash run.sh"
	DefaultMaxOutput = 64 << 20 // bytes the command may write to its directory, logs included
	DefaultKillGrace = 5 * time.Second
)

const (
	// ExitRetryLater (EX_TEMPFAIL) asks for the job to run again later,
	// after the delay on the last line of stdout.
	ExitRetryLater = 75
	// DefaultRetryLaterDelay is the delay of an exit ExitRetryLater whose
	// last line of stdout is not a delay.
	DefaultRetryLaterDelay = time.Minute
	// MaxEnvPayload is the largest payload also given in JETFLOW_PAYLOAD;
	// a larger one is only in payload.json.
	MaxEnvPayload = 64 << 10
	// TailBytes bounds the tails of stdout (in the result) and stderr (in
	// the error message).
	TailBytes = 2 << 10
	// MaxListedOutputs bounds the output files named in the result.
	MaxListedOutputs = 100
	// CollectTimeout bounds Config.Collect.
	CollectTimeout = time.Minute
)

// Error codes of a failed attempt other than EXIT_<n>.
const (
	CodeOutputTooLarge = "OUTPUT_TOO_LARGE" // the command wrote more than Config.MaxOutput
	CodeStartFailed    = "START_FAILED"     // the directory could not be made or bash not started
)

// Names in an attempt's directory.
const (
	PayloadFile = "payload.json"
	InputsFile  = "inputs.json" // a workflow step's: its dependencies' results by step name
	OutputDir   = "out"
	TmpDir      = "tmp"
	StdoutFile  = "stdout.txt"
	StderrFile  = "stderr.txt"
)

// Config configures a Runner. The zero value means defaults.
type Config struct {
	// Command is run as `bash -c Command` in the attempt's directory
	// (default DefaultCommand).
	Command string
	// WorkDir holds the attempts' directories (default
	// os.TempDir()/jetflow-jobs). A worker killed with SIGKILL leaves its
	// attempts' directories behind.
	WorkDir string
	// MaxOutput bounds the bytes the command writes to its directory,
	// stdout and stderr included (default DefaultMaxOutput).
	MaxOutput int64
	// KillGrace is how long the process group has between SIGTERM and
	// SIGKILL (default DefaultKillGrace).
	KillGrace time.Duration
	// Env is the environment the JETFLOW_* variables are added to (default:
	// the worker's, less its own JETFLOW_* variables such as JETFLOW_NATS,
	// and its TRACEPARENT and TRACESTATE: a job's are its attempt's).
	Env []string
	// Prepare, if set, runs before the command, in a directory with
	// payload.json, out/ and tmp/ made: it places the job's input files in
	// a.Dir. An error fails the attempt.
	Prepare func(ctx context.Context, job *jetflow.RawJob, a *Attempt) error
	// Collect, if set, runs after the process group is gone and before the
	// directory is removed, whatever the outcome (a.Err): it can keep
	// a.Outputs, a.Stdout and a.Stderr. Its context is not the attempt's
	// (which may have ended) and lasts CollectTimeout. An error fails an
	// attempt that would have succeeded.
	Collect func(ctx context.Context, job *jetflow.RawJob, a *Attempt) error
	Logger  *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Command == "" {
		c.Command = DefaultCommand
	}
	if c.WorkDir == "" {
		c.WorkDir = filepath.Join(os.TempDir(), "jetflow-jobs")
	}
	if c.MaxOutput == 0 {
		c.MaxOutput = DefaultMaxOutput
	}
	if c.KillGrace == 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.Env == nil {
		c.Env = os.Environ() // env drops JETFLOW_* (and TMPDIR) from it
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case strings.TrimSpace(c.Command) == "":
		return &jetflow.InputError{Field: "command", Reason: "must not be blank"}
	case strings.ContainsRune(c.Command, 0):
		return &jetflow.InputError{Field: "command", Reason: "must not contain NUL"}
	case c.MaxOutput < 0:
		return &jetflow.InputError{Field: "max_output", Value: fmt.Sprint(c.MaxOutput), Reason: "must be more than 0"}
	case c.KillGrace < 0:
		return &jetflow.InputError{Field: "kill_grace", Value: c.KillGrace.String(), Reason: "must be more than 0"}
	}
	return nil
}

// Attempt is one attempt's directory and, once the command ended, how it
// went.
type Attempt struct {
	Dir       string // the working directory
	OutputDir string // Dir/out, $JETFLOW_OUTPUT
	Stdout    string // Dir/stdout.txt
	Stderr    string // Dir/stderr.txt

	// Set when the process group is gone:
	ExitCode int // the command's exit code (128+n for signal n); -1 if it was killed
	Duration time.Duration
	Outputs  []File // the regular files under OutputDir, symbolic links left out; none when the command wrote more than MaxOutput
	Err      error  // what the attempt returns; nil when it succeeded
}

// File is an output file: its path relative to the output directory,
// slash-separated, never with "..", and its size.
type File struct {
	Name string `json:"name"`
	Size int64  `json:"size"`
}

// Result is the result of a job whose command exited 0.
type Result struct {
	ExitCode        int      `json:"exit_code"`
	DurationSeconds float64  `json:"duration_seconds"`
	StdoutTail      string   `json:"stdout_tail"`
	Outputs         []string `json:"outputs"`      // the first MaxListedOutputs
	OutputCount     int      `json:"output_count"` // all of them
	OutputBytes     int64    `json:"output_bytes"` // their total size
}

// Runner is a jetflow.Handler that runs each attempt of a job as a process
// (see the package documentation). Close it after the worker stopped.
type Runner struct {
	cfg Config

	mu     sync.Mutex
	closed bool
	groups map[*group]struct{} // the running attempts' process groups
	wg     sync.WaitGroup
}

// New returns a Runner, or an *jetflow.InputError for a bad Config.
func New(cfg Config) (*Runner, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	becomeSubreaper(cfg.Logger)
	return &Runner{cfg: cfg, groups: map[*group]struct{}{}}, nil
}

var errClosed = errors.New("shell: runner closed")

// Work runs one attempt of job: it implements jetflow.Handler.
func (r *Runner) Work(ctx context.Context, job *jetflow.RawJob) (json.RawMessage, error) {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil, errClosed
	}
	r.wg.Add(1)
	r.mu.Unlock()
	defer r.wg.Done()

	a, err := r.makeDir(job)
	if err != nil {
		return nil, jetflow.WithCode(CodeStartFailed, err)
	}
	defer r.removeDir(a.Dir)
	if err := writeInputs(ctx, job, a); err != nil {
		return nil, err
	}
	log := r.cfg.Logger.With("job", job.ID, "attempt", job.Attempt, "dir", a.Dir)
	if r.cfg.Prepare != nil {
		if err := r.cfg.Prepare(ctx, job, a); err != nil {
			return nil, fmt.Errorf("prepare the directory: %w", err)
		}
	}
	res, err := r.run(ctx, job, a, log)
	a.Err = err
	if r.cfg.Collect != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), CollectTimeout)
		cerr := r.cfg.Collect(cctx, job, a)
		cancel()
		switch {
		case cerr != nil && a.Err == nil:
			a.Err = fmt.Errorf("collect the outputs: %w", cerr)
		case cerr != nil:
			log.Warn("collect the outputs", "err", cerr)
		}
	}
	if a.Err != nil {
		return nil, a.Err
	}
	return json.Marshal(res)
}

// Close stops taking attempts and waits for the running ones to end (their
// process groups gone). When ctx ends first, their groups are killed
// (SIGKILL) and Close still waits for them; it returns ctx's error then.
func (r *Runner) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	r.mu.Lock()
	for g := range r.groups {
		g.signal(sigKill)
	}
	r.mu.Unlock()
	<-done
	return ctx.Err()
}

// makeDir makes the attempt's directory with payload.json, out/ and tmp/.
func (r *Runner) makeDir(job *jetflow.RawJob) (*Attempt, error) {
	if err := os.MkdirAll(r.cfg.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	}
	dir, err := os.MkdirTemp(r.cfg.WorkDir, fmt.Sprintf("%s-%d-", safeName(job.ID), job.Attempt))
	if err != nil {
		return nil, fmt.Errorf("attempt dir: %w", err)
	}
	a := &Attempt{Dir: dir, OutputDir: filepath.Join(dir, OutputDir),
		Stdout: filepath.Join(dir, StdoutFile), Stderr: filepath.Join(dir, StderrFile), ExitCode: -1}
	payload := []byte(job.Payload)
	if len(payload) == 0 {
		payload = []byte("null")
	}
	err = errors.Join(os.WriteFile(filepath.Join(dir, PayloadFile), payload, 0o600),
		os.Mkdir(a.OutputDir, 0o700), os.Mkdir(filepath.Join(dir, TmpDir), 0o700))
	if err != nil {
		r.removeDir(dir)
		return nil, err
	}
	return a, nil
}

// writeInputs writes a workflow step's inputs.json: the results of the
// steps it depends on, by step name ({"fetch": {...}}); nothing for a job
// that is not a step. An error (the records could not be read) fails the
// attempt, which is retried.
func writeInputs(ctx context.Context, job *jetflow.RawJob, a *Attempt) error {
	if job.Step() == "" {
		return nil
	}
	in, err := job.Inputs(ctx)
	if err != nil {
		return fmt.Errorf("the step's inputs: %w", err)
	}
	if in == nil {
		in = map[string]json.RawMessage{}
	}
	data, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("the step's inputs: %w", err)
	}
	return os.WriteFile(filepath.Join(a.Dir, InputsFile), data, 0o600)
}

// removeDir removes an attempt's directory, also when the command left
// directories without write permission in it.
func (r *Runner) removeDir(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(path, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		r.cfg.Logger.Warn("remove an attempt's directory", "dir", dir, "err", err)
	}
}

// env is the command's environment. TRACEPARENT and TRACESTATE are the
// attempt's trace context (ctx's span), never the worker's own.
func (r *Runner) env(ctx context.Context, job *jetflow.RawJob, a *Attempt) []string {
	env := make([]string, 0, len(r.cfg.Env)+11)
	for _, kv := range r.cfg.Env {
		if !strings.HasPrefix(kv, "JETFLOW_") && !strings.HasPrefix(kv, "TMPDIR=") &&
			!strings.HasPrefix(kv, "TRACEPARENT=") && !strings.HasPrefix(kv, "TRACESTATE=") {
			env = append(env, kv)
		}
	}
	tracing.Inject(ctx, func(key, value string) { env = append(env, strings.ToUpper(key)+"="+value) })
	env = append(env,
		"JETFLOW_JOB_ID="+job.ID,
		"JETFLOW_TYPE="+job.Type,
		"JETFLOW_NAMESPACE="+job.Namespace,
		"JETFLOW_QUEUE="+job.Queue,
		fmt.Sprintf("JETFLOW_ATTEMPT=%d", job.Attempt),
		"JETFLOW_OUTPUT="+a.OutputDir,
		"TMPDIR="+filepath.Join(a.Dir, TmpDir))
	if step := job.Step(); step != "" {
		env = append(env, "JETFLOW_STEP="+step, "JETFLOW_INPUTS="+filepath.Join(a.Dir, InputsFile))
	}
	if len(job.Payload) <= MaxEnvPayload {
		payload := string(job.Payload)
		if payload == "" {
			payload = "null"
		}
		env = append(env, "JETFLOW_PAYLOAD="+payload)
	}
	return env
}

// safeName is s reduced to [A-Za-z0-9_-], at most 64 bytes: a job id as a
// directory name's prefix.
func safeName(s string) string {
	var b strings.Builder
	for _, c := range s {
		if b.Len() == 64 {
			break
		}
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' {
			b.WriteRune(c)
		}
	}
	if b.Len() == 0 {
		return "job"
	}
	return b.String()
}
