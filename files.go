package jetflow

import (
	"context"
	"errors"
	"io"
	"slices"

	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
)

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
// client sends them to the engine in chunks (file.put, then file.submit:
// docs/protocol.md), which stores them the same way.
func Files(fs map[string]io.Reader) SubmitOption {
	names := make([]string, 0, len(fs))
	for n := range fs {
		names = append(names, n)
	}
	slices.Sort(names)
	return func(r *SubmitRequest) {
		for _, n := range names {
			r.Uploads = append(r.Uploads, FileUpload{Name: n, Reader: fs[n]})
		}
	}
}

// OpenInput opens an input file of a job, as its spec recorded it
// (JobInfo.Files): a file whose digest is not the recorded one is refused.
// A token client reads it in pieces (file.input), as the HTTP worker
// protocol does: of a job held by an HTTP worker its token registered (an
// admin's: any), the digest checked at the end.
func (c *Client) OpenInput(ctx context.Context, jobID string, f FileInfo) (io.ReadCloser, error) {
	r, err := c.b.openInput(ctx, jobID, domain.FileRef{Name: f.Name, Size: f.Size, Digest: f.Digest})
	return r, publicErr(err)
}

// PutResult stores a job's result archive (a zip), replacing the one an
// earlier attempt stored. A token client sends it in chunks (file.result)
// for the HTTP worker of its token's that holds the job (an admin's: any),
// as PUT /jobs/{id}/result does; the engine checks the archive first.
func (c *Client) PutResult(ctx context.Context, jobID string, r io.Reader) (FileInfo, error) {
	f, err := c.b.putResult(ctx, jobID, r)
	return FileInfo{Name: f.Name, Size: f.Size, Digest: f.Digest}, publicErr(err)
}

// Download writes the result archive of a job that ended to w. It answers
// ErrNotFound for an unknown job, ErrNotEnded while the job has not ended,
// and ErrNoFile for a job that ended without an archive.
func (c *Client) Download(ctx context.Context, id string, w io.Writer) (FileInfo, error) {
	f, err := c.b.download(ctx, id, w)
	return FileInfo{Name: f.Name, Size: f.Size, Digest: f.Digest}, publicErr(err)
}
