package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/testkit"
)

// file writes content to a file of the test's temp dir and returns its path.
func file(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// compact is JSON without spaces.
func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// runCLI runs the CLI with args exactly as given (the caller places
// --nats).
func runCLI(args ...string) (stdout, stderr string, code int) {
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// jetflow type register: created, exists, reactivated; a schema that
// conflicts or is not one is exit 1 with its problem; a bad name, file or
// description is exit 2 naming it. Nothing refused writes anything.
func TestCLITypeRegister(t *testing.T) {
	e := newCLIEnv(t)
	schema := file(t, "invoice.json", `{"type": "object", "required": ["amount"], "properties": {"amount": {"type": "number"}}}`)
	// The same schema, keys in another order and spaced otherwise.
	same := file(t, "same.json", `{"properties":{"amount":{"type":"number"}},"required":["amount"],"type":"object"}`)
	other := file(t, "other.json", `{"type": "object", "required": ["total"]}`)
	notSchema := file(t, "bad.json", `{"type": 5}`)
	notJSON := file(t, "broken.json", `{"type": `)
	reg := func(args ...string) []string {
		return append([]string{"type", "register", "--nats", e.url}, args...)
	}
	// Soft-deleted (as the leader's sweeper does) between steps.
	del := func(full string) func() {
		return func() {
			n, err := commands.ParseTypeName(full)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := testkit.StoreOf(t, e.cl).Types.Delete(testkit.Ctx(t), n, "test", "test", nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name     string
		before   func()
		args     []string
		code     int
		stdout   string
		stderr   string
		writes   bool // appends an event
		wantDesc string
	}{
		{name: "new", args: reg("default:billing:invoice", "--schema", schema, "--description", "an invoice"),
			stdout: "default:billing:invoice\tcreated\n", writes: true, wantDesc: "an invoice"},
		{name: "same schema again", args: reg("default:billing:invoice", "--schema", same),
			stdout: "default:billing:invoice\texists\n", wantDesc: "an invoice"},
		{name: "no schema: no opinion", args: reg("default:billing:invoice"),
			stdout: "default:billing:invoice\texists\n", wantDesc: "an invoice"},
		{name: "another schema", args: reg("default:billing:invoice", "--schema", other), code: exitFailed,
			stderr: "jetflow type register: schema-conflict: type default:billing:invoice is registered with another schema " +
				"(delete it, or register it under another name): schema conflict\n"},
		{name: "reactivated with another schema", before: del("default:billing:invoice"),
			args:   reg("default:billing:invoice", "--schema", other, "--description", "v2"),
			stdout: "default:billing:invoice\treactivated\n", writes: true, wantDesc: "v2"},
		{name: "@global, no schema", args: reg("@global:mail:send"), stdout: "@global:mail:send\tcreated\n", writes: true},
		{name: "not a JSON Schema", args: reg("default:billing:refund", "--schema", notSchema), code: exitFailed,
			stderr: "jetflow type register: invalid-schema: schema: "},
		{name: "not JSON", args: reg("default:billing:refund", "--schema", notJSON), code: exitFailed,
			stderr: "jetflow type register: invalid-schema: schema is not JSON: "},
		{name: "two parts", args: reg("billing:invoice"), code: exitUsage,
			stderr: "jetflow type register: FULLNAME \"billing:invoice\": want scope:category:name\n"},
		{name: "four parts", args: reg("a:b:c:d"), code: exitUsage,
			stderr: "jetflow type register: FULLNAME \"a:b:c:d\": want scope:category:name\n"},
		{name: "bad scope", args: reg("@elsewhere:b:c"), code: exitUsage,
			stderr: "jetflow type register: FULLNAME \"@elsewhere:b:c\": scope \"@elsewhere\": want 1-64 of [A-Za-z0-9_-], no '@' or ':'\n"},
		{name: "bad category", args: reg("default:a b:c"), code: exitUsage,
			stderr: "jetflow type register: FULLNAME \"default:a b:c\": category \"a b\": want 1-64 of [A-Za-z0-9_-.], no ':' or '@'\n"},
		{name: "empty name", args: reg("default:billing:"), code: exitUsage,
			stderr: "jetflow type register: FULLNAME \"default:billing:\": name \"\": want 1-64 of [A-Za-z0-9_-.], no ':' or '@'\n"},
		{name: "no such file", args: reg("default:billing:x", "--schema", "/nonexistent/s.json"), code: exitUsage,
			stderr: "jetflow type register: --schema /nonexistent/s.json: open /nonexistent/s.json: no such file or directory\n"},
		{name: "empty --schema", args: reg("default:billing:x", "--schema", ""), code: exitUsage,
			stderr: "jetflow type register: --schema \"\": must not be empty (leave it out for any payload)\n"},
		{name: "description too long", args: reg("default:billing:x", "--description", strings.Repeat("d", 1025)), code: exitUsage,
			stderr: "jetflow type register: --description \"" + strings.Repeat("d", 31) + "…: 1025 bytes: at most 1024\n"},
		{name: "no name", args: []string{"type", "register", "--nats", e.url}, code: exitUsage,
			stderr: "jetflow type register: want: jetflow type register FULLNAME [--schema FILE] [--description TEXT]; got: type register\n"},
		{name: "no subcommand", args: []string{"type", "--nats", e.url, "default:a:b"}, code: exitUsage,
			stderr: "jetflow type: want: jetflow type register FULLNAME [--schema FILE] [--description TEXT]; got: type default:a:b\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			_, seq := e.written()
			out, errs, code := runCLI(tc.args...)
			if code != tc.code || out != tc.stdout || !strings.HasPrefix(errs, tc.stderr) || (tc.stderr == "" && errs != "") {
				t.Fatalf("exit %d, stdout %q, stderr %q\nwant exit %d, stdout %q, stderr %q", code, out, errs, tc.code, tc.stdout, tc.stderr)
			}
			if _, after := e.written(); (after > seq) != tc.writes {
				t.Fatalf("%d events appended", after-seq)
			}
			if tc.wantDesc != "" {
				info, err := e.cl.Type(testkit.Ctx(t), "default:billing:invoice")
				if err != nil || info.Description != tc.wantDesc || info.Deleted {
					t.Fatalf("type %+v %v", info, err)
				}
			}
		})
	}
	// --json: the type and the outcome.
	out, errs, code := runCLI(reg("default:billing:invoice", "--json")...)
	var got struct {
		FullName string          `json:"full_name"`
		Schema   json.RawMessage `json:"schema"`
		Outcome  string          `json:"outcome"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("--json: exit %d %q %q", code, out, errs)
	}
	if got.FullName != "default:billing:invoice" || got.Outcome != "exists" || compact(t, got.Schema) != `{"required":["total"],"type":"object"}` {
		t.Fatalf("--json: %+v", got)
	}
}

// jetflow types: the types visible from a namespace (every type without
// one), with their live workers, soft-deleted ones with --deleted.
func TestCLITypes(t *testing.T) {
	e := newCLIEnv(t)
	ctx := testkit.Ctx(t)
	// The demo worker registered default:demo:greet with its payload's schema.
	for _, full := range []string{"billing:pay:card", "@global:mail:send", "default:old:gone"} {
		if _, _, err := e.cl.RegisterType(ctx, full, nil, "a "+full); err != nil {
			t.Fatal(err)
		}
	}
	n, _ := commands.ParseTypeName("default:old:gone")
	if _, err := testkit.StoreOf(t, e.cl).Types.Delete(ctx, n, "test", "test", nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		env    string // JETFLOW_NAMESPACE
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "every type", args: []string{"types"}, stdout: "" +
			"TYPE                STATUS  LIVE WORKERS  SCHEMA  DESCRIPTION\n" +
			"@global:mail:send   active  0             any     a @global:mail:send\n" +
			"billing:pay:card    active  0             any     a billing:pay:card\n" +
			"default:demo:greet  active  1             yes     \n"},
		{name: "deleted too", args: []string{"types", "--deleted"}, stdout: "" +
			"TYPE                STATUS   LIVE WORKERS  SCHEMA  DESCRIPTION\n" +
			"@global:mail:send   active   0             any     a @global:mail:send\n" +
			"billing:pay:card    active   0             any     a billing:pay:card\n" +
			"default:demo:greet  active   1             yes     \n" +
			"default:old:gone    deleted  0             any     a default:old:gone\n"},
		{name: "from billing", args: []string{"types", "--namespace", "billing"}, stdout: "" +
			"TYPE               STATUS  LIVE WORKERS  SCHEMA  DESCRIPTION\n" +
			"@global:mail:send  active  0             any     a @global:mail:send\n" +
			"billing:pay:card   active  0             any     a billing:pay:card\n"},
		{name: "from billing by the environment", env: "billing", args: []string{"types"}, stdout: "" +
			"TYPE               STATUS  LIVE WORKERS  SCHEMA  DESCRIPTION\n" +
			"@global:mail:send  active  0             any     a @global:mail:send\n" +
			"billing:pay:card   active  0             any     a billing:pay:card\n"},
		{name: "the flag over the environment", env: "billing", args: []string{"types", "--namespace", "empty-ns"}, stdout: "" +
			"TYPE               STATUS  LIVE WORKERS  SCHEMA  DESCRIPTION\n" +
			"@global:mail:send  active  0             any     a @global:mail:send\n"},
		{name: "bad namespace", args: []string{"types", "--namespace", "a:b"}, code: exitUsage,
			stderr: "jetflow types: --namespace \"a:b\": want 1-64 of [A-Za-z0-9_-], no '@' or ':'\n"},
		{name: "bad namespace in the environment", env: "@global", args: []string{"types"}, code: exitUsage,
			stderr: "jetflow types: $JETFLOW_NAMESPACE \"@global\": want 1-64 of [A-Za-z0-9_-], no '@' or ':'\n"},
		{name: "empty namespace", args: []string{"types", "--namespace", ""}, code: exitUsage,
			stderr: "jetflow types: --namespace \"\": must not be empty (leave it out for every namespace)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envNamespace, tc.env)
			out, errs, code := e.jetflow(tc.args...)
			if code != tc.code || out != tc.stdout || errs != tc.stderr {
				t.Fatalf("exit %d, stdout:\n%s\nstderr %q\nwant exit %d, stdout:\n%s\nstderr %q", code, out, errs, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
	// --json: each type with its live workers' ids.
	out, _, code := e.jetflow("types", "--json")
	var rows []struct {
		FullName    string          `json:"full_name"`
		Schema      json.RawMessage `json:"schema"`
		Deleted     bool            `json:"deleted"`
		LiveWorkers []string        `json:"live_workers"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 3 {
		t.Fatalf("--json: exit %d %s", code, out)
	}
	workers, err := e.cl.Workers(ctx)
	if err != nil || len(workers) != 1 {
		t.Fatalf("workers %v %v", workers, err)
	}
	if g := rows[2]; g.FullName != "default:demo:greet" || len(g.LiveWorkers) != 1 || g.LiveWorkers[0] != workers[0].ID ||
		!strings.Contains(compact(t, g.Schema), `"required":["name"]`) {
		t.Fatalf("greet: %+v", g)
	}
	if g := rows[0]; g.FullName != "@global:mail:send" || g.LiveWorkers == nil || len(g.LiveWorkers) != 0 || string(g.Schema) != "null" {
		t.Fatalf("mail: %+v", g)
	}
	// replay --verify rebuilds the registry from the log too.
	out, errs, code := e.jetflow("replay", "--verify", "--settle", "0")
	if code != exitOK || !strings.HasSuffix(out, " records, 4 types, namespaces, tokens and queue limits, and 0 schedules: 0 differ\n") {
		t.Fatalf("replay --verify: exit %d %q %q", code, out, errs)
	}
}

// --namespace (or $JETFLOW_NAMESPACE) on submit, ls, get and events: a job
// of another namespace is not found, as an unknown id is.
func TestCLINamespaces(t *testing.T) {
	e := newCLIEnv(t)
	t.Setenv(envNamespace, "")
	submit := func(args ...string) *jetflow.JobInfo {
		t.Helper()
		out, errs, code := e.jetflow(append([]string{"submit"}, append(args, "--json")...)...)
		var j jetflow.JobInfo
		if code != exitOK || json.Unmarshal([]byte(out), &j) != nil {
			t.Fatalf("submit %v: exit %d %q", args, code, errs)
		}
		return &j
	}
	billing := submit("demo.echo", `{"n":1}`, "--namespace", "billing", "--wait")
	plain := submit("demo.echo", `{"n":2}`, "--wait")
	t.Setenv(envNamespace, "billing")
	byEnv := submit("demo.echo", `{"n":3}`, "--wait")
	t.Setenv(envNamespace, "")
	for j, ns := range map[*jetflow.JobInfo]string{billing: "billing", plain: "default", byEnv: "billing"} {
		if j.Namespace != ns || j.State != jetflow.Succeeded {
			t.Fatalf("job %s: namespace %q, %s; want %s", j.ID, j.Namespace, j.State, ns)
		}
	}
	// A category:name type resolves in the job's namespace: demo:greet is
	// the demo worker's, in default; billing has none.
	greet := submit("demo:greet", `{"name":"Ada"}`, "--wait")
	if greet.Type != "default:demo:greet" || string(greet.Result) != `"hello Ada"` {
		t.Fatalf("greet: %s %s", greet.Type, greet.Result)
	}

	_, seq := e.written()
	for _, tc := range []struct {
		name   string
		env    string
		args   []string
		code   int
		stdout string // "" with code 0: checked below
		stderr string
	}{
		{name: "get: another namespace", args: []string{"get", plain.ID, "--namespace", "billing"}, code: exitUsage,
			stderr: "jetflow get: job " + plain.ID + " in namespace billing: not found\n"},
		{name: "get: an unknown id in a namespace", args: []string{"get", "01ARZ3NDEKTSV4RRFFQ69G5FAV", "--namespace", "billing"}, code: exitUsage,
			stderr: "jetflow get: job 01ARZ3NDEKTSV4RRFFQ69G5FAV in namespace billing: not found\n"},
		{name: "get: another namespace by the environment", env: "default", args: []string{"get", billing.ID}, code: exitUsage,
			stderr: "jetflow get: job " + billing.ID + " in namespace default: not found\n"},
		{name: "events: another namespace", args: []string{"events", billing.ID, "--namespace", "default"}, code: exitUsage,
			stderr: "jetflow events: job " + billing.ID + " in namespace default: not found\n"},
		{name: "events --follow: another namespace", args: []string{"events", billing.ID, "--follow", "--namespace", "default"}, code: exitUsage,
			stderr: "jetflow events: job " + billing.ID + " in namespace default: not found\n"},
		{name: "ls: bad namespace", args: []string{"ls", "--namespace", "a@b"}, code: exitUsage,
			stderr: "jetflow ls: --namespace \"a@b\": want 1-64 of [A-Za-z0-9_-], no '@' or ':'\n"},
		{name: "submit: bad namespace", args: []string{"submit", "demo.echo", "--namespace", "x:y"}, code: exitUsage,
			stderr: "jetflow submit: --namespace \"x:y\": want 1-64 of [A-Za-z0-9_-], no '@' or ':'\n"},
		{name: "submit: bad namespace in the environment", env: "x:y", args: []string{"submit", "demo.echo"}, code: exitUsage,
			stderr: "jetflow submit: $JETFLOW_NAMESPACE \"x:y\": want 1-64 of [A-Za-z0-9_-], no '@' or ':'\n"},
		{name: "submit: a payload the schema refuses", args: []string{"submit", "demo:greet", `{"name": 5}`}, code: exitUsage,
			stderr: "jetflow submit: schema-violation: payload does not satisfy the schema of default:demo:greet\n" +
				"  /name: got number, want string\n"},
		{name: "submit: category:name unknown in the namespace", args: []string{"submit", "demo:greet", `{"name":"Ada"}`, "--namespace", "billing"},
			code: exitUsage, stderr: "jetflow submit: unknown-type: type demo:greet: no active type billing:demo:greet or @global:demo:greet: unknown type\n"},
		{name: "submit: another namespace's full name", args: []string{"submit", "default:demo:greet", `{"name":"Ada"}`, "--namespace", "billing"},
			code: exitUsage, stderr: "jetflow submit: unknown-type: type default:demo:greet: not visible from namespace billing: unknown type\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(envNamespace, tc.env)
			out, errs, code := e.jetflow(tc.args...)
			if code != tc.code || out != tc.stdout || errs != tc.stderr {
				t.Fatalf("exit %d, stdout %q, stderr %q\nwant exit %d, stdout %q, stderr %q", code, out, errs, tc.code, tc.stdout, tc.stderr)
			}
		})
	}
	if _, after := e.written(); after != seq {
		t.Fatalf("refused commands appended %d events", after-seq)
	}

	// What a namespace shows: get and events of its own jobs, ls of its jobs only.
	for _, args := range [][]string{{"get", billing.ID, "--namespace", "billing"}, {"events", billing.ID, "--namespace", "billing"}} {
		if out, errs, code := e.jetflow(args...); code != exitOK || !strings.Contains(out, billing.ID) && !strings.Contains(out, "job.succeeded") {
			t.Fatalf("%v: exit %d %q %q", args, code, out, errs)
		}
	}
	out, _, code := e.jetflow("get", billing.ID, "--namespace", "billing")
	if code != exitOK || !strings.Contains(out, "\nnamespace    billing\n") {
		t.Fatalf("get: %q", out)
	}
	ids := func(args ...string) []string {
		t.Helper()
		out, errs, code := e.jetflow(append(args, "--json")...)
		var list struct{ Jobs []jetflow.JobInfo }
		if code != exitOK || json.Unmarshal([]byte(out), &list) != nil {
			t.Fatalf("%v: exit %d %q", args, code, errs)
		}
		var got []string
		for _, j := range list.Jobs {
			got = append(got, j.ID)
		}
		return got
	}
	if got := ids("ls", "--namespace", "billing"); strings.Join(got, ",") != byEnv.ID+","+billing.ID {
		t.Fatalf("ls billing: %v", got)
	}
	t.Setenv(envNamespace, "default")
	if got := ids("ls"); strings.Join(got, ",") != greet.ID+","+plain.ID {
		t.Fatalf("ls default: %v", got)
	}
	t.Setenv(envNamespace, "")
	if got := ids("ls"); len(got) != 4 {
		t.Fatalf("ls: %v", got)
	}
	out, _, _ = e.jetflow("ls", "--namespace", "billing")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 3 ||
		!strings.HasPrefix(lines[0], "ID                          NAMESPACE  TYPE       QUEUE    STATE") ||
		!strings.HasPrefix(lines[1], byEnv.ID+"  billing    demo.echo  default  succeeded") {
		t.Fatalf("ls table:\n%s", out)
	}
}

// jetflow worker --namespace registers its category:name types (the demo's
// demo:greet) in that namespace.
func TestCLIWorkerNamespace(t *testing.T) {
	e := newCLIEnv(t)
	var out, errb testkit.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"worker", "--nats", e.url, "--namespace", "billing", "--id", "billing-worker"}, &out, &errb)
	}()
	ctx := testkit.Ctx(t)
	testkit.WaitFor(t, 20*time.Second, func() error {
		ws, err := e.cl.Workers(ctx)
		for _, w := range ws {
			if w.ID == "billing-worker" && w.Live {
				for _, typ := range w.Types {
					if typ == "billing:demo:greet" {
						return nil
					}
				}
				return testkit.Errorf("types %v", w.Types)
			}
		}
		return testkit.Errorf("no billing-worker: %v", err)
	})
	job, err := e.cl.Submit(ctx, "demo:greet", map[string]string{"name": "Bob"}, jetflow.Namespace("billing"))
	if err != nil {
		t.Fatal(err)
	}
	done2, err := e.cl.Wait(ctx, job.ID)
	if err != nil || done2.Type != "billing:demo:greet" || done2.State != jetflow.Succeeded || done2.Worker != "billing-worker" {
		t.Fatalf("job %+v %v", done2, err)
	}
	if !strings.Contains(errb.String(), "registered types in namespace billing") {
		t.Fatalf("stderr %q", errb.String())
	}
	if _, errs, code := runCLI("worker", "--nats", e.url, "--namespace", "no:pe"); code != exitUsage ||
		errs != "jetflow worker: --namespace \"no:pe\": want 1-64 of [A-Za-z0-9_-], no '@' or ':'\n" {
		t.Fatalf("bad namespace: exit %d %q", code, errs)
	}
	// It stops on SIGINT, as from a terminal: its signal context takes it.
	if err := syscall.Kill(os.Getpid(), syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("worker: exit %d: %s", code, errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the worker did not stop on SIGINT: %s", errb.String())
	}
}
