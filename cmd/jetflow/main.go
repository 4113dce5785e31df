// Command jetflow runs the jetflow engine (serve), workers (worker), and is
// the command line client of a running engine (submit, get, ls, wait,
// cancel, events, replay, bench).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/jetflow/jetflow"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1 // the job failed or was cancelled; or the command's own failure
	exitUsage   = 2 // usage or connection error
	exitTimeout = 3 // wait gave up before the job was terminal
)

func main() {
	// JETFLOW_CPUPROFILE=FILE writes a CPU profile of any command (for
	// the figures in docs/audit.md and docs/architecture.md).
	if p := os.Getenv("JETFLOW_CPUPROFILE"); p != "" {
		if f, err := os.Create(p); err == nil && pprof.StartCPUProfile(f) == nil {
			code := run(os.Args[1:], os.Stdout, os.Stderr)
			pprof.StopCPUProfile()
			f.Close()
			os.Exit(code)
		}
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// commandFuncs are the top-level commands (help.go describes them).
var commandFuncs = map[string]func(*cli, []string) int{
	"serve": cmdServe, "worker": cmdWorker, "bench": cmdBench,
	"submit": cmdSubmit, "get": cmdGet, "wait": cmdWait, "ls": cmdList, "list": cmdList,
	"cancel": cmdCancel, "reprioritize": cmdReprioritize, "events": cmdEvents, "replay": cmdReplay, "tree": cmdTree,
	"retry": cmdRetry, "queues": cmdQueues, "queue": cmdQueue, "pause": cmdPause, "resume": cmdResume, "workers": cmdWorkers,
	"types": cmdTypes, "purge": cmdPurge, "type": cmdType, "token": cmdToken, "download": cmdDownload, "workflow": cmdWorkflow,
	"schedule": cmdSchedule, "bulk": cmdBulk, "tail": cmdTail, "audit": cmdAudit, "export": cmdExport,
	"version": cmdVersion, // and help (cmdHelp), which runs these
}

func run(args []string, stdout, stderr io.Writer) int {
	return runIn(args, os.Stdin, stdout, stderr)
}

// runIn runs the command args name with stdin as its standard input.
func runIn(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help":
			args[0] = "help"
		case "-version", "--version":
			args[0] = "version"
		}
	}
	name, rest, err := hoistGlobals(args)
	c := &cli{name: "", in: stdin, out: stdout, errw: stderr}
	if err != nil {
		c.json = jsonFlag(args)
		c.reportAs(problemUsage(""), "%v", err)
		return exitUsage
	}
	if name == "" {
		printOverview(stdout)
		return exitUsage
	}
	f, ok := commandFuncs[name]
	if name == "help" {
		f, ok = cmdHelp, true
	}
	if !ok {
		c.json = jsonFlag(rest)
		c.unknownCommand(name, "")
		return exitUsage
	}
	c.name = name
	// An error found before the command parses its flags is JSON too.
	c.json = jsonFlag(rest)
	code := f(c, rest)
	if c.helped {
		return exitOK
	}
	return code
}

// cli is one command's context: its flags, output and connection.
type cli struct {
	name  string
	in    io.Reader // standard input (bulk's confirmation)
	out   io.Writer
	errw  io.Writer
	fs    *flag.FlagSet
	url   string
	token string
	actor string // --actor: who the events this CLI writes name
	json  bool
	debug bool
	nats  natsCreds // --nats-creds, --nats-user, --nats-password, --nats-token
	// helped: the command printed its help (-h, --help) instead of
	// running; reported: an error was printed as JSON (--json), once.
	helped, reported bool
}

func (c *cli) flags() *flag.FlagSet {
	c.fs = flag.NewFlagSet("jetflow "+c.name, flag.ContinueOnError)
	c.fs.SetOutput(c.errw)
	return c.fs
}

// clientFlags adds the flags every client command has.
func (c *cli) clientFlags() *flag.FlagSet {
	fs := c.flags()
	def := os.Getenv("JETFLOW_NATS")
	if def == "" {
		def = "nats://127.0.0.1:4222"
	}
	fs.StringVar(&c.url, "nats", def, "NATS URL of the jetflow system (env JETFLOW_NATS)")
	fs.StringVar(&c.token, "token", os.Getenv("JETFLOW_TOKEN"), "access token (serve --auth): speak the engine's command service with it instead of writing to JetStream; submit, get, wait, ls, cancel and events (env JETFLOW_TOKEN)")
	fs.BoolVar(&c.json, "json", false, "print JSON")
	fs.StringVar(&c.actor, "actor", os.Getenv("JETFLOW_ACTOR"), "who the events this command writes name (default: the NATS user and this host and process; a token names itself) (env JETFLOW_ACTOR)")
	c.natsFlags(fs)
	return fs
}

// parse parses flags that may come before, between or after positional
// arguments, and returns the positional ones.
func (c *cli) parse(args []string, minPos, maxPos int) ([]string, bool) {
	pos, ok := c.parseFlags(args)
	if !ok {
		return nil, false
	}
	if len(pos) < minPos || (maxPos >= 0 && len(pos) > maxPos) {
		c.errorf("want %s, got %d: %s", argCount(minPos, maxPos), len(pos), strings.Join(pos, " "))
		return nil, false
	}
	// nats.Connect reads "" as its default URL: an empty --nats would
	// silently be another system than the one named.
	if f := c.fs.Lookup("nats"); f != nil && !c.checkFlags(when("nats", f.Value.String() == "", "must not be empty")) {
		return nil, false
	}
	return pos, true
}

// given reports whether a flag was set on the command line (not left at
// its default).
func (c *cli) given(name string) bool {
	found := false
	c.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

// rule is the check of one flag's value: the reason it is refused, or ""
// when the value is fine.
type rule struct{ flag, reason string }

// when is a rule that refuses the flag's value with reason if bad.
func when(flag string, bad bool, reason string) rule {
	if !bad {
		return rule{}
	}
	return rule{flag, reason}
}

// checkFlags refuses the first flag given on the command line whose rule
// refuses its value ("--max-retries -1: must be 0-1000"), before anything
// is connected to or written. A flag left at its default is valid by
// construction and not checked.
func (c *cli) checkFlags(rules ...rule) bool {
	for _, r := range rules {
		if r.reason != "" && c.given(r.flag) {
			c.refuseFlag(r.flag, "", r.reason)
			return false
		}
	}
	return true
}

// refuseFlag reports a refused flag value: value as given, or, if empty,
// the flag's value (a string quoted), unless the reason starts with it.
func (c *cli) refuseFlag(name, value, reason string) {
	if value == "" {
		if f := c.fs.Lookup(name); f != nil {
			value = f.Value.String()
			if g, ok := f.Value.(flag.Getter); ok {
				if _, isString := g.Get().(string); isString {
					value = fmt.Sprintf("%q", value)
				}
			}
		}
		if strings.HasPrefix(reason, value) {
			value = ""
		}
	}
	if value == "" {
		c.reportAs(problemInput("--"+name), "--%s: %s", name, reason)
		return
	}
	if r := []rune(value); len(r) > 40 { // a value too long: the reason says so
		value = string(r[:32]) + "…"
	}
	c.reportAs(problemInput("--"+name), "--%s %s: %s", name, value, reason)
}

// flagInput reports an *commands.InputError of a request built from flags
// as the flag its field came from (fields maps a field to its flag):
// "--timeout 0s: must be more than 0". It reports nothing and returns
// false for an error of another field or kind.
func (c *cli) flagInput(err error, fields map[string]string) bool {
	var in *jetflow.InputError
	var p *jetflow.Problem
	field, value, reason := "", "", ""
	switch {
	case errors.As(err, &in):
		field, value, reason = in.Field, in.Value, in.Reason
	case errors.As(err, &p) && errors.Is(p, jetflow.ErrInvalidInput) && p.Field != "":
		// The engine refused it (a token client's command).
		field, reason = p.Field, p.Detail
	default:
		return false
	}
	name, ok := fields[field]
	if !ok || !c.given(name) {
		return false
	}
	c.refuseFlag(name, value, reason)
	return true
}

func argCount(lo, hi int) string {
	switch {
	case lo == hi:
		return fmt.Sprintf("%d argument(s)", lo)
	case hi < 0:
		return fmt.Sprintf("at least %d argument(s)", lo)
	}
	return fmt.Sprintf("%d to %d arguments", lo, hi)
}

// connect opens a client, failing fast when nothing listens at the URL.
func (c *cli) connect(ctx context.Context) (*jetflow.Client, bool) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if strings.HasPrefix(c.name, "token") {
		if c.given("token") {
			c.errorf("--token: jetflow token commands write through NATS with the engine's permissions, not with a token")
			return nil, false
		}
		c.token = "" // $JETFLOW_TOKEN is for the job commands
	}
	if !c.checkFlags(when("actor", len(c.actor) > 128 || strings.ContainsFunc(c.actor, func(r rune) bool { return r < ' ' || r == 0x7f }), "at most 128 printable characters"),
		when("actor", c.actor != "" && c.token != "", "not with --token (a token client's events name its token)")) {
		return nil, false
	}
	opts, ok := c.natsOptions()
	if !ok {
		return nil, false
	}
	cl, err := jetflow.Connect(cctx, c.url, jetflow.ClientOptions{Name: c.actor, Logger: c.logger(), NATSOptions: opts, Token: c.token})
	if err != nil {
		c.reportAs(problemUnavailable(), "%v", err)
		return nil, false
	}
	return cl, true
}

// withClient runs a client command: fn with a context that ends on
// SIGINT/SIGTERM and a client connected to --nats (closed after);
// a connection that fails is exit 2.
func (c *cli) withClient(fn func(ctx context.Context, cl *jetflow.Client) int) int {
	ctx, stop := signalContext()
	defer stop()
	cl, ok := c.connect(ctx)
	if !ok {
		return exitUsage
	}
	defer cl.Close()
	return fn(ctx, cl)
}

func (c *cli) logger() *slog.Logger {
	level := slog.LevelWarn
	if c.name == "serve" || c.name == "worker" {
		level = slog.LevelInfo
	}
	if c.debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(c.errw, &slog.HandlerOptions{Level: level}))
}

// errorf reports a usage error: on stderr, or under --json as a problem
// on stdout.
func (c *cli) errorf(format string, args ...any) { c.reportAs(nil, format, args...) }

// errorOf reports err's failure, described by format: under --json, as
// err's problem.
func (c *cli) errorOf(err error, format string, args ...any) {
	c.reportAs(jetflow.ProblemOf(err), format, args...)
}

// reportAs reports a failure: on stderr ("jetflow CMD: message"), or
// under --json on stdout as {"error": problem} (p nil: a usage error),
// the first one only.
func (c *cli) reportAs(p *jetflow.Problem, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !c.json {
		prefix := "jetflow"
		if c.name != "" {
			prefix += " " + c.name
		}
		fmt.Fprintf(c.errw, "%s: %s\n", prefix, msg)
		return
	}
	if c.reported {
		return
	}
	c.reported = true
	c.printJSON(map[string]any{"error": errorBody(p, msg)})
}

// fail reports err and returns its exit code: 2 for bad input and missing
// jobs (the caller's mistake), 1 otherwise.
func (c *cli) fail(err error) int {
	c.problem(err)
	if errors.Is(err, jetflow.ErrInvalidInput) || errors.Is(err, jetflow.ErrNotFound) {
		return exitUsage
	}
	return exitFailed
}

func (c *cli) printJSON(v any) {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// signalContext is cancelled by SIGINT or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
