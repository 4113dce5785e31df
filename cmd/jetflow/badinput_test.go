package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
)

// written is what the system holds: jobs and events.
func (e *cliEnv) written() (jobs int, lastSeq uint64) {
	e.t.Helper()
	ctx := testkit.Ctx(e.t)
	list, err := e.cl.List(ctx, jetflow.ListFilter{})
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := testkit.StoreOf(e.t, e.cl).Events.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	return len(list), info.State.LastSeq
}

// runBounded runs the CLI; a command that was accepted and keeps running
// (serve, worker, bench) fails the test instead of hanging it.
func runBounded(t *testing.T, args []string) (stderr string, code int) {
	t.Helper()
	var out, errb testkit.SyncBuffer
	done := make(chan int, 1)
	go func() { done <- run(args, &out, &errb) }()
	select {
	case code = <-done:
		return errb.String(), code
	case <-time.After(20 * time.Second):
		t.Fatalf("%v was accepted and still runs; stderr:\n%s", args, errb.String())
		return "", 0
	}
}

// Every flag value out of range of every command is refused with exit 2
// and a message naming the flag, before anything is written.
func TestCLIRefusesBadFlagValues(t *testing.T) {
	e := newCLIEnv(t)
	id := domain.NewID()
	data := t.TempDir() // serve's store: it must stay empty
	serve := func(args ...string) []string {
		return append([]string{"serve", "--data", data, "--nats-listen", "127.0.0.1:0", "--http", "127.0.0.1:0"}, args...)
	}
	client := func(args ...string) []string { return append([]string{args[0], "--nats", e.url}, args[1:]...) }
	worker := func(args ...string) []string { return client(append([]string{"worker"}, args...)...) }
	bench := func(args ...string) []string { return append([]string{"bench"}, args...) }
	long := strings.Repeat("k", 257)
	tags := []string{"submit", "demo.echo"}
	for range 33 {
		tags = append(tags, "--tag", "t")
	}
	jobsBefore, seqBefore := e.written()
	for _, tc := range []struct {
		args []string
		want string // in stderr: the flag, and for some the whole message
	}{
		{client("submit", "demo.echo", "--max-retries", "-1"), "jetflow submit: --max-retries -1: must be 0-1000"},
		{client("submit", "demo.echo", "--max-retries", "1001"), "jetflow submit: --max-retries 1001: must be 0-1000"},
		{client("submit", "demo.echo", "--max-retries", "many"), "-max-retries"},
		{client("submit", "demo.echo", "--backoff", "-1s"), "jetflow submit: --backoff -1s: must not be negative"},
		{client("submit", "demo.echo", "--timeout", "0"), "jetflow submit: --timeout 0s: must be more than 0"},
		{client("submit", "demo.echo", "--timeout", "-5s"), "jetflow submit: --timeout -5s: must not be negative"},
		{client("submit", "demo.echo", "--delay", "-1s"), "jetflow submit: --delay -1s: must not be negative"},
		{client("submit", "demo.echo", "--queue", ""), `jetflow submit: --queue "": must not be empty`},
		{client("submit", "demo.echo", "--queue", "a.b"), `jetflow submit: --queue "a.b": want 1-64 of [A-Za-z0-9_-]`},
		{client("submit", "demo.echo", "--key", ""), `--key "": must not be empty`},
		{client("submit", "demo.echo", "--key", long), "--key"},
		{client("submit", "demo.echo", "--tag", ""), `jetflow submit: --tag "": want 1-128 bytes without control characters`},
		{client(tags...), "--tag"},
		{client("submit", "demo.echo", "--nats", ""), `--nats "": must not be empty`},
		{client("wait", id, "--timeout", "-1s"), "jetflow wait: --timeout -1s: must not be negative"},
		{client("ls", "--limit", "-1"), "jetflow ls: --limit -1: must be 0 (all) or more"},
		{client("ls", "--state", "sleeping"), `jetflow ls: --state: "sleeping" is not a state`},
		{client("ls", "--state", ""), `--state "": must not be empty`},
		{client("ls", "--queue", ""), `--queue "": must not be empty`},
		{client("ls", "--queue", "a.b"), `jetflow ls: --queue: "a.b" is not a queue name`},
		{client("ls", "--type", ""), `--type "": must not be empty`},
		{client("ls", "--type", "a b"), `jetflow ls: --type: "a b" is not a job type`},
		{client("ls", "--parent", ""), `--parent "": must not be empty`},
		{client("ls", "--parent", "nope"), `jetflow ls: --parent: "nope" is not a job id`},
		{client("cancel", id, "--reason", strings.Repeat("r", 1025)), "jetflow cancel: --reason"},
		{client("tree", id, "--max", "-1"), "jetflow tree: --max -1: must be 0 or more"},
		{client("reprioritize", id), "jetflow reprioritize: --priority is required"},
		{client("reprioritize", id, "--priority", "1001"), "jetflow reprioritize: --priority 1001: must be -1000 to 1000"},
		{client("retry", id, "--key", ""), `jetflow retry: --key "": must not be empty`},
		{client("replay", "--verify", "--settle", "-1s"), "jetflow replay: --settle -1s: must not be negative"},
		{client("replay", "--settle", "1s"), "jetflow replay: --settle 1s: only with --verify"},
		{client("get", id, "--nats", ""), `jetflow get: --nats "": must not be empty`},
		{client("events", id, "--nats", ""), "--nats"},
		{client("queues", "--nats", ""), "--nats"},
		{client("workers", "--nats", ""), "--nats"},
		{client("pause", "default", "--nats", ""), "--nats"},
		{client("queue", "set", "q", "--max-running", "-1"), "jetflow queue set: --max-running -1: must be 0 (no limit) to 1000000"},
		{client("queue", "set", "q", "--max-running-per-user", "1000001"), "jetflow queue set: --max-running-per-user 1000001: must be 0 (no limit) to 1000000"},
		{client("queue", "set", "q"), "give one or more of --max-running, --max-running-per-user, --max-running-per-key, --rate-limit"},
		{client("queue", "set", "q", "--max-running-per-key", "-1"), "jetflow queue set: --max-running-per-key -1: must be 0 (no limit) to 1000000"},
		{client("queue", "set", "q", "--rate-limit", "-3"), "jetflow queue set: --rate-limit -3: must be 0 (no limit) to 1000000"},
		{client("queue", "set", "q", "--rate-period", "soon"), "jetflow queue set: --rate-period"},
		{client("queue", "set", "q", "--rate-limit", "5"), "jetflow queue set: --rate-period"},
		{client("queue", "set", "q", "--rate-limit", "5", "--rate-period", "100ms"), "jetflow queue set: --rate-period 100ms: must be from 1s to 24h0m0s"},
		{client("queue", "set", "q", "--rate-limit", "5", "--rate-period", "1s", "--rate-key", "customer"), `jetflow queue set: --rate-key "customer"`},
		{client("submit", "demo.echo", "--concurrency-key", strings.Repeat("k", 257)), "jetflow submit: --concurrency-key"},
		{client("submit", "demo.echo", "--unique-key", "k", "--unique-fields", "a"), "jetflow submit: --unique-fields"},
		{client("submit", "demo.echo", "--unique-key", "k", "--unique-while", "sometimes"), `jetflow submit: --unique-while "sometimes"`},
		{client("submit", "demo.echo", "--unique-key", "k", "--unique-for", "9000h"), "jetflow submit: --unique-for 9000h0m0s"},
		{client("submit", "demo.echo", "--unique-fields", "a b"), `jetflow submit: --unique-fields "a b"`},
		{client("submit", "demo.echo", "--unique-for", "1m"), "jetflow submit: --unique-for"},
		{bench("--max-running-per-key", "-1"), "jetflow bench: --max-running-per-key -1: must be 0 to 1000000"},
		{bench("--keys", "-1"), "jetflow bench: --keys -1: must be 0 to 100000"},
		{bench("--rate-limit", "-1"), "jetflow bench: --rate-limit -1: must be 0 to 1000000"},
		{client("queue", "frob", "q"), `unknown subcommand "frob"`},
		{client("queue", "set", "a.b", "--max-running", "1"), `"a.b"`},
		{client("submit", "demo.echo", "--user", "a\x01b"), "jetflow submit: --user"},
		{client("submit", "demo.echo", "--user", strings.Repeat("u", 129)), "--user"},
		{bench("--max-running", "-1"), "jetflow bench: --max-running -1: must be 0 to 1000000"},
		{bench("--max-running-per-user", "-2"), "--max-running-per-user -2"},
		{bench("--users", "0"), "jetflow bench: --users 0: must be 1 to 100000"},
		{bench("--fanout", "--max-running", "2"), "jetflow bench: --max-running 2: not with --fanout"},
		{serve("--data", ""), `jetflow serve: --data "": must not be empty`},
		{serve("--nats-listen", "nowhere"), `jetflow serve: --nats-listen "nowhere": want HOST:PORT`},
		{serve("--nats-listen", "127.0.0.1:70000"), "--nats-listen"},
		{serve("--sync", "0s"), `jetflow serve: --sync "0s": want "always" or a duration over 0`},
		{serve("--sync", "never"), "--sync"},
		{serve("--replicas", "-1"), "jetflow serve: --replicas -1: must be 0"},
		{serve("--replicas", "6"), "--replicas 6"},
		{serve("--replicas", "3"), "jetflow serve: --replicas 3: the embedded server is one node"},
		{serve("--projector-lag", "0"), "jetflow serve: --projector-lag 0s: must be more than 0"},
		{serve("--projector-lag", "-1s"), "--projector-lag -1s"},
		{serve("--demo", "--concurrency", "0"), "jetflow serve: --concurrency 0: must be 1 or more"},
		{serve("--concurrency", "5"), "jetflow serve: --concurrency 5: only with --demo"},
		{serve("--http", "nowhere"), `jetflow serve: --http "nowhere": want HOST:PORT, or "off"`},
		{serve("--http-origin", "not an origin"), `jetflow serve: --http-origin "not an origin": want an origin`},
		{serve("--http-max-body", "0"), "jetflow serve: --http-max-body 0: must be 1 or more"},
		{serve("--http-max-body", "-1"), "--http-max-body -1"},
		{serve("--http-max-streams", "0"), "jetflow serve: --http-max-streams 0: must be 1 or more"},
		{serve("--http", "off", "--http-max-streams", "5"), "--http-max-streams 5: only with the HTTP API"},
		{serve("--http", "off", "--http-origin", "https://ops.example.com"), "--http-origin"},
		{[]string{"serve", "--http", "off", "--nats", e.url, "--sync", "always"}, `jetflow serve: --sync "always": only with the embedded server`},
		{[]string{"serve", "--http", "off", "--nats", e.url, "--data", data}, `jetflow serve: --data`},
		{[]string{"serve", "--http", "off", "--nats", e.url, "--nats-listen", "127.0.0.1:0"}, `jetflow serve: --nats-listen`},
		{[]string{"serve", "--http", "off", "--nats", ""}, `jetflow serve: --nats "": must not be empty`},
		{worker("--concurrency", "0"), "jetflow worker: --concurrency 0: must be 1 or more"},
		{worker("--concurrency", "-1"), "--concurrency -1"},
		{worker("--lease", "0"), "jetflow worker: --lease 0s: must be at least 300ms"},
		{worker("--lease", "1ns"), "--lease 1ns"},
		{worker("--lease", "299ms"), "--lease 299ms: must be at least 300ms"},
		{worker("--grace", "0"), "jetflow worker: --grace 0s: must be more than 0"},
		{worker("--grace", "-1s"), "--grace -1s"},
		{worker("--id", ""), `jetflow worker: --id "": must not be empty`},
		{bench("--jobs", "0"), "jetflow bench: --jobs 0: must be 1 or more"},
		{bench("--workers", "0"), "jetflow bench: --workers 0: must be 1 or more"},
		{bench("--batch", "-1"), "jetflow bench: --batch -1: must be 1 or more"},
		{bench("--rate", "-1"), "jetflow bench: --rate -1: must be 0 (no latency phase) to 1000000"},
		{bench("--rate", "2000000"), "--rate 2000000"},
		{bench("--latency-duration", "0"), "jetflow bench: --latency-duration 0s: must be more than 0"},
		{bench("--rate", "0", "--latency-duration", "1s"), "--latency-duration 1s: not with --rate 0"},
		{bench("--sync", "0s"), "jetflow bench: --sync"},
		{bench("--fanout", "--batch", "10"), "jetflow bench: --batch 10: not with --fanout"},
		{bench("--fanout", "--jobs", "2000000"), "--jobs 2000000: must be at most"},
		{bench("--cpuprofile", ""), `jetflow bench: --cpuprofile "": must not be empty`},
		{bench("--nats", e.url, "--sync", "1s"), "jetflow bench: --sync \"1s\": only with the embedded server"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			stderr, code := runBounded(t, tc.args)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Fatalf("stderr does not say %q:\n%s", tc.want, stderr)
			}
		})
	}
	if jobs, seq := e.written(); jobs != jobsBefore || seq != seqBefore {
		t.Fatalf("refused commands wrote %d jobs, %d events", jobs-jobsBefore, seq-seqBefore)
	}
	if ents, err := os.ReadDir(data); err != nil || len(ents) != 0 {
		t.Fatalf("refused serve commands wrote %d entries in the store (%v)", len(ents), err)
	}
}

// Valid values that are also a flag's zero are taken as given, not
// replaced by a default: --max-retries 0, --backoff 0, --limit 0, --max 0,
// --settle 0, wait --timeout 0.
func TestCLITakesExplicitZeros(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("submit", "demo.echo", `{"z":0}`, "--max-retries", "0", "--backoff", "0", "--delay", "0",
		"--queue", "default", "--timeout", "30s", "--json", "--wait")
	var j jetflow.JobInfo
	if code != exitOK || json.Unmarshal([]byte(out), &j) != nil {
		t.Fatalf("submit: exit %d %q %s", code, out, errs)
	}
	if j.MaxRetries != 0 || j.BackoffSeconds != 0 || j.TimeoutSeconds != 30 || j.Queue != "default" {
		t.Fatalf("explicit values not taken: %+v", j)
	}
	// Left out, the engine's defaults apply.
	out, _, _ = e.jetflow("submit", "demo.echo", "--json")
	if json.Unmarshal([]byte(out), &j) != nil || j.MaxRetries != 3 || j.BackoffSeconds != 30 || j.TimeoutSeconds != 3600 {
		t.Fatalf("defaults: %q", out)
	}
	if out, errs, code := e.jetflow("ls", "--limit", "0", "--json"); code != exitOK || strings.Count(out, `"id"`) != 2 {
		t.Fatalf("ls --limit 0: %d %q %s", code, out, errs)
	}
	if _, errs, code := e.jetflow("wait", j.ID, "--timeout", "0"); code != exitOK {
		t.Fatalf("wait --timeout 0: %d %s", code, errs)
	}
	if out, errs, code := e.jetflow("tree", j.ID, "--max", "0"); code != exitOK || !strings.Contains(out, j.ID) {
		t.Fatalf("tree --max 0: %d %q %s", code, out, errs)
	}
	var out2, errb bytes.Buffer
	if code := run([]string{"replay", "--nats", e.url, "--verify", "--settle", "0"}, &out2, &errb); code != exitOK {
		t.Fatalf("replay --verify --settle 0: %d %s %s", code, out2.String(), errb.String())
	}
}

// The Go SDK refuses an option out of range alike, with an error matching
// ErrInvalidInput that names the field, before anything is written; the
// CLI is its client.
func TestSDKRefusesBadOptions(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testkit.Ctx(t)
	jobsBefore, seqBefore := e.written()
	for _, tc := range []struct {
		field string
		opt   jetflow.SubmitOption
	}{
		{"max_retries", jetflow.MaxRetries(-1)},
		{"max_retries", jetflow.MaxRetries(1001)},
		{"max_lease_requeues", jetflow.MaxLeaseRequeues(-1)},
		{"backoff", jetflow.Backoff(-time.Second)},
		{"backoff_cap", jetflow.BackoffCap(-time.Second)},
		{"jitter", jetflow.Jitter(math.NaN())},
		{"jitter", jetflow.Jitter(1.5)},
		{"timeout", jetflow.Timeout(0)},
		{"delay", jetflow.Delay(-time.Second)},
		{"priority", jetflow.Priority(1 << 40)},
		{"queue", jetflow.Queue("a.b")},
		{"tags", jetflow.Tags("")},
		{"retry_on", jetflow.RetryOn("")},
		{"no_retry_on", jetflow.NoRetryOn(strings.Repeat("c", 129))},
		{"parent", jetflow.Parent("nope")},
	} {
		_, err := e.cl.Submit(ctx, "demo.echo", nil, tc.opt)
		var in *commands.InputError
		if !errors.Is(err, jetflow.ErrInvalidInput) || !errors.As(err, &in) || in.Field != tc.field {
			t.Errorf("%s: %v, want an InputError of %s", tc.field, err, tc.field)
		}
		if _, err := jetflow.Children("demo.echo", []any{1, 2}, tc.opt); !errors.Is(err, commands.ErrInvalidInput) {
			t.Errorf("children with a bad %s: %v", tc.field, err)
		}
	}
	if jobs, seq := e.written(); jobs != jobsBefore || seq != seqBefore {
		t.Fatalf("refused submits wrote %d jobs, %d events", jobs-jobsBefore, seq-seqBefore)
	}
}
