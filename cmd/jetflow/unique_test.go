package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/jetflow/jetflow"
)

// jetflow submit --unique-key: the second submit of the key prints the
// first job and says so; get shows the key and the duplicates.
func TestCLIUniqueKey(t *testing.T) {
	e := newCLIEnv(t)
	out, errs, code := e.jetflow("submit", "demo.sleep", `{"seconds":30}`, "--unique-key", "nightly", "--unique-for", "1h")
	if code != exitOK || strings.Count(out, "\t") != 1 {
		t.Fatalf("first: %d %q %q", code, out, errs)
	}
	id := strings.Split(out, "\t")[0]
	out, errs, code = e.jetflow("submit", "demo.sleep", `{"seconds":1}`, "--unique-key", "nightly")
	if code != exitOK || out != id+"\t"+strings.Fields(out)[1]+"\t(the job that holds unique key \"nightly\")\n" {
		t.Fatalf("second: %d %q %q", code, out, errs)
	}
	out, errs, code = e.jetflow("get", id, "--json")
	var j jetflow.JobInfo
	if code != exitOK || json.Unmarshal([]byte(out), &j) != nil || j.Unique == nil || j.Unique.Key != "nightly" ||
		j.Unique.While != jetflow.UniqueActive || j.Unique.ForSeconds != 3600 || j.Unique.Until == nil || !j.Unique.Holds {
		t.Fatalf("get: %d %q %q", code, out, errs)
	}
	out, _, code = e.jetflow("get", id)
	if code != exitOK || !strings.Contains(out, "unique_key") || !strings.Contains(out, "nightly (while active, until ") {
		t.Fatalf("get: %d %q", code, out)
	}
	out, errs, code = e.jetflow("submit", "demo.echo", `{"to":"ada","n":1}`, "--unique-fields", "to,n", "--json")
	if code != exitOK || json.Unmarshal([]byte(out), &j) != nil || j.Unique == nil || strings.Join(j.Unique.Fields, ",") != "n,to" {
		t.Fatalf("fields: %d %q %q", code, out, errs)
	}
}
