package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"

	"github.com/jetflow/jetflow"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/shell"
)

// fileHooks are a shell.Runner's Prepare and Collect for jobs with files
// (docs/files.md): the inputs are placed in the attempt's directory, and
// the outputs, stdout.txt and stderr.txt are zipped into the job's result
// archive.
type fileHooks struct{ cl *jetflow.Client }

// attemptHolds reports whether attempt still holds the job cur shows:
// running at that attempt, or queued at the attempt before it, which is
// this attempt's claim whose record is not written yet (an in-process
// claim writes its record late, and a read that could not fold the log
// shows the record as it is). A job whose attempt lost its lease is
// requeued at that attempt, or taken by a later one.
func attemptHolds(cur *jetflow.JobInfo, attempt int) bool {
	return cur.State == jetflow.Running && cur.Attempts == attempt ||
		cur.State == jetflow.Queued && cur.Attempts == attempt-1
}

// prepare writes the job's input files into the attempt's directory. Their
// names are checked again, and written through an os.Root of the
// directory: none lands outside it, whatever it is named.
func (h fileHooks) prepare(ctx context.Context, job *jetflow.RawJob, a *shell.Attempt) error {
	rec := job.Record()
	if rec == nil {
		var err error
		if rec, err = h.cl.Get(ctx, job.ID); err != nil {
			return err
		}
	}
	if len(rec.Files) == 0 {
		return nil
	}
	root, err := os.OpenRoot(a.Dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, f := range rec.Files {
		if err := h.place(ctx, root, job.ID, f); err != nil {
			return err
		}
	}
	return nil
}

func (h fileHooks) place(ctx context.Context, root *os.Root, jobID string, f jetflow.FileInfo) error {
	in, err := h.cl.OpenInput(ctx, jobID, f) // checks the name (commands.CheckFileName) and the digest
	if err != nil {
		return err
	}
	defer in.Close()
	if d := path.Dir(f.Name); d != "." {
		if err := root.MkdirAll(filepath.FromSlash(d), 0o700); err != nil {
			return fmt.Errorf("input %s: %w", f.Name, err)
		}
	}
	out, err := root.OpenFile(filepath.FromSlash(f.Name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("input %s: %w", f.Name, err)
	}
	n, err := io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != f.Size {
		err = fmt.Errorf("%d bytes, want %d", n, f.Size)
	}
	if err != nil {
		return fmt.Errorf("input %s: %w", f.Name, err)
	}
	return nil
}

// collect zips the attempt's outputs (as out/<name>), stdout.txt and
// stderr.txt, streaming the archive to the object store as the job's
// result (the last attempt's replaces an earlier one's).
func (h fileHooks) collect(ctx context.Context, job *jetflow.RawJob, a *shell.Attempt) error {
	var entries []files.Entry
	for _, f := range a.Outputs {
		entries = append(entries, files.Entry{Name: shell.OutputDir + "/" + f.Name, Path: a.OutputDir + "/" + f.Name})
	}
	for _, p := range []struct{ name, path string }{{shell.StdoutFile, a.Stdout}, {shell.StderrFile, a.Stderr}} {
		if st, err := os.Lstat(p.path); err == nil && st.Mode().IsRegular() {
			entries = append(entries, files.Entry{Name: p.name, Path: p.path})
		}
	}
	// An attempt that lost its job (its lease went to another attempt)
	// must not replace the newer attempt's archive.
	cur, err := h.cl.Get(ctx, job.ID)
	if err != nil {
		return err
	}
	if !attemptHolds(cur, job.Attempt) {
		return fmt.Errorf("result of job %s not stored: attempt %d no longer holds it (%s, attempt %d)",
			job.ID, job.Attempt, cur.State, cur.Attempts)
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(files.WriteZip(pw, entries)) }()
	_, err = h.cl.PutResult(ctx, job.ID, pr)
	_ = pr.CloseWithError(errors.New("result not stored"))
	return err
}
