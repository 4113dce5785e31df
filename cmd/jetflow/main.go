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

const usage = `jetflow: an event-sourced job engine on NATS JetStream

Engine and workers:
  jetflow serve [--data DIR] [--nats-listen HOST:PORT] [--nats URL] [--demo] [--sync always]
                [--http HOST:PORT]    HTTP API and dashboard (default 127.0.0.1:8080; "off": none)
                [--http-origin URL] [--http-max-body BYTES] [--http-max-streams N] [--http-lease D]
                [--max-upload BYTES] [--max-files N]   files of a multipart submit (default 100MiB, 1000)
                [--categories a,b,c] [--type-grace D] [--replicas N]
                [--auth] [--open-ops] [--admin-token-file F]   tokens for the HTTP API (required beyond loopback)
                [--nats-auth]         the embedded NATS server requires users per role (docs/security.md)
  jetflow worker [--queue Q] [--concurrency N] [--lease D] [--grace D] [--id ID]   run the demo handlers
                [--namespace NS]      (every queue unless --queue names one; demo:greet in NS)
  jetflow bench [--jobs N] [--workers C] [--fanout] [--sync always] [--nats URL] [--json]

Client (--nats URL, default nats://127.0.0.1:4222 or $JETFLOW_NATS; --json everywhere;
NATS credentials, also on worker, serve --nats and bench --nats: --nats-creds FILE, --nats-user U with
--nats-password P, or --nats-token T, default $JETFLOW_NATS_CREDS, _USER, _PASSWORD, _TOKEN;
--namespace NS, default $JETFLOW_NAMESPACE, on submit, get, ls, events, types;
--token T, default $JETFLOW_TOKEN: speak the engine's command service with an access token,
for submit, get, wait, ls, cancel and events, in the token's namespace):
  jetflow submit TYPE [JSON] [--queue Q] [--delay D] [--max-retries N] [--backoff D]
                 [--timeout D] [--key K] [--tag T] [--user U] [--wait] [--file PATH]...
                 --file: input files (a directory: its tree), stored with the job (docs/files.md)
                 TYPE: free-form (demo.echo), category:name (NS, then @global) or scope:category:name
  jetflow get ID                        a job of another namespace than NS is not found
  jetflow wait ID [--timeout D]
  jetflow ls [--state S] [--queue Q] [--type T] [--parent ID] [--limit N]
  jetflow tree ID                       a fan-out parent and its children, with states
  jetflow cancel ID [--reason R]
  jetflow retry ID [--key K] [--wait]   run a finished job again (a new job with retry_of)
  jetflow queues                        queues: waiting, running, delayed, paused, limits, pending
  jetflow queue set QUEUE [--max-running N] [--max-running-per-user M]
                                        a queue's limits (0: none; a limit not given is kept):
                                        over them, jobs wait in pending (docs/quotas.md)
  jetflow pause QUEUE | jetflow resume QUEUE
  jetflow workers                       workers and their heartbeats (SDK and HTTP)
  jetflow events ID [--follow]
  jetflow download ID [-o FILE] [--wait]  the job's result archive (a zip; default ID.zip)
  jetflow types [--deleted]             registered types visible from NS (its own and @global;
                                        every type without NS), with their live workers
  jetflow type register FULLNAME [--schema FILE] [--description TEXT]
                                        FULLNAME is scope:category:name (scope: a namespace,
                                        @global or @internal); prints created, exists or reactivated
  jetflow replay [--verify]
  jetflow purge --older-than D [--namespace NS] [--dry-run]
                                        purge terminal jobs that finished longer ago than D
  jetflow token create --namespace NS --role admin|producer|worker|reader [--ttl D] [--name N]
                                        prints the token once (NS "*": every namespace)
  jetflow token ls | jetflow token revoke ID

Exit codes: 0 ok (job succeeded); 1 job failed or cancelled, or the command failed;
2 usage or connection error; 3 wait timed out.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	cmds := map[string]func(*cli, []string) int{
		"serve": cmdServe, "worker": cmdWorker, "bench": cmdBench,
		"submit": cmdSubmit, "get": cmdGet, "wait": cmdWait, "ls": cmdList, "list": cmdList,
		"cancel": cmdCancel, "events": cmdEvents, "replay": cmdReplay, "tree": cmdTree,
		"retry": cmdRetry, "queues": cmdQueues, "queue": cmdQueue, "pause": cmdPause, "resume": cmdResume, "workers": cmdWorkers,
		"types": cmdTypes, "purge": cmdPurge, "type": cmdType, "token": cmdToken, "download": cmdDownload,
	}
	f, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "jetflow: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
	c := &cli{name: args[0], out: stdout, errw: stderr}
	return f(c, args[1:])
}

// cli is one command's context: its flags, output and connection.
type cli struct {
	name  string
	out   io.Writer
	errw  io.Writer
	fs    *flag.FlagSet
	url   string
	token string
	json  bool
	debug bool
	nats  natsCreds // --nats-creds, --nats-user, --nats-password, --nats-token
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
	c.natsFlags(fs)
	return fs
}

// parse parses flags that may come before, between or after positional
// arguments, and returns the positional ones.
func (c *cli) parse(args []string, minPos, maxPos int) ([]string, bool) {
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			return nil, false
		}
		args = c.fs.Args()
		if len(args) == 0 {
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	if len(pos) < minPos || (maxPos >= 0 && len(pos) > maxPos) {
		fmt.Fprintf(c.errw, "jetflow %s: want %s, got %d: %s\n", c.name, argCount(minPos, maxPos), len(pos), strings.Join(pos, " "))
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
		c.errorf("--%s: %s", name, reason)
		return
	}
	if r := []rune(value); len(r) > 40 { // a value too long: the reason says so
		value = string(r[:32]) + "…"
	}
	c.errorf("--%s %s: %s", name, value, reason)
}

// flagInput reports an *commands.InputError of a request built from flags
// as the flag its field came from (fields maps a field to its flag):
// "--timeout 0s: must be more than 0". It reports nothing and returns
// false for an error of another field or kind.
func (c *cli) flagInput(err error, fields map[string]string) bool {
	var in *jetflow.InputError
	if !errors.As(err, &in) {
		return false
	}
	name, ok := fields[in.Field]
	if !ok || !c.given(name) {
		return false
	}
	c.refuseFlag(name, in.Value, in.Reason)
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
	opts, ok := c.natsOptions()
	if !ok {
		return nil, false
	}
	cl, err := jetflow.Connect(cctx, c.url, jetflow.ClientOptions{Logger: c.logger(), NATSOptions: opts, Token: c.token})
	if err != nil {
		c.errorf("%v", err)
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

func (c *cli) errorf(format string, args ...any) {
	fmt.Fprintf(c.errw, "jetflow %s: %s\n", c.name, fmt.Sprintf(format, args...))
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
