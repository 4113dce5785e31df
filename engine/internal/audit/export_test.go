package audit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/engine/internal/audit"
	"github.com/jetflow/jetflow/engine/internal/maintenance"
	"github.com/jetflow/jetflow/engine/internal/storetest"
)

// An export verifies offline with the public key alone; an edited line
// is named; a namespace's export holds nothing of another namespace.
func TestAuditExport(t *testing.T) {
	env, js, ids := logOf(t, 3) // namespace default
	ctx := context.Background()
	var other []string
	for i := range 3 {
		j, err := env.Client.Submit(ctx, "audit.ok", i, jetflow.Namespace("tenant-b"))
		if err != nil {
			t.Fatal(err)
		}
		other = append(other, j.ID)
	}
	for _, id := range other {
		if done, err := env.Wait(id, 30*time.Second); err != nil || done.State != jetflow.Succeeded {
			t.Fatalf("job %s: %v %+v", id, err, done)
		}
	}
	kp, pub := testKey(t)
	cp := maintenance.NewCheckpointer(storetest.Open(t, env.Client.Conn(), "checkpointer"), maintenance.CheckpointerConfig{Key: kp})
	env.Engine.Stop(ctx)
	if ck, err := cp.Checkpoint(ctx); err != nil || ck == nil {
		t.Fatalf("checkpoint %+v %v", ck, err)
	}

	// The whole log, since a minute ago.
	var whole bytes.Buffer
	st, err := audit.Export(ctx, js, audit.ExportScope{Since: time.Now().Add(-time.Minute)}, &whole)
	if err != nil || st.Events != 18 || st.Checkpoints != 1 || st.Proofs != 6 || st.Uncovered != 0 {
		t.Fatalf("export %+v %v", st, err)
	}
	r, err := audit.VerifyExport(bytes.NewReader(whole.Bytes()), pub)
	if err != nil || !r.OK() || r.Events != 19 || r.Checkpoints != 1 || r.Uncovered != 0 {
		t.Fatalf("verify export %+v %v", r, err)
	}

	// One namespace: its events, proved, and not a trace of tenant-b.
	var ns bytes.Buffer
	st, err = audit.Export(ctx, js, audit.ExportScope{Namespace: "default"}, &ns)
	if err != nil || st.Events != 9 || st.Proofs != 3 {
		t.Fatalf("namespace export %+v %v", st, err)
	}
	for _, id := range append(other, "tenant-b", "tenant~2Db") {
		if bytes.Contains(ns.Bytes(), []byte(id)) {
			t.Fatalf("the namespace export names %s", id)
		}
	}
	for _, id := range ids {
		if !bytes.Contains(ns.Bytes(), []byte(id)) {
			t.Fatalf("the namespace export lacks job %s", id)
		}
	}
	r, err = audit.VerifyExport(bytes.NewReader(ns.Bytes()), pub)
	if err != nil || !r.OK() || r.Events != 10 {
		t.Fatalf("verify namespace export %+v %v", r, err)
	}

	// An edited line: its event is named. The first event that names the
	// job type (a job.submitted: which line that is depends on how the
	// three jobs' events interleaved).
	lines := strings.Split(strings.TrimSpace(ns.String()), "\n")
	var l audit.Line
	k := -1
	for i, line := range lines {
		var x audit.Line
		if err := json.Unmarshal([]byte(line), &x); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if x.Kind == "event" && bytes.Contains(x.Data, []byte("audit.ok")) {
			k, l = i, x
			break
		}
	}
	if k < 0 {
		t.Fatalf("no event names audit.ok:\n%s", ns.String())
	}
	l.Data = bytes.Replace(l.Data, []byte("audit.ok"), []byte("audit.no"), 1)
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	lines[k] = string(b)
	r, err = audit.VerifyExport(strings.NewReader(strings.Join(lines, "\n")), pub)
	if err != nil || len(r.Findings) != 1 || r.Findings[0].Kind != audit.Edited || r.Findings[0].Seq != l.Seq {
		t.Fatalf("verify an edited export: %v %+v", err, r)
	}
	// Without its line: the chain names the gap, or the proof its end.
	lines = strings.Split(strings.TrimSpace(ns.String()), "\n")
	r, err = audit.VerifyExport(strings.NewReader(strings.Join(append(lines[:k:k], lines[k+1:]...), "\n")), pub)
	if err != nil || r.OK() {
		t.Fatalf("verify an export without a line: %v %+v", err, r)
	}
	t.Log(r.Findings)
	// Another key: refused.
	other2, _, _ := audit.LoadKey(t.TempDir())
	r, err = audit.VerifyExport(bytes.NewReader(ns.Bytes()), audit.PublicKey(other2))
	if err != nil || r.OK() {
		t.Fatalf("verify with another key: %v %+v", err, r)
	}
}

// A namespace whose first events come after the log's first checkpoint:
// its export from the log's beginning holds the checkpoints from the
// first, whose chain starts there, and verifies.
func TestAuditExportNamespaceAfterACheckpoint(t *testing.T) {
	env, js, _ := logOf(t, 1) // namespace default
	ctx := context.Background()
	kp, _, err := audit.LoadKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cp := maintenance.NewCheckpointer(storetest.Open(t, env.Client.Conn(), "checkpointer"), maintenance.CheckpointerConfig{Key: kp})
	if ck, err := cp.Checkpoint(ctx); err != nil || ck == nil {
		t.Fatalf("checkpoint %+v %v", ck, err)
	}
	j, err := env.Client.Submit(ctx, "audit.ok", 1, jetflow.Namespace("tenant-b"))
	if err != nil {
		t.Fatal(err)
	}
	if done, err := env.Wait(j.ID, 30*time.Second); err != nil || done.State != jetflow.Succeeded {
		t.Fatalf("job %s: %v %+v", j.ID, err, done)
	}
	env.Engine.Stop(ctx)
	if ck, err := cp.Checkpoint(ctx); err != nil || ck == nil {
		t.Fatalf("checkpoint %+v %v", ck, err)
	}
	var b bytes.Buffer
	st, err := audit.Export(ctx, js, audit.ExportScope{Namespace: "tenant-b"}, &b)
	if err != nil || st.Events != 3 || st.Checkpoints != 2 || st.Proofs != 1 || st.Uncovered != 0 {
		t.Fatalf("export %+v %v", st, err)
	}
	r, err := audit.VerifyExport(bytes.NewReader(b.Bytes()), audit.PublicKey(kp))
	if err != nil || !r.OK() || r.Events != 5 || r.Checkpoints != 2 || r.Uncovered != 0 {
		t.Fatalf("verify export %+v %v", r, err)
	}
}
