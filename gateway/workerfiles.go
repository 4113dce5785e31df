package gateway

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
)

// claimant reads the worker_id of a worker file route and refuses a
// worker that does not hold the job (409 not-claimant), or that another
// token registered (404). It returns the job.
func (g *Gateway) claimant(r *http.Request, id string) (*domain.Job, error) {
	wid := r.URL.Query().Get("worker_id")
	if wid == "" {
		return nil, &commands.InputError{Field: "worker_id", Reason: "is required (?worker_id=, the claimant's id)"}
	}
	ctx := r.Context()
	if principal(r) != nil {
		rec, _, err := g.workers.Get(ctx, wid)
		if err == nil {
			err = ownsWorker(r, rec)
		}
		if err != nil {
			return nil, err
		}
	}
	snap, err := g.store.Current(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := commands.CheckHolder(snap.Job, wid); err != nil {
		return nil, err
	}
	return snap.Job, nil
}

// GET /jobs/{id}/inputs/{name...}?worker_id=W: an input file of a job,
// for the worker that holds it.
func (g *Gateway) workerInput(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	job, err := g.claimant(r, id)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	name := r.PathValue("name")
	var ref *domain.FileRef
	for i := range job.Spec.Files {
		if job.Spec.Files[i].Name == name {
			ref = &job.Spec.Files[i]
		}
	}
	if ref == nil {
		fail(w, r, newProblem(engine.ProblemNotFound, http.StatusNotFound, fmt.Sprintf("job %s has no input file %q", id, name)), id)
		return
	}
	fs, err := g.files(r.Context())
	if err != nil {
		fail(w, r, err, id)
		return
	}
	res, err := fs.Input(r.Context(), id, *ref)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	defer res.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(ref.Size, 10))
	h.Set("Digest", ref.Digest)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = io.Copy(w, res)
	}
}

// PUT /jobs/{id}/result?worker_id=W: the result archive (a zip) of the
// job, from the worker that holds it. The body is spooled to a temporary
// file (at most MaxUpload bytes), its entries checked (names that stay
// inside a directory, regular files and directories only), then stored.
func (g *Gateway) workerResult(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	if _, err := g.claimant(r, id); err != nil {
		fail(w, r, err, id)
		return
	}
	tmp, err := os.CreateTemp("", "jetflow-result-*.zip")
	if err != nil {
		fail(w, r, err, id)
		return
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	n, err := io.Copy(tmp, http.MaxBytesReader(w, r.Body, g.cfg.MaxUpload))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		drainBody(w, r.Body, drainLimit(g.cfg.MaxUpload))
		w.Header().Set("Connection", "close")
		fail(w, r, newProblem(problemPayloadTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("the archive is over the limit of %d bytes", g.cfg.MaxUpload)), id)
		return
	}
	if err != nil {
		fail(w, r, newProblem(problemMalformedRequest, http.StatusBadRequest, "reading the body: "+err.Error()), id)
		return
	}
	if err := checkArchive(tmp, n); err != nil {
		fail(w, r, &commands.InputError{Field: "result", Reason: err.Error()}, id)
		return
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		fail(w, r, err, id)
		return
	}
	fs, err := g.files(r.Context())
	if err != nil {
		fail(w, r, err, id)
		return
	}
	// Held still, now that the body is in: an upload that took longer
	// than the lease must not replace the archive of the attempt after it.
	if _, err := g.claimant(r, id); err != nil {
		fail(w, r, err, id)
		return
	}
	ref, err := fs.PutResult(r.Context(), id, tmp)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, ref)
}

// checkArchive refuses what is not a zip whose entries are regular files
// and directories with names files.CheckEntryName accepts.
func checkArchive(f io.ReaderAt, size int64) error { return files.CheckArchive(f, size) }
