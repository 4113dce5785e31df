package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strings"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
)

// Defaults of the limits of a submit with files.
const (
	DefaultMaxUpload = 100 << 20
	DefaultMaxFiles  = commands.MaxFiles
	// maxPartOverhead is what one part may add to a multipart body
	// besides its content (boundary and headers), for the body's limit.
	maxPartOverhead = 4 << 10
)

// errUploadTooLarge: the files of a submit hold more than MaxUpload bytes.
var errUploadTooLarge = errors.New("the files are over the upload limit")

// files is the files bucket (Store.Files); 503 when it cannot be opened.
func (g *Gateway) files(ctx context.Context) (*files.Store, error) {
	fs, err := g.store.Files(ctx)
	if err != nil {
		return nil, newProblem(problemUnavailable, http.StatusServiceUnavailable, err.Error())
	}
	return fs, nil
}

// isMultipart reports whether a request's body is multipart/form-data.
func isMultipart(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "multipart/form-data"
}

// uploadLimits bound a multipart submit.
type uploadLimits struct {
	maxJob    int64 // the job part (MaxBodyBytes)
	maxUpload int64 // the files together (MaxUpload)
	maxFiles  int   // how many files (MaxFiles)
}

func (l uploadLimits) body() int64 {
	return l.maxJob + l.maxUpload + int64(l.maxFiles+2)*maxPartOverhead
}

// upload is what readUpload calls: check the job before any file is read,
// put each file as it streams.
type upload struct {
	check func(req *commands.SubmitRequest) error
	put   func(name string, r io.Reader) (domain.FileRef, error)
}

// readUpload decodes a multipart/form-data submit: first a part named
// "job" holding the JSON of a plain submit (decodeSubmit), then file
// parts, each named by its filename parameter (a relative path, as is: not
// reduced to its base name as multipart.Part.FileName would). A file's
// content is handed to put as it arrives, never held whole. Every error is
// a problem of the client's (4xx) unless put's own.
func readUpload(mr *multipart.Reader, lim uploadLimits, u upload) (*commands.SubmitRequest, []domain.FileRef, error) {
	part, err := mr.NextPart()
	if err != nil {
		return nil, nil, malformedUpload("no job part", err)
	}
	if part.FormName() != "job" {
		return nil, nil, newProblem(problemMalformedRequest, http.StatusBadRequest,
			fmt.Sprintf(`the first part must be the job (form field "job", the JSON of a submit); got %q`, part.FormName()))
	}
	body, err := io.ReadAll(io.LimitReader(part, lim.maxJob+1))
	if err != nil {
		return nil, nil, malformedUpload("the job part", err)
	}
	if int64(len(body)) > lim.maxJob {
		return nil, nil, newProblem(problemPayloadTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("the job part is over the limit of %d bytes", lim.maxJob))
	}
	req, err := decodeSubmit(body)
	if err == nil {
		err = u.check(req)
	}
	if err != nil {
		return nil, nil, err
	}
	set := commands.NewFileSet(lim.maxFiles)
	left := &countingReader{left: lim.maxUpload}
	var refs []domain.FileRef
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return req, refs, nil
		}
		if err != nil {
			return req, refs, malformedUpload("a file part", err)
		}
		name, ok := partFileName(part)
		if !ok {
			return req, refs, newProblem(problemMalformedRequest, http.StatusBadRequest, fmt.Sprintf(
				"part %q has no filename: after the job part, every part is a file (Content-Disposition: form-data; name=\"file\"; filename=\"dir/name\")",
				part.FormName()))
		}
		if err := set.Add(name); err != nil {
			return req, refs, err
		}
		left.r = part
		ref, err := u.put(name, left)
		if errors.Is(err, errUploadTooLarge) {
			return req, refs, newProblem(problemPayloadTooLarge, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("the files hold more than the limit of %d bytes (at %q)", lim.maxUpload, name))
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return req, refs, newProblem(problemPayloadTooLarge, http.StatusRequestEntityTooLarge,
				fmt.Sprintf("the body is over the limit of %d bytes", tooBig.Limit))
		}
		if err != nil && left.readErr != nil {
			return req, refs, malformedUpload(fmt.Sprintf("file %q", name), left.readErr)
		}
		if err != nil {
			return req, refs, err
		}
		refs = append(refs, ref)
	}
}

func malformedUpload(what string, err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return newProblem(problemPayloadTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("the body is over the limit of %d bytes", tooBig.Limit))
	}
	return newProblem(problemMalformedRequest, http.StatusBadRequest, fmt.Sprintf("multipart body: %s: %v", what, err))
}

// partFileName is a part's filename parameter as it was sent (a path),
// read with mime.ParseMediaType.
func partFileName(p *multipart.Part) (string, bool) {
	_, params, err := mime.ParseMediaType(p.Header.Get("Content-Disposition"))
	if err != nil {
		return "", false
	}
	name, ok := params["filename"]
	return name, ok
}

// countingReader reads the file parts against what is left of the upload
// limit, and remembers a read error of the body (the client's fault, not
// the object store's).
type countingReader struct {
	r       io.Reader
	left    int64
	readErr error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		return n, errUploadTooLarge
	}
	if err != nil && err != io.EOF {
		c.readErr = err
	}
	return n, err
}

// POST /jobs with Content-Type multipart/form-data: a submit with files.
// The job's id is chosen first, its files are stored under it, then the
// job is submitted recording them; a refusal deletes them at once, and
// files.Store.Sweep (engine.FileSweeper) deletes those a crash left.
func (g *Gateway) submitWithFiles(w http.ResponseWriter, r *http.Request) {
	lim := uploadLimits{maxJob: g.cfg.MaxBodyBytes, maxUpload: g.cfg.MaxUpload, maxFiles: g.cfg.MaxFiles}
	if r.ContentLength > lim.body() {
		if !strings.EqualFold(r.Header.Get("Expect"), "100-continue") && r.ContentLength <= drainLimit(lim.body()) {
			drainBody(w, r.Body, drainLimit(lim.body()))
		}
		w.Header().Set("Connection", "close")
		fail(w, r, newProblem(problemPayloadTooLarge, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"body of %d bytes is over the limit of %d (files at most %d bytes)", r.ContentLength, lim.body(), lim.maxUpload)), "")
		return
	}
	_, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || params["boundary"] == "" {
		fail(w, r, newProblem(problemMalformedRequest, http.StatusBadRequest, "multipart/form-data without a boundary"), "")
		return
	}
	ctx := r.Context()
	fs, err := g.files(ctx)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	body := http.MaxBytesReader(w, r.Body, lim.body())
	var (
		id       string
		existing *engine.Submitted
	)
	check := func(req *commands.SubmitRequest) error {
		ns, err := scopeNamespace(r, commands.ActSubmit, req.Namespace)
		if err != nil {
			return err
		}
		req.Namespace = ns
		if err := submitUser(r, req); err != nil {
			return err
		}
		if err := g.store.CheckRefs(ctx, principal(r), req); err != nil {
			return err
		}
		id = domain.NewID()
		if req.IdempotencyKey != "" {
			if ns == "" {
				ns = domain.DefaultNS
			}
			id = domain.KeyedID(ns, req.IdempotencyKey)
			// A key that names a job already: that job is the answer, and
			// its files are not written again.
			if snap, err := g.store.Read(ctx, id); err == nil {
				existing = &engine.Submitted{Snapshot: snap}
				return errExisting
			} else if !errors.Is(err, commands.ErrNotFound) {
				return err
			}
		}
		return nil
	}
	put := func(name string, rd io.Reader) (domain.FileRef, error) { return fs.PutInput(ctx, id, name, rd) }
	req, refs, err := readUpload(multipart.NewReader(body, params["boundary"]), lim, upload{check: check, put: put})
	if errors.Is(err, errExisting) {
		drainBody(w, body, drainLimit(lim.body()))
		g.created(w, r, *existing, nil, "")
		return
	}
	if err == nil {
		req.ID, req.Files = id, refs
		var res engine.Submitted
		res, err = g.store.Submit(submitContext(ctx, r), req)
		if err == nil {
			g.created(w, r, res, nil, "")
			return
		}
	}
	// Refused: nothing is kept (a failed put leaves no object), unless a
	// job of this id exists meanwhile: another submit with the same
	// idempotency key won, and the names may be its files.
	if id != "" && !g.jobExists(context.WithoutCancel(ctx), id) {
		names := make([]string, 0, len(refs)+1)
		for _, f := range refs {
			names = append(names, f.Name)
		}
		if derr := fs.DeleteInputs(context.WithoutCancel(ctx), id, names); derr != nil {
			g.log.Warn("delete the files of a refused submit", "job", id, "err", derr)
		}
	}
	if p := problemOf(err); p.Status == http.StatusRequestEntityTooLarge {
		drainBody(w, r.Body, drainLimit(lim.body()))
		w.Header().Set("Connection", "close")
	}
	fail(w, r, err, "")
}

// errExisting: an idempotency key named an existing job (not an error of
// the request).
var errExisting = errors.New("the idempotency key names an existing job")

// fileList is a job's files: its inputs as its spec recorded them, and
// its outputs (the result archive, once an attempt stored one).
type fileList struct {
	JobID   string           `json:"job_id"`
	Inputs  []domain.FileRef `json:"inputs"`
	Outputs []domain.FileRef `json:"outputs"`
	// Download fetches the outputs as one zip (absent until there is one).
	Download string `json:"download,omitempty"`
}

// GET /jobs/{id}/files
func (g *Gateway) listFiles(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	list, err := g.fileList(r.Context(), id)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (g *Gateway) fileList(ctx context.Context, id string) (*fileList, error) {
	snap, err := g.store.Read(ctx, id)
	if err != nil {
		return nil, err
	}
	list := &fileList{JobID: id, Inputs: snap.Job.Spec.Files, Outputs: []domain.FileRef{}}
	if list.Inputs == nil {
		list.Inputs = []domain.FileRef{}
	}
	fs, err := g.files(ctx)
	if err != nil {
		return nil, err
	}
	res, err := fs.ResultInfo(ctx, id)
	switch {
	case err == nil:
		list.Outputs = append(list.Outputs, res)
		list.Download = jobURL(id) + "/download"
	case !errors.Is(err, files.ErrNoFile):
		return nil, err
	}
	return list, nil
}

// GET /jobs/{id}/download: the result archive of a job that ended (200,
// application/zip); the job itself while it has not (202).
func (g *Gateway) download(w http.ResponseWriter, r *http.Request) {
	id, err := jobID(r)
	if err != nil {
		fail(w, r, err, "")
		return
	}
	ctx := r.Context()
	snap, err := g.store.Read(ctx, id)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	if !snap.Job.State.Terminal() {
		w.Header().Set("Retry-After", "1")
		writeJSON(w, http.StatusAccepted, g.view(ctx, snap.Job))
		return
	}
	fs, err := g.files(ctx)
	if err != nil {
		fail(w, r, err, id)
		return
	}
	res, err := fs.Result(ctx, id)
	if errors.Is(err, files.ErrNoFile) {
		p := newProblem(problemNoArchive, http.StatusNotFound, fmt.Sprintf(
			"job %s ended (%s) without a result archive: only shell jobs (jetflow worker --exec) and HTTP workers that upload one have it", id, snap.Job.State))
		fail(w, r, p, id)
		return
	}
	if err != nil {
		fail(w, r, err, id)
		return
	}
	defer res.Close()
	info, err := res.Info()
	if err != nil {
		fail(w, r, err, id)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/zip")
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": id + ".zip"}))
	h.Set("Content-Length", fmt.Sprint(info.Size))
	h.Set("Digest", info.Digest)
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, res); err != nil {
		g.log.Debug("download", "job", id, "err", err)
	}
}

// jobExists reports whether a job of this id exists (or could not be
// looked at: then its files are kept for the sweep to judge).
func (g *Gateway) jobExists(ctx context.Context, id string) bool {
	_, err := g.store.Current(ctx, id)
	return !errors.Is(err, commands.ErrNotFound)
}
