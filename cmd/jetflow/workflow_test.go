package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jetflow/jetflow"
)

// jetflow workflow submit FILE (YAML or JSON) --wait runs the graph and
// prints it by layer; workflow get prints it again (--json: the view); a
// cycle, an unknown field or a file that is none is exit 2, naming it,
// and nothing is sent.
func TestCLIWorkflow(t *testing.T) {
	e := newCLIEnv(t)
	dir := t.TempDir()
	yml := filepath.Join(dir, "wf.yaml")
	if err := os.WriteFile(yml, []byte(`name: cli
steps:
  - name: first
    type: demo.echo
    payload: {n: 1}
  - name: second
    type: demo.echo
    depends_on: [first]
  - name: third
    type: demo.echo
    depends_on: [first, second]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errs, code := e.jetflow("workflow", "submit", yml, "--wait", "--key", "cli-1")
	if code != exitOK || errs != "" {
		t.Fatalf("workflow submit --wait: exit %d, %s\n%s", code, errs, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 5 || !strings.Contains(lines[0], " cli: succeeded") || !strings.HasPrefix(lines[1], "LAYER") ||
		!strings.HasPrefix(lines[2], "0  ") || !strings.Contains(lines[2], "first") || !strings.Contains(lines[4], "third") ||
		!strings.Contains(lines[4], "first, second") {
		t.Fatalf("workflow submit --wait printed:\n%s", out)
	}
	id := strings.Fields(lines[0])[1]
	out, _, code = e.jetflow("workflow", "get", id, "--json")
	var info jetflow.WorkflowInfo
	if code != exitOK || json.Unmarshal([]byte(out), &info) != nil || info.State != jetflow.Succeeded || len(info.Steps) != 3 ||
		info.Counts["succeeded"] != 3 {
		t.Fatalf("workflow get --json: exit %d\n%s", code, out)
	}
	// events on a workflow: its own and its steps', in log order, each
	// named; --steps=false: its own only.
	out, _, code = e.jetflow("events", id)
	evLines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(evLines) < 12 || !strings.HasPrefix(evLines[0], "workflow  ") || !strings.Contains(evLines[0], "job.submitted") ||
		!strings.HasPrefix(evLines[len(evLines)-1], "workflow  ") || !strings.Contains(evLines[len(evLines)-1], "job.succeeded") {
		t.Fatalf("events of the workflow: exit %d\n%s", code, out)
	}
	seen := map[string]int{}
	last := -1
	for _, l := range evLines {
		f := strings.Fields(l)
		seen[f[0]+" "+f[3]]++
		seq, err := strconv.Atoi(strings.TrimPrefix(f[2], "#"))
		if err != nil || seq <= last {
			t.Fatalf("not in log order at %q:\n%s", l, out)
		}
		last = seq
	}
	for _, want := range []string{"first job.started", "first job.succeeded", "second job.admitted", "second job.succeeded", "third job.admitted", "third job.succeeded"} {
		if seen[want] != 1 {
			t.Fatalf("%q %d times in:\n%s", want, seen[want], out)
		}
	}
	out, _, code = e.jetflow("events", id, "--steps=false")
	if code != exitOK || strings.Contains(out, "first") || !strings.Contains(out, "job.waiting") {
		t.Fatalf("events --steps=false: exit %d\n%s", code, out)
	}
	out, _, code = e.jetflow("workflow", "submit", yml, "--key", "cli-1")
	if code != exitOK || !strings.HasPrefix(out, id+"\tsucceeded\texists, 3 steps") {
		t.Fatalf("repeat: exit %d %q", code, out)
	}

	bad := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, c := range []struct{ file, want string }{
		{bad("cycle.json", `{"steps":[{"name":"a","type":"demo.echo","depends_on":["b"]},{"name":"b","type":"demo.echo","depends_on":["a"]}]}`), "cycle a -> b -> a"},
		{bad("field.json", `{"steps":[{"name":"a","type":"demo.echo","bogus":1}]}`), `unknown field "bogus"`},
		{bad("trailing.json", `{"steps":[{"name":"a","type":"demo.echo"}]} {}`), "data after"},
		{bad("bad.yaml", "steps: [\n"), "not YAML"},
		{filepath.Join(dir, "none.json"), "no such file"},
	} {
		out, errs, code := e.jetflow("workflow", "submit", c.file)
		if code != exitUsage || !strings.Contains(errs, c.want) || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 2 and %q", filepath.Base(c.file), code, out, errs, c.want)
		}
	}
	if _, errs, code := e.jetflow("workflow", "get", "01JD3K2Q4V8ZB7R1X9C0M5T6NA"); code != exitUsage || errs == "" {
		t.Errorf("get of an unknown workflow: exit %d %q", code, errs)
	}
}
