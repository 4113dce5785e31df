package jetflow_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/internal/testkit"
)

// An SDK worker's NATS user (role worker) reads a job's input files and
// stores its result archive, twice (the second replaces the first), with
// no permission violation: what a `jetflow worker --exec` does for a job
// with files.
func TestNATSWorkerRoleFiles(t *testing.T) {
	t.Parallel()
	s := startAuthSystem(t)
	ctx := testkit.Ctx(t)
	job, err := s.client.Submit(ctx, "files.t", nil, jetflow.Files(map[string]io.Reader{"in/a.txt": strings.NewReader("input")}))
	if err != nil {
		t.Fatal(err)
	}
	var v violations
	w := s.connect(t, jetflow.NATSRoleWorker, &v)
	octx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	in, err := w.OpenInput(octx, job.ID, job.Files[0])
	if err != nil {
		t.Fatalf("%v; violations %q", err, v.all())
	}
	b, err := io.ReadAll(in)
	in.Close()
	if err != nil || string(b) != "input" {
		t.Fatalf("input %q, %v; violations %q", b, err, v.all())
	}
	for _, r := range []string{"first", "second"} {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := w.PutResult(pctx, job.ID, strings.NewReader(r))
		cancel()
		if err != nil {
			t.Fatalf("%v; violations %q", err, v.all())
		}
	}
	if _, err := s.client.Cancel(ctx, job.ID, "done"); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if _, err := s.client.Download(ctx, job.ID, &got); err != nil || got.String() != "second" {
		t.Fatalf("download %q, %v", got.String(), err)
	}
	if len(v.all()) != 0 {
		t.Fatalf("violations: %q", v.all())
	}
}
