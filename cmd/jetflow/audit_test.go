package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/streams"
)

// audit verify, export and audit verify --file against an engine that
// checkpoints; bad input is refused naming the flag; a forged event is
// exit 1 naming it.
func TestCLIAuditVerifyAndExport(t *testing.T) {
	srv := testkit.Server(t, "127.0.0.1:-1")
	ctx := testkit.Ctx(t)
	nc := testkit.Conn(t, srv)
	cl, err := jetflow.NewClient(ctx, nc, jetflow.ClientOptions{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kp, created, err := engine.LoadAuditKey(dir)
	if err != nil || !created {
		t.Fatal(created, err)
	}
	pub := engine.AuditPublicKey(kp)
	cfg := engine.EngineConfig{ProjectorLag: 100 * time.Millisecond, Log: testkit.Logger(t)}
	cfg.Checkpoints.Key, cfg.Checkpoints.Interval = kp, 200*time.Millisecond
	eng := engine.NewEngine(testkit.StoreOf(t, cl), cfg)
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	w := jetflow.NewWorker(cl, jetflow.WorkerConfig{Logger: testkit.Logger(t)})
	registerDemo(w, "default", false)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	e := &cliEnv{t: t, url: srv.ClientURL(), cl: cl}

	var id string
	for range 2 {
		out, errs, code := e.jetflow("submit", "demo.echo", `{"x":1}`, "--wait", "--json", "--actor", "auditor-7")
		var job map[string]any
		if code != exitOK || json.Unmarshal([]byte(out), &job) != nil {
			t.Fatalf("submit: %d %s %s", code, out, errs)
		}
		id = job["id"].(string)
	}
	if out, _, _ := e.jetflow("events", id, "--json"); !strings.Contains(out, `"actor":"auditor-7"`) {
		t.Fatalf("the submit does not name --actor:\n%s", out)
	}
	var rep engine.AuditReport
	testkit.WaitFor(t, 30*time.Second, func() error {
		out, errs, code := e.jetflow("audit", "verify", "--pubkey", pub, "--json")
		if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil {
			return testkit.Errorf("audit verify: %d %s %s", code, out, errs)
		}
		if rep.Checkpoints == 0 || rep.Uncovered != 0 || !rep.KeyPinned || len(rep.Findings) != 0 {
			return testkit.Errorf("not covered yet: %+v", rep)
		}
		return nil
	})
	eng.Stop(ctx) // no more checkpoints while the files are compared
	file := filepath.Join(t.TempDir(), "all.jsonl")
	if out, errs, code := e.jetflow("export", "-o", file); code != exitOK ||
		!regexp.MustCompile(`^exported ([7-9]|1[0-9]) events, [1-9][0-9]* checkpoints, [3-9] proofs to .*; 0 events after the last checkpoint are not covered yet\n$`).MatchString(out) {
		t.Fatalf("export: %d %q %q", code, out, errs)
	}
	var out, errs strings.Builder
	if code := run([]string{"audit", "verify", "--file", file, "--pubkey", pub}, &out, &errs); code != exitOK ||
		!strings.HasPrefix(out.String(), "verified ") || !strings.Contains(out.String(), ": 0 findings\n") {
		t.Fatalf("audit verify --file: %d %q %q", code, out.String(), errs.String())
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"audit", "verify", "--pubkey", "NOPE"}, "jetflow audit verify: --pubkey \"NOPE\": not checkpoint public keys"},
		{[]string{"audit", "verify", "--job", "not-an-id"}, "jetflow audit verify: --job \"not-an-id\": not a job id"},
		{[]string{"audit", "verify", "--file", file}, "jetflow audit verify: --file: needs --pubkey"},
		{[]string{"audit", "verify", "--file", file, "--job", id}, "jetflow audit verify: --file"},
		{[]string{"audit", "verify", "--since", "yesterday"}, "jetflow audit verify: --since \"yesterday\": want RFC 3339"},
		{[]string{"audit", "verify", "--since", "2026-11-26", "--until", "2026-11-01"}, "jetflow audit verify: --until \"2026-11-01\": before --since"},
		{[]string{"audit", "verify", "--file", file, "--pubkey", pub, "--since", "2026-11-26"}, "jetflow audit verify: --file"},
		{[]string{"export", "--since", "yesterday"}, "jetflow export: --since \"yesterday\": want RFC 3339"},
		{[]string{"export", "--since", "2026-11-26", "--until", "2026-11-01"}, "jetflow export: --until \"2026-11-01\": before --since"},
		{[]string{"export", "--namespace", "a b"}, "jetflow export: --namespace \"a b\": not a namespace name"},
		{[]string{"submit", "demo.echo", "--actor", "a\nb"}, "jetflow submit: --actor"},
	} {
		if _, errs, code := e.jetflow(c.args...); code != exitUsage || !strings.HasPrefix(errs, c.want) {
			t.Errorf("%v: exit %d, %q; want 2, %q", c.args, code, errs, c.want)
		}
	}

	// A range: nothing stored after an instant to come; everything up to
	// one past.
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if out, errs, code := e.jetflow("audit", "verify", "--since", future); code != exitOK || !strings.HasPrefix(out, "verified 0 events on 0 subjects, 0 checkpoints: 0 findings\n") {
		t.Fatalf("audit verify --since %s: %d %q %q", future, code, out, errs)
	}
	var ranged engine.AuditReport
	if out, errs, code := e.jetflow("audit", "verify", "--until", future, "--pubkey", pub, "--json"); code != exitOK ||
		json.Unmarshal([]byte(out), &ranged) != nil || ranged.Events < rep.Events || ranged.Checkpoints < rep.Checkpoints || len(ranged.Findings) != 0 {
		t.Fatalf("audit verify --until %s: %d %q %q (whole: %+v)", future, code, out, errs, rep)
	}

	// A forged event: exit 1, named.
	ev, err := streams.EncodeEvent(&domain.Event{Type: domain.EvCancelled, JobID: id, Time: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(streams.EventSubject("default", "default", "demo.echo", id), ev); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	testkit.WaitFor(t, 10*time.Second, func() error {
		out, _, code := e.jetflow("audit", "verify", "--pubkey", pub)
		if code != exitFailed || !strings.Contains(out, "forged seq ") || !strings.Contains(out, "job "+id) {
			return testkit.Errorf("audit verify after a forged event: %d %s", code, out)
		}
		return nil
	})
}
