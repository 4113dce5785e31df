package jetflow

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
)

// FileInfo is one of a job's files: its name in the job's directory, its
// size and its digest ("SHA-256=<base64url>"). JobInfo.Files lists a job's
// input files.
type FileInfo = domain.FileRef

// ResultName is the name of a job's result archive (a zip; docs/files.md).
const ResultName = files.ResultName

var (
	// ErrNoFile: the job has no such file, or no result archive. It
	// matches ErrNotFound.
	ErrNoFile = files.ErrNoFile
	// ErrNotEnded: Download of a job that has not ended yet.
	ErrNotEnded = errors.New("the job has not ended")
)

// Files stores input files with the job: name (a relative path in the
// job's directory, slash-separated; commands.CheckFileName) → content. They
// are stored in the object store before the job is submitted, under its
// id, and recorded in its spec; a refused submit deletes them. A token
// client answers ErrNeedsEngine.
func Files(fs map[string]io.Reader) SubmitOption {
	names := make([]string, 0, len(fs))
	for n := range fs {
		names = append(names, n)
	}
	slices.Sort(names)
	return func(r *SubmitRequest) {
		for _, n := range names {
			r.Uploads = append(r.Uploads, commands.FileUpload{Name: n, Reader: fs[n]})
		}
	}
}

func (c *Client) files(ctx context.Context, what string) (*files.Store, error) {
	if c.store == nil {
		return nil, c.needsEngine(what)
	}
	return c.store.Files(ctx)
}

// sendWithFiles stores a request's uploads under the job's id, then
// submits it recording them (docs/files.md, "Crash safety").
func (c *Client) sendWithFiles(ctx context.Context, req *SubmitRequest) (*JobInfo, bool, error) {
	fs, err := c.files(ctx, "submit with files")
	if err != nil {
		return nil, false, err
	}
	names := make([]string, len(req.Uploads))
	for i, u := range req.Uploads {
		names[i] = u.Name
	}
	if err := commands.CheckFileNames(names, commands.MaxFiles); err != nil {
		return nil, false, err
	}
	r := *req
	r.Uploads = nil
	if err := r.Validate(); err != nil {
		return nil, false, err
	}
	id := domain.NewID()
	if r.IdempotencyKey != "" {
		ns := r.Namespace
		if ns == "" {
			ns = domain.DefaultNS
		}
		id = domain.KeyedID(ns, r.IdempotencyKey)
		if snap, err := c.store.Lookup(ctx, id); err == nil {
			return viewOf(snap.Job), false, nil
		} else if !errors.Is(err, ErrNotFound) {
			return nil, false, err
		}
	}
	var stored []string
	drop := func(err error) (*JobInfo, bool, error) {
		if derr := fs.DeleteInputs(context.WithoutCancel(ctx), id, stored); derr != nil {
			err = errors.Join(err, fmt.Errorf("delete the files of a refused submit: %w", derr))
		}
		return nil, false, err
	}
	for _, u := range req.Uploads {
		stored = append(stored, u.Name)
		ref, err := fs.PutInput(ctx, id, u.Name, u.Reader)
		if err != nil {
			return drop(err)
		}
		r.Files = append(r.Files, ref)
	}
	r.ID = id
	res, err := c.store.Submit(ctx, &r)
	if err != nil {
		return drop(err)
	}
	return viewOf(res.Job), res.Created, nil
}

// OpenInput opens an input file of a job, as its spec recorded it
// (JobInfo.Files): a file whose digest is not the recorded one is refused.
func (c *Client) OpenInput(ctx context.Context, jobID string, f FileInfo) (io.ReadCloser, error) {
	fs, err := c.files(ctx, "open an input file")
	if err != nil {
		return nil, err
	}
	return fs.Input(ctx, jobID, f)
}

// PutResult stores a job's result archive (a zip), replacing the one an
// earlier attempt stored.
func (c *Client) PutResult(ctx context.Context, jobID string, r io.Reader) (FileInfo, error) {
	fs, err := c.files(ctx, "store a result")
	if err != nil {
		return FileInfo{}, err
	}
	return fs.PutResult(ctx, jobID, r)
}

// Download writes the result archive of a job that ended to w. It answers
// ErrNotFound for an unknown job, ErrNotEnded while the job has not ended,
// and ErrNoFile for a job that ended without an archive.
func (c *Client) Download(ctx context.Context, id string, w io.Writer) (FileInfo, error) {
	fs, err := c.files(ctx, "download")
	if err != nil {
		return FileInfo{}, err
	}
	snap, err := c.store.Lookup(ctx, id)
	if err != nil {
		return FileInfo{}, err
	}
	if !snap.Job.State.Terminal() {
		return FileInfo{}, fmt.Errorf("download %s (%s): %w", id, snap.Job.State, ErrNotEnded)
	}
	res, err := fs.Result(ctx, id)
	if err != nil {
		return FileInfo{}, err
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		return FileInfo{}, err
	}
	if _, err := io.Copy(w, res); err != nil {
		return FileInfo{}, fmt.Errorf("download %s: %w", id, err)
	}
	return FileInfo{Name: ResultName, Size: int64(info.Size), Digest: info.Digest}, nil
}
