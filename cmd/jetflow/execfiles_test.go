package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/testkit"
	"github.com/jetflow/jetflow/shell"
)

// The --exec Prepare hook places a job's inputs inside the attempt's
// directory only: a name is checked again (one that would leave the
// directory is refused, nothing written outside), and a file replaced
// after the submit (another digest) is refused.
func TestPrepareInputs(t *testing.T) {
	t.Parallel()
	srv := testkit.Server(t)
	ctx := testkit.Ctx(t)
	cl, err := jetflow.NewClient(ctx, testkit.Conn(t, srv), jetflow.ClientOptions{Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	job, err := cl.Submit(ctx, "t", nil, jetflow.Files(map[string]io.Reader{
		"a/b/c.txt": strings.NewReader("abc"), "run.sh": strings.NewReader("true")}))
	if err != nil {
		t.Fatal(err)
	}
	h := fileHooks{cl}
	parent := t.TempDir()
	dir := filepath.Join(parent, "attempt")
	os.Mkdir(dir, 0o700)
	a := &shell.Attempt{Dir: dir}
	if err := h.prepare(ctx, &jetflow.RawJob{ID: job.ID}, a); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a", "b", "c.txt")); err != nil || string(b) != "abc" {
		t.Errorf("a/b/c.txt: %q %v", b, err)
	}

	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, bad := range []string{"../escape.txt", "/tmp/abs.txt", "out/x", "a/../../escape.txt"} {
		err := h.place(ctx, root, job.ID, jetflow.FileInfo{Name: bad, Digest: "x"})
		if err == nil || !strings.Contains(err.Error(), "file name") {
			t.Errorf("%q: %v", bad, err)
		}
	}
	if es, _ := os.ReadDir(parent); len(es) != 1 {
		t.Errorf("written beside the attempt's directory: %v", es)
	}

	// The object replaced behind the job's back.
	fs, err := files.Open(ctx, testkit.StoreOf(t, cl).JS, testkit.StoreOf(t, cl).Topo)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.PutInput(ctx, job.ID, "run.sh", strings.NewReader("rm -rf /")); err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	err = h.prepare(ctx, &jetflow.RawJob{ID: job.ID}, &shell.Attempt{Dir: dir2})
	if err == nil || !strings.Contains(err.Error(), "digest") {
		t.Errorf("a replaced input: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir2, "run.sh")); err == nil {
		t.Error("the replaced run.sh was placed")
	}
}

// An --exec attempt stores its result only while it holds its job; a record
// not yet written past the attempt's claim (queued at the attempt before)
// is its own.
func TestAttemptHolds(t *testing.T) {
	for _, c := range []struct {
		state    jetflow.State
		attempts int
		want     bool
	}{
		{jetflow.Running, 2, true},
		{jetflow.Queued, 1, true},     // the claim's record not written yet
		{jetflow.Queued, 2, false},    // requeued: its lease lost
		{jetflow.Running, 3, false},   // a later attempt runs it
		{jetflow.Succeeded, 2, false}, // ended (another worker's outcome)
		{jetflow.Cancelled, 1, false}, // cancelled before its claim was recorded
		{jetflow.Scheduled, 1, false}, // a retry waiting: not this attempt's
	} {
		if got := attemptHolds(&jetflow.JobInfo{State: c.state, Attempts: c.attempts}, 2); got != c.want {
			t.Errorf("%s at attempt %d: holds %v, want %v", c.state, c.attempts, got, c.want)
		}
	}
}
