package main

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"text/tabwriter"
)

// help is what `jetflow help NAME` and `jetflow NAME --help` print about a
// command, besides its flags (read from its flag set).
type help struct {
	name     string // "submit", "queue set"
	group    string // the heading `jetflow help` lists it under
	summary  string
	usage    string   // after "jetflow "
	details  string   // more, a paragraph or a few lines
	examples []string // after "jetflow "
	aliases  []string
}

// The groups of `jetflow help`, in order.
var helpGroups = []string{"Engine and workers", "Jobs", "Queues and workers", "Schedules", "Types", "Maintenance", "Other"}

// exitCodes is the exit code table (help, README).
const exitCodes = `Exit codes:
  0  ok (submit --wait, wait, retry --wait, get --watch: the job succeeded)
  1  the job failed or was cancelled; cancel of a job that had already ended
     (nothing to cancel); or the command itself failed
  2  usage error, bad input, unknown job, or no connection
  3  wait --timeout gave up before the job ended
`

var helps = []help{
	{name: "serve", group: "Engine and workers",
		summary: "run the engine: an embedded NATS server (or --nats URL), the HTTP API and the dashboard",
		usage:   "serve [flags]",
		details: `The embedded server keeps its data in --data (one serve per directory) and listens
on --nats-listen; the HTTP API and dashboard listen on --http (127.0.0.1:8080, "off":
none). Beyond loopback the HTTP API needs --auth (tokens: docs/security.md), and
--nats-auth makes the embedded server require a NATS user per role.`,
		examples: []string{"serve --demo", "serve --data /var/lib/jetflow --http 127.0.0.1:9090",
			"serve --nats nats://n1:4222,nats://n2:4222 --http off"}},
	{name: "worker", group: "Engine and workers",
		summary: "run handlers: the demo handlers, or programs as jobs (--exec TYPE=COMMAND)",
		usage:   "worker [--exec TYPE=COMMAND]... [flags]",
		details: `Without --exec it runs the demo handlers (demo.echo, demo.sleep, demo.fail,
demo.fanout, demo:greet). --exec runs each job of TYPE as "bash -c COMMAND" in a private
directory of its own (docs/shell.md); a word of COMMAND that is a relative path of a
file in the directory the worker was started in (./build.sh, or build.sh as an
argument) is made absolute, so the job finds it there.`,
		examples: []string{"worker", "worker --exec report.build='bash build.sh'",
			"worker --queue slow --concurrency 2 --namespace shop"}},
	{name: "bench", group: "Engine and workers",
		summary:  "measure jobs/s and latency, on an embedded server in a temp dir (or --nats URL)",
		usage:    "bench [flags]",
		examples: []string{"bench --jobs 50000 --workers 64", "bench --fanout --jobs 100000", "bench --workflow chain", "bench --workflow wide --jobs 2000 --layers 10", "bench --jobs 5000 --sync always --json", "bench --jobs 20000 --workers 50 --cpu-split"}},

	{name: "submit", group: "Jobs", summary: "submit a job",
		usage: "submit TYPE [JSON] [flags]",
		details: `TYPE is free-form (demo.echo), category:name (resolved in the namespace, then
@global) or scope:category:name. JSON is the payload (default null). --file stores input
files (a directory: its tree) with the job (docs/files.md). When no live worker serves
the type in the queue, a warning says so on stderr. --wait prints each failed attempt
as it happens on stderr, then the job, and exits 0 if it succeeded, 1 if not.
--unique-key (or --unique-fields) makes the job unique: while it holds its key
(--unique-while active|not-succeeded|any, --unique-for at most), a submit of the
key prints this job and "(the job that holds unique key ...)" (docs/unique.md).`,
		examples: []string{`submit demo.echo '{"hello":"world"}' --wait`,
			`submit demo.fail '{"times":2}' --backoff 0 --wait`,
			`submit demo.sleep '{"seconds":5}' --delay 90 --queue slow --user ada`,
			`submit email.send '{"to":"ada@example.com"}' --unique-fields to --unique-for 10m`}},
	{name: "get", group: "Jobs", summary: "show a job: its state, attempts, result or error, progress",
		usage: "get ID [--watch | --at T] [flags]",
		details: `A job of another namespace than --namespace is not found. --watch redraws the job's
line (state, progress bar) until it ends (one line per change when stdout is not a
terminal), then prints it, and exits as wait does. --at T (RFC 3339) shows the job as
it was then, folded from its events in the log (docs/audit.md).`,
		examples: []string{"get 01JD3K2Q4V8ZB7R1X9C0M5T6NA", "get 01JD3K2Q4V8ZB7R1X9C0M5T6NA --watch", "get 01JD3K2Q4V8ZB7R1X9C0M5T6NA --json",
			"get 01JD3K2Q4V8ZB7R1X9C0M5T6NA --at 2026-11-26T14:02:00Z"}},
	{name: "wait", group: "Jobs", summary: "wait until a job has ended; exit 0 if it succeeded",
		usage:    "wait ID [--timeout D] [flags]",
		examples: []string{"wait 01JD3K2Q4V8ZB7R1X9C0M5T6NA", "wait 01JD3K2Q4V8ZB7R1X9C0M5T6NA --timeout 5m"}},
	{name: "ls", group: "Jobs", summary: "list jobs, newest first", aliases: []string{"list"},
		usage: "ls [--state S] [--queue Q] [--type T] [--parent ID] [--id PREFIX] [--tag T] [--error-code C] [--error TEXT] [--payload PATH=VALUE] [--since D] [--limit N] [--cursor C] [flags]",
		details: `At most --limit jobs (default 100); when there are more, a last line says how many
and gives the command of the next page (--cursor). --json prints
{"jobs": [...], "next_cursor": "..."} ("" on the last page).
Search: --id (the id begins with it), --tag, --error-code (the last error's code),
--error (text of the last error, any case), --payload customer=42 (a payload field,
customer.id=42 for a nested one; repeatable, up to 4), --since 1h (finished in the
last hour). Every flag narrows the list.
--at T (RFC 3339) lists the jobs as they were then, folded from the event log, the
most recently moved first, with --namespace, --queue, --type, --state and --limit
(1-1000) only (docs/audit.md).`,
		examples: []string{"ls --state failed", "ls --type demo.echo --limit 20 --json", "ls --state failed --cursor 01JD3K2Q4V8ZB7R1X9C0M5T6NA.1fk3l2m9x0ab",
			"ls --state failed --error-code TIMEOUT --since 1h", "ls --payload customer=42 --tag vip", "ls --at 2026-11-26T14:02:00Z --namespace acme --state running"}},
	{name: "tree", group: "Jobs", summary: "a fan-out parent and its children, with their states",
		usage:    "tree ID [--max N] [flags]",
		examples: []string{"tree 01JD3K2Q4V8ZB7R1X9C0M5T6NA", "tree 01JD3K2Q4V8ZB7R1X9C0M5T6NA --max 10 --json"}},
	{name: "events", group: "Jobs", summary: "a job's history, from the event log",
		usage: "events ID [--follow] [--steps=false] [flags]",
		details: `A workflow's events come with its steps' (not with --follow), in log order, each line
after its step's name ("workflow" for its own; --json adds "step"); --steps=false prints
the workflow's own only.`,
		examples: []string{"events 01JD3K2Q4V8ZB7R1X9C0M5T6NA", "events 01JD3K2Q4V8ZB7R1X9C0M5T6NA --follow", "events 01JD3K2Q4V8ZB7R1X9C0M5T6NA --json"}},
	{name: "tail", group: "Jobs", summary: "follow every job's events live, with filters",
		usage: "tail [--namespace NS] [--queue Q] [--type T] [--since D] [--count N] [flags]",
		details: `Prints each job event as it is appended to the log (the job, its namespace, queue
and type, the event), from now or from --since ago, until interrupted or --count events.
--json prints one event per line. A token follows its namespace's jobs only.`,
		examples: []string{"tail", "tail --queue emails --type email.send", "tail --since 10m --count 100 --json"}},
	{name: "cancel", group: "Jobs", summary: "cancel a job (a running job's handler is stopped at once)",
		usage: "cancel ID [--reason R] [flags]",
		details: `A job that had already ended is left as it is: "job ID already succeeded: nothing to
cancel", exit 1 (--json: the job and "cancelled": false).`,
		examples: []string{"cancel 01JD3K2Q4V8ZB7R1X9C0M5T6NA", `cancel 01JD3K2Q4V8ZB7R1X9C0M5T6NA --reason "wrong input"`}},
	{name: "reprioritize", group: "Jobs", summary: "give a job that has not started another priority",
		usage: "reprioritize ID --priority N [flags]",
		details: `For a job pending, scheduled or queued (a job.reprioritized event). In a queue with
priorities (queue set --priorities) a job still pending takes its new place at once; one
admitted already keeps its place. A job that started or ended is refused (exit 1).`,
		examples: []string{"reprioritize 01JD3K2Q4V8ZB7R1X9C0M5T6NA --priority 100", "reprioritize 01JD3K2Q4V8ZB7R1X9C0M5T6NA --priority -5"}},
	{name: "retry", group: "Jobs", summary: "run a finished job again (a new job with retry_of)",
		usage: "retry ID [--key K] [--failed-pieces] [--wait] [flags]",
		details: `--failed-pieces retries a fan-out's failed (or cancelled, or never finished) pieces
only: the new job's coordinator runs and fans out again, and each piece that succeeded
in ID is carried over as succeeded instead of being made again. The coordinator must
fan out the same pieces in the same order; if its plan differs, every piece runs.`,
		examples: []string{"retry 01JD3K2Q4V8ZB7R1X9C0M5T6NA --wait", "retry 01JD3K2Q4V8ZB7R1X9C0M5T6NA --key retry-1",
			"retry 01JD3K2Q4V8ZB7R1X9C0M5T6NA --failed-pieces --wait"}},
	{name: "bulk", group: "Jobs", summary: "retry, cancel or purge every job a filter selects",
		usage: "bulk retry|cancel|purge [--state S] [--queue Q] [--type T] [--error-code C] [--since D] [... ls's filters] [--failed-pieces] [--dry-run] [--yes] [--reason R] [flags]",
		details: `Selects the jobs as ls does (every page, at most 100000: narrow the filter for more),
says how many and asks for confirmation on a terminal (--yes without one), then changes
them 8 at once with a progress line: each a job's ordinary cancel, retry (a new job with
retry_of) or purge (with its children; an admin token), an event naming the caller.
Skipped: a cancel of a finished job, a retry of a job not finished or retried already, a
purge of a job not finished. retry --failed-pieces runs again only each selected fan-out's
failed pieces (a job that did not fan out, or whose pieces all succeeded, is skipped).
Exit 1 if a change failed. --json prints
{"action", "matched", "changed", "skipped", "failed", "errors"}. Purge by age: jetflow purge.`,
		examples: []string{"bulk retry --state failed --error-code TIMEOUT --since 1h --dry-run", "bulk retry --state failed --queue emails --yes",
			`bulk cancel --state queued --type report.build --reason "bad deploy" --yes`,
			`bulk purge --state failed --type demo.fail --reason "test data" --yes`}},
	{name: "download", group: "Jobs", summary: "download a job's result archive (a zip)",
		usage:    "download ID [-o FILE] [--wait] [flags]",
		examples: []string{"download 01JD3K2Q4V8ZB7R1X9C0M5T6NA", "download 01JD3K2Q4V8ZB7R1X9C0M5T6NA -o out.zip --wait", "download 01JD3K2Q4V8ZB7R1X9C0M5T6NA -o - | unzip -l /dev/stdin"}},

	{name: "workflow", summary: "graphs of steps, each a job: workflow submit, workflow get, workflow retry",
		usage:    "workflow submit FILE [flags] | workflow get ID | workflow retry ID",
		examples: []string{"workflow submit etl.yaml --wait", "workflow get 01JD3K2Q4V8ZB7R1X9C0M5T6NA"}},
	{name: "workflow submit", group: "Jobs", summary: "submit a workflow from a JSON or YAML file (docs/workflows.md)",
		usage: "workflow submit FILE [--key K] [--wait] [flags]",
		details: `FILE ("-": standard input; YAML if it ends in .yaml or .yml) is the body of POST
/api/v1/workflows: {"name", "on_failure", "steps": [{"name", "type", "payload",
"depends_on", ...}]}. The graph is checked before anything is sent: a cycle is named.`,
		examples: []string{"workflow submit etl.yaml", "workflow submit etl.json --key etl-2026-11-26 --wait"}},
	{name: "workflow get", group: "Jobs", summary: "a workflow's steps by layer, with their states",
		usage: "workflow get ID [flags]", examples: []string{"workflow get 01JD3K2Q4V8ZB7R1X9C0M5T6NA", "workflow get 01JD3K2Q4V8ZB7R1X9C0M5T6NA --json"}},
	{name: "workflow retry", group: "Jobs", summary: "resume a failed or cancelled workflow: only what did not succeed runs again",
		usage: "workflow retry ID [flags]", examples: []string{"workflow retry 01JD3K2Q4V8ZB7R1X9C0M5T6NA"}},

	{name: "queues", group: "Queues and workers", summary: "list queues: waiting, running, delayed, paused, limits, pending",
		usage: "queues [flags]", aliases: []string{"queue ls"},
		examples: []string{"queues", "queue ls --json"}},
	{name: "queue", summary: "a queue's settings: queue ls, queue set, queue pause, queue resume",
		usage:    "queue ls | queue set QUEUE [flags] | queue pause QUEUE | queue resume QUEUE",
		examples: []string{"queue ls", "queue set slow --max-running 2 --max-running-per-user 1", "queue pause slow"}},
	{name: "queue set", group: "Queues and workers", summary: "set a queue's limits on running jobs and starts",
		usage: "queue set QUEUE [--max-running N] [--max-running-per-user M] [--max-running-per-key K] [--rate-limit R --rate-period D [--rate-key FROM]] [--priorities] [--max-queued W] [flags]",
		details: `0 removes a limit; a limit not given is kept. Over a limit, jobs wait in pending
and are admitted, round-robin across users and keys, as slots free and as their
rate limit lets them start (docs/quotas.md). --max-running-per-key counts the jobs
of one --concurrency-key (1: one at a time, in submit order); --rate-limit counts
the starts of the queue in any --rate-period, or of each key: --rate-key user,
concurrency_key or payload.<field>. --priorities starts the queue's jobs by
priority (higher first; every 10th start goes to the job pending longest),
keeping at most --max-queued admitted jobs waiting for a worker (default 100).`,
		examples: []string{"queue set slow --max-running 2 --max-running-per-user 1", "queue set slow --max-running 0",
			"queue set mail --rate-limit 100 --rate-period 1m --rate-key payload.domain", "queue set orders --max-running-per-key 1",
			"queue set reports --priorities --max-queued 50"}},
	{name: "pause", group: "Queues and workers", summary: "pause a queue: it accepts jobs and dispatches none",
		usage: "pause QUEUE [flags]", aliases: []string{"queue pause"},
		examples: []string{"pause slow", "queue pause slow --json"}},
	{name: "resume", group: "Queues and workers", summary: "resume a paused queue",
		usage: "resume QUEUE [flags]", aliases: []string{"queue resume"},
		examples: []string{"resume slow", "queue resume slow"}},
	{name: "workers", group: "Queues and workers", summary: "list workers (SDK and HTTP) and their heartbeats",
		usage: "workers [flags]", examples: []string{"workers", "workers --json"}},

	{name: "schedule", summary: "periodic jobs (cron, intervals): schedule create, ls, get, pause, resume, delete",
		usage:    "schedule create NAME TYPE [JSON] (--cron EXPR | --every D) [flags] | schedule ls | schedule get|pause|resume|delete NAME",
		examples: []string{`schedule create nightly report.build '{"full":true}' --cron "0 3 * * *" --timezone Europe/Berlin`, "schedule ls", "schedule get nightly"}},
	{name: "schedule create", group: "Schedules", summary: "create a schedule: a job submitted at each tick of a cron expression or interval",
		usage: "schedule create NAME TYPE [JSON] (--cron EXPR | --every D) [--timezone TZ] [--overlap P] [--misfire P] [--jitter D] [flags]",
		details: `The leading engine fires each tick exactly once, whatever the number of engines
(the tick's job id is derived from the schedule and the tick). JSON is the jobs' payload
(default null). The same create again prints exists; another spec under that name is
refused (exit 1). docs/schedules.md has the guarantees, DST and the policies.`,
		examples: []string{`schedule create nightly report.build '{"full":true}' --cron "0 3 * * *" --timezone Europe/Berlin`,
			"schedule create beat demo.echo --every 30s --overlap allow --misfire skip",
			`schedule create hourly demo.echo --cron @hourly --jitter 5m --queue slow --namespace shop`}},
	{name: "schedule ls", group: "Schedules", summary: "list schedules: timing, state, next run, last run", aliases: []string{"schedule list"},
		usage: "schedule ls [--namespace NS] [flags]", examples: []string{"schedule ls", "schedule ls --namespace shop --json"}},
	{name: "schedule get", group: "Schedules", summary: "show a schedule: its settings, next run and last runs with their jobs",
		usage: "schedule get NAME [--namespace NS] [flags]", examples: []string{"schedule get nightly", "schedule get nightly --namespace shop --json"}},
	{name: "schedule pause", group: "Schedules", summary: "pause a schedule: no tick fires until it is resumed",
		usage: "schedule pause NAME [--namespace NS] [flags]", examples: []string{"schedule pause nightly"}},
	{name: "schedule resume", group: "Schedules", summary: "resume a paused schedule (its ticks count from now)",
		usage: "schedule resume NAME [--namespace NS] [flags]", examples: []string{"schedule resume nightly"}},
	{name: "schedule delete", group: "Schedules", summary: "delete a schedule; the jobs it fired are left as they are",
		usage: "schedule delete NAME [--namespace NS] [flags]", examples: []string{"schedule delete nightly"}},

	{name: "types", group: "Types", summary: "list the registered types visible from a namespace, with their live workers",
		usage:    "types [--namespace NS] [--deleted] [flags]",
		details:  `From a namespace: its own types and @global's; without one: every type.`,
		examples: []string{"types", "types --namespace shop --deleted"}},
	{name: "type", summary: "register a job type: type register",
		usage: "type register FULLNAME [--schema FILE] [--description TEXT]", examples: []string{"type register shop:billing:refund --schema refund.json"}},
	{name: "type register", group: "Types", summary: "register a type with the JSON Schema of its payload",
		usage: "type register FULLNAME [--schema FILE] [--description TEXT] [flags]",
		details: `FULLNAME is scope:category:name (scope: a namespace, @global or @internal). It prints
created, exists or reactivated.`,
		examples: []string{"type register shop:billing:refund --schema refund.json", `type register @global:mail:send --description "send one mail"`}},

	{name: "replay", group: "Maintenance", summary: "rebuild every job from the event log; --verify diffs it against the live state",
		usage: "replay [--verify] [--job ID | --namespace NS | --queue Q | --type T] [--since T] [--until T] [flags]",
		details: `A scope (--job, --namespace, --queue, --type; --since and --until, RFC 3339, instants
the log stored the events) rebuilds, and with --verify compares, only the scope's jobs
(docs/audit.md).`,
		examples: []string{"replay", "replay --verify", "replay --verify --json", "replay --verify --namespace acme --since 2026-11-26T00:00:00Z"}},
	{name: "audit", summary: "the event log's tamper evidence: audit verify, audit pubkey",
		usage: "audit verify [--namespace NS] [--queue Q] [--type T] [--job ID] [--pubkey K] | audit pubkey [--data DIR]", examples: []string{"audit verify --pubkey NABC...", "audit pubkey --data ./jetflow-data"}},
	{name: "audit verify", group: "Maintenance", summary: "check the hash chain and the signed checkpoints of the event log; exit 1 on a finding",
		usage: "audit verify [--namespace NS] [--queue Q] [--type T] [--job ID] [--pubkey K] | --file EXPORT --pubkey K [flags]",
		details: `Names every edited, removed, reordered, inserted and forged event (kind, sequence, job,
subject, what is wrong). What it proves, against whom: docs/audit.md.`,
		examples: []string{"audit verify", "audit verify --job 01JD3K2Q4V8ZB7R1X9C0M5T6NA", "audit verify --pubkey NABC... --json"}},
	{name: "export", group: "Maintenance", summary: "write a verifiable copy of the event log: JSON Lines with the chain and the checkpoints",
		usage: "export [--since T] [--until T] [--namespace NS] [-o FILE] [flags]",
		details: `Events as stored, with their hashes, then the signed checkpoints covering them and the
Merkle inclusion proof of each subject's head. Check it offline with
jetflow audit verify --file FILE --pubkey K. docs/audit.md.`,
		examples: []string{"export --since 2026-11-01 --until 2026-11-26 -o nov.jsonl", "export --namespace shop -o shop.jsonl"}},
	{name: "audit pubkey", group: "Maintenance", summary: "print the public key the engine signs checkpoints with",
		usage: "audit pubkey [--data DIR] [flags]", examples: []string{"audit pubkey --data ./jetflow-data"}},
	{name: "purge", group: "Maintenance", summary: "purge terminal jobs that finished longer ago than --older-than",
		usage:    "purge --older-than D [--namespace NS] [--dry-run] [flags]",
		details:  `serve purges by itself after --retention (7 days); this purges now, whatever the retention.`,
		examples: []string{"purge --older-than 1h --dry-run", "purge --older-than 720h --namespace shop"}},
	{name: "token", summary: "access tokens of the HTTP API and the command service: token create, token ls, token revoke",
		usage:    "token create --namespace NS --role ROLE [flags] | token ls | token revoke ID",
		examples: []string{"token create --namespace acme --role producer", "token ls", "token revoke 01JD3K2Q4V8ZB7R1X9C0M5T6NA"}},
	{name: "token create", group: "Maintenance", summary: "create an access token; it is printed once",
		usage:    "token create --namespace NS --role admin|producer|worker|reader [--ttl D] [--name N] [flags]",
		details:  `NS "*": every namespace. Roles and what they may do: docs/security.md.`,
		examples: []string{"token create --namespace acme --role producer", `token create --namespace '*' --role reader --ttl 720h --name dashboards`}},
	{name: "token ls", group: "Maintenance", summary: "list access tokens (never their secrets)", aliases: []string{"token list"},
		usage: "token ls [flags]", examples: []string{"token ls", "token ls --json"}},
	{name: "token revoke", group: "Maintenance", summary: "revoke an access token",
		usage: "token revoke ID [flags]", examples: []string{"token revoke 01JD3K2Q4V8ZB7R1X9C0M5T6NA"}},

	{name: "version", group: "Other", summary: "print the version of jetflow and of Go it was built with",
		usage: "version [--json]", examples: []string{"version", "--version"}},
	{name: "help", group: "Other", summary: "help about a command", usage: "help [COMMAND [SUBCOMMAND]]",
		examples: []string{"help", "help submit", "help queue set"}},
}

// helpOf is the help of a command name (or an alias).
func helpOf(name string) *help {
	for i := range helps {
		if helps[i].name == name || slices.Contains(helps[i].aliases, name) {
			return &helps[i]
		}
	}
	return nil
}

// printOverview prints `jetflow help`: the commands by group.
func printOverview(w io.Writer) {
	fmt.Fprint(w, "jetflow: an event-sourced job engine on NATS JetStream\n\nUsage: jetflow COMMAND [ARGUMENTS] [flags]\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, g := range helpGroups {
		fmt.Fprintf(tw, "\n%s:\n", g)
		for _, h := range helps {
			if h.group != g {
				continue
			}
			name := h.name
			if len(h.aliases) > 0 {
				name += " (" + strings.Join(h.aliases, ", ") + ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\n", name, h.summary)
		}
		tw.Flush()
	}
	fmt.Fprint(w, `
Global flags, before or after the command (jetflow --json ls, jetflow ls --json):
  --json                 print JSON (errors too: {"error": {"type", "title", "status", "detail", "field"}})
  --nats URL             the NATS system (default nats://127.0.0.1:4222, $JETFLOW_NATS)
  --namespace NS         jobs and types of this namespace ($JETFLOW_NAMESPACE)
  --token T              speak the engine's command service with an access token ($JETFLOW_TOKEN)
  --nats-creds FILE, --nats-user U with --nats-password P, --nats-token T
                         NATS credentials ($JETFLOW_NATS_CREDS, _USER, _PASSWORD, _TOKEN)
Durations are seconds (5, 0.5) or Go durations (5s, 1m30s).

`+exitCodes+`
Run 'jetflow help COMMAND' (or jetflow COMMAND --help) for its flags and examples.
`)
}

// isGlobalFlag: the flags listed apart in a command's help.
func isGlobalFlag(name string) bool {
	_, ok := globalFlags[name]
	return ok && name != "namespace"
}

// secretFlags have defaults (from the environment) that help must not
// print.
var secretFlags = []string{"token", "nats-password", "nats-token"}

// printHelp prints the command's help: summary, usage, details, its flags
// (from its flag set), the global flags it takes, and examples.
func (c *cli) printHelp() {
	w := c.out
	h := helpOf(c.name)
	if h == nil {
		h = &help{name: c.name, usage: c.name + " [flags]"}
	}
	if h.summary != "" {
		fmt.Fprintf(w, "jetflow %s: %s\n\n", h.name, h.summary)
	}
	fmt.Fprintf(w, "Usage:\n  jetflow %s\n", h.usage)
	if h.details != "" {
		fmt.Fprintf(w, "\n%s\n", h.details)
	}
	var own, global []*flag.Flag
	if c.fs != nil {
		c.fs.VisitAll(func(f *flag.Flag) {
			if isGlobalFlag(f.Name) {
				global = append(global, f)
			} else {
				own = append(own, f)
			}
		})
	}
	for _, sec := range []struct {
		title string
		flags []*flag.Flag
	}{{"Flags", own}, {"Global flags (also before the command)", global}} {
		if len(sec.flags) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n%s:\n", sec.title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, f := range sec.flags {
			arg, usage := flagArg(f)
			name := "--" + f.Name
			if arg != "" {
				name += " " + arg
			}
			def := f.DefValue
			if f.Name == "nats" {
				def = redact(def) // from $JETFLOW_NATS, which may hold a password
			}
			if def != "" && def != "0" && def != "false" && def != "0s" && !slices.Contains(secretFlags, f.Name) {
				usage += " (default " + def + ")"
			}
			fmt.Fprintf(tw, "  %s\t%s\n", name, usage)
		}
		tw.Flush()
	}
	if len(h.examples) > 0 {
		fmt.Fprint(w, "\nExamples:\n")
		for _, e := range h.examples {
			fmt.Fprintf(w, "  jetflow %s\n", e)
		}
	}
}

// flagArg is the name of a flag's value in help (none for a bool), and
// its usage without the `name` quotes that give it.
func flagArg(f *flag.Flag) (arg, usage string) {
	arg, usage = flag.UnquoteUsage(f)
	if arg != "value" {
		return arg, usage
	}
	switch f.Value.(type) {
	case *durationValue:
		return "duration", usage
	case *byteSize:
		return "bytes", usage
	case *stringList:
		return "string", usage
	}
	return "value", usage
}

// cmdHelp: jetflow help [COMMAND [SUBCOMMAND]].
func cmdHelp(c *cli, args []string) int {
	var topic []string
	for _, a := range args {
		if _, _, _, isFlag := splitFlag(a); !isFlag {
			topic = append(topic, a)
		}
	}
	if len(topic) == 0 {
		printOverview(c.out)
		return exitOK
	}
	if topic[0] == "help" {
		c.name = "help"
		c.printHelp()
		return exitOK
	}
	f, ok := commandFuncs[topic[0]]
	if !ok {
		c.name = "help"
		c.unknownCommand(topic[0], "")
		return exitUsage
	}
	c.name = topic[0]
	f(c, append(topic[1:], "--help"))
	if !c.helped {
		return exitUsage
	}
	return exitOK
}

// versionInfo is what `jetflow version --json` prints.
type versionInfo struct {
	Version  string `json:"version"`
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// cmdVersion: the module version, the VCS revision and its time when the
// binary was built from a checkout, and the Go version.
func cmdVersion(c *cli, args []string) int {
	fs := c.flags()
	fs.BoolVar(&c.json, "json", false, "print JSON")
	if _, ok := c.parse(args, 0, 0); !ok {
		return exitUsage
	}
	v := versionInfo{Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			v.Version = bi.Main.Version
		}
		v.Go = bi.GoVersion
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	if c.json {
		c.printJSON(v)
		return exitOK
	}
	fmt.Fprintf(c.out, "jetflow %s\n", v.Version)
	if v.Revision != "" {
		mod := ""
		if v.Modified {
			mod = " (modified)"
		}
		fmt.Fprintf(c.out, "  revision  %s%s\n", v.Revision, mod)
	}
	if v.Time != "" {
		fmt.Fprintf(c.out, "  committed %s\n", v.Time)
	}
	fmt.Fprintf(c.out, "  go        %s %s\n", v.Go, v.Platform)
	return exitOK
}
