package cmdservice

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine/internal/auth"
	"github.com/jetflow/jetflow/engine/internal/problems"
	"github.com/jetflow/jetflow/engine/internal/store"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// Files over the command protocol, whose messages are bounded
// (MaxCommandBytes): a file goes up in chunks of at most
// files.MaxChunkBytes, each staged in the object store under an upload's
// handle (file.put; file.result for a result archive), and comes down in
// pieces read by offset (file.input, file.download). A submit with files
// (file.submit) then stores the staged files under the job's id, which the
// engine chooses (a new id, or the one the idempotency key derives) as the
// HTTP API does, and submits the job recording them: the crash safety of
// docs/files.md. The access rules are the HTTP routes': a submit's files
// need what a submit needs, a job's inputs and its result archive are the
// claimant worker's (a worker that holds the job, registered with the
// token, or any with an admin's), its archive's download is a read.

// DefaultMaxUpload bounds a staged file, and a submit's files together,
// by default (Config.MaxUpload): the gateway's default.
const DefaultMaxUpload = 100 << 20

// resultChunkName is the name a result archive's chunks are staged under.
const resultChunkName = "result.zip"

func (c *CommandServer) maxUpload() int64 {
	if c.cfg.MaxUpload > 0 {
		return c.cfg.MaxUpload
	}
	return DefaultMaxUpload
}

// filesStore is the files bucket; unavailable (503) when it cannot be
// opened.
func (c *CommandServer) filesStore(ctx context.Context) (*files.Store, error) {
	fs, err := c.store.Files(ctx)
	if err != nil {
		return nil, problems.New(problems.Unavailable, http.StatusServiceUnavailable, err.Error())
	}
	return fs, nil
}

// chunk is a chunk of a staged file: which upload ("": a new one), where
// it starts, its bytes.
type chunk struct {
	Upload string `json:"upload,omitempty" msgpack:"upload,omitempty"`
	Offset int64  `json:"offset" msgpack:"offset"`
	Data   []byte `json:"data" msgpack:"data"`
}

// stage checks a chunk of the staged file name and stores it; it returns
// the upload's handle (a new one for a chunk without).
func (c *CommandServer) stage(ctx context.Context, ch *chunk, name string) (string, error) {
	if ch.Upload != "" && !files.ValidUpload(ch.Upload) {
		return "", &commands.InputError{Field: "upload", Value: fmt.Sprintf("%q", ch.Upload), Reason: "not an upload's handle (leave it out to start one)"}
	}
	if ch.Offset < 0 {
		return "", &commands.InputError{Field: "offset", Value: fmt.Sprint(ch.Offset), Reason: "must not be negative"}
	}
	if len(ch.Data) > files.MaxChunkBytes {
		return "", problems.New(problems.PayloadTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("a chunk of %d bytes is over the limit of %d", len(ch.Data), files.MaxChunkBytes))
	}
	if len(ch.Data) == 0 && ch.Offset > 0 {
		return "", &commands.InputError{Field: "data", Reason: "empty: only an empty file has an empty chunk, at offset 0"}
	}
	if end := ch.Offset + int64(len(ch.Data)); end > c.maxUpload() {
		return "", problems.New(problems.PayloadTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("%s: %d bytes are over the upload limit of %d", name, end, c.maxUpload()))
	}
	fs, err := c.filesStore(ctx)
	if err != nil {
		return "", err
	}
	up := ch.Upload
	if up == "" {
		if up, err = files.NewUpload(); err != nil {
			return "", err
		}
	}
	return up, fs.PutChunk(ctx, up, name, ch.Offset, ch.Data)
}

// stagedReply answers a stored chunk: the upload, and the offset after the
// chunk.
type stagedReply struct {
	Upload string `json:"upload"`
	Next   int64  `json:"next"`
}

type filePutCommand struct {
	chunk `msgpack:",inline"`
	Name  string `json:"name" msgpack:"name"`
}

// filePut: a chunk of an input file of a submit to come (file.submit).
func (c *CommandServer) filePut(k *call) *cmdReply {
	var req filePutCommand
	if r := k.decode(&req); r != nil {
		return r
	}
	if err := commands.CheckFileName(req.Name); err != nil {
		return fail(err, "")
	}
	up, err := c.stage(k.ctx, &req.chunk, req.Name)
	if err != nil {
		return fail(err, "")
	}
	return &cmdReply{Body: &stagedReply{Upload: up, Next: req.Offset + int64(len(req.Data))}}
}

// StagedFile is a file of a submit with files: its name, and the size and
// digest ("SHA-256=<base64url>", as the object store's) its chunks make.
type StagedFile struct {
	Name   string `json:"name" msgpack:"name"`
	Size   int64  `json:"size" msgpack:"size"`
	Digest string `json:"digest" msgpack:"digest"`
}

// rawBody keeps a field's encoded value, JSON or msgpack, to decode it
// later as a command of its own.
type rawBody []byte

func (r *rawBody) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// DecodeMsgpack implements msgpack.CustomDecoder.
func (r *rawBody) DecodeMsgpack(dec *msgpack.Decoder) error {
	b, err := dec.DecodeRaw()
	*r = rawBody(b)
	return err
}

type fileSubmitCommand struct {
	Upload string       `json:"upload" msgpack:"upload"`
	Files  []StagedFile `json:"files" msgpack:"files"`
	// Job is the submit request, as the submit command's body.
	Job rawBody `json:"job" msgpack:"job"`
}

// maxDigestBytes bounds a digest's text.
const maxDigestBytes = 128

// fileSubmit: a submit with the files of an upload (POST /jobs as
// multipart/form-data). The job's id is chosen first, the staged files
// stored under it, then the job submitted recording them; a refusal
// deletes them, a crash leaves them to the FileSweeper.
func (c *CommandServer) fileSubmit(k *call) *cmdReply {
	var cmd fileSubmitCommand
	if r := k.decode(&cmd); r != nil {
		return r
	}
	if len(cmd.Job) == 0 {
		return fail(&commands.InputError{Field: "job", Reason: "is required: the submit request"}, "")
	}
	var req commands.SubmitRequest
	if err := decodeCommand(cmd.Job, k.asJSON, &req); err != nil {
		return &cmdReply{Error: undecodable(k.verb, cmd.Job, k.asJSON, &req, err)}
	}
	if err := commands.CheckGivenNamespace(cmd.Job, k.asJSON); err != nil {
		return fail(err, "")
	}
	if !files.ValidUpload(cmd.Upload) {
		return fail(&commands.InputError{Field: "upload", Value: fmt.Sprintf("%q", cmd.Upload), Reason: "want the handle file.put answered"}, "")
	}
	if len(cmd.Files) == 0 {
		return fail(&commands.InputError{Field: "files", Reason: "none: a submit without files is the submit command"}, "")
	}
	if len(cmd.Files) > commands.MaxFiles {
		return fail(&commands.InputError{Field: "files", Reason: fmt.Sprintf("more than %d files", commands.MaxFiles)}, "")
	}
	names := make([]string, len(cmd.Files))
	var total int64
	for i, f := range cmd.Files {
		names[i] = f.Name
		if f.Size < 0 || f.Digest == "" || len(f.Digest) > maxDigestBytes {
			return fail(&commands.InputError{Field: "files", Value: fmt.Sprintf("%q", f.Name),
				Reason: fmt.Sprintf("want a size of 0 or more and a digest of 1-%d bytes", maxDigestBytes)}, "")
		}
		total += f.Size
	}
	if err := commands.CheckFileNames(names, commands.MaxFiles); err != nil {
		return fail(err, "")
	}
	if total > c.maxUpload() {
		return fail(problems.New(problems.PayloadTooLarge, http.StatusRequestEntityTooLarge,
			fmt.Sprintf("the files hold %d bytes, over the limit of %d", total, c.maxUpload())), "")
	}
	ctx, p := k.ctx, k.p
	ns, err := p.Scope(commands.ActSubmit, req.Namespace)
	if err != nil {
		return fail(err, "")
	}
	req.Namespace = ns
	if p != nil {
		if req.User, err = commands.SubmitUser(p.Role, p.Name, req.User); err != nil {
			return fail(err, "")
		}
	}
	if err := auth.CheckRefs(ctx, c.store, p, &req); err != nil {
		return fail(err, "")
	}
	if err := req.Validate(); err != nil {
		return fail(err, "")
	}
	fs, err := c.filesStore(ctx)
	if err != nil {
		return fail(err, "")
	}
	id := domain.NewID()
	if req.IdempotencyKey != "" {
		if ns == "" {
			ns = domain.DefaultNS
		}
		id = domain.KeyedID(ns, req.IdempotencyKey)
		// A key that names a job already: that job is the answer, and its
		// files are not written again.
		if snap, err := c.store.Read(ctx, id); err == nil {
			created := false
			return &cmdReply{Job: projections.View(snap.Job), Created: &created}
		} else if !errors.Is(err, commands.ErrNotFound) {
			return fail(err, "")
		}
	}
	var stored []string
	staged := make([]*files.Staged, 0, len(cmd.Files))
	refused := func(err error) *cmdReply {
		// Nothing is kept, unless a job of this id exists meanwhile:
		// another submit with the same idempotency key won, and the names
		// may be its files.
		bg := context.WithoutCancel(ctx)
		if _, cerr := c.store.Current(bg, id); errors.Is(cerr, commands.ErrNotFound) {
			if derr := fs.DeleteInputs(bg, id, stored); derr != nil {
				c.log.Warn("delete the files of a refused submit", "job", id, "err", derr)
			}
		}
		return fail(err, "")
	}
	for _, f := range cmd.Files {
		stored = append(stored, f.Name)
		in := fs.Staged(ctx, cmd.Upload, f.Name, f.Size)
		ref, err := fs.PutInput(ctx, id, f.Name, in)
		if errors.Is(err, files.ErrStaged) {
			err = &commands.InputError{Field: "files", Reason: err.Error()}
		}
		if err == nil && (ref.Size != f.Size || ref.Digest != f.Digest) {
			err = &commands.InputError{Field: "files", Value: fmt.Sprintf("%q", f.Name), Reason: fmt.Sprintf(
				"its chunks make %d bytes of digest %s, not the %d bytes of digest %s given", ref.Size, ref.Digest, f.Size, f.Digest)}
		}
		if err != nil {
			return refused(err)
		}
		staged = append(staged, in)
		req.Files = append(req.Files, ref)
	}
	req.ID = id
	res, err := c.store.Submit(ctx, &req)
	if err != nil {
		return refused(err)
	}
	for _, in := range staged {
		if err := in.Drop(context.WithoutCancel(ctx)); err != nil {
			c.log.Debug("drop the chunks of a submitted file (the sweep will)", "job", id, "err", err)
		}
	}
	created := res.Created
	return &cmdReply{Job: projections.View(res.Job), Created: &created}
}

// errNoWorker is the error of a worker id that is not a registered HTTP
// worker of the token's (as the HTTP API's).
func errNoWorker(id string) error {
	p := problems.New(problems.NotFound, http.StatusNotFound,
		fmt.Sprintf("no worker %q is registered (never, or it stopped beating and expired): register again", id))
	p.WorkerID = id
	return p
}

// claimant refuses a worker that does not hold job id (409 not-claimant),
// or that another token registered (404), as the HTTP API's worker file
// routes do. It returns the job.
//
// Over NATS the worker may be left out (wid ""): it is then the worker that
// holds the job, judged by the same rules (the only worker the HTTP routes
// could be named and let through).
func (c *CommandServer) claimant(ctx context.Context, p *commands.Principal, id, wid string) (*domain.Job, error) {
	if wid == "" {
		snap, err := c.store.Current(ctx, id)
		if err != nil {
			return nil, err
		}
		if !commands.Held(snap.Job) {
			return nil, commands.CheckHolder(snap.Job, snap.Job.Worker)
		}
		wid = snap.Job.Worker
	}
	if p != nil {
		if !commands.IsHTTPWorkerID(wid) {
			return nil, errNoWorker(wid)
		}
		w, err := c.store.Workers().Get(ctx, wid)
		if errors.Is(err, store.ErrWorkerNotFound) {
			return nil, errNoWorker(wid)
		}
		if err != nil {
			return nil, err
		}
		if !p.OwnsWorker(w.WorkerRecord) {
			return nil, errNoWorker(wid)
		}
	}
	snap, err := c.store.Current(ctx, id)
	if err != nil {
		return nil, err
	}
	if err := commands.CheckHolder(snap.Job, wid); err != nil {
		return nil, err
	}
	return snap.Job, nil
}

type fileResultCommand struct {
	ID       string `json:"id" msgpack:"id"`
	WorkerID string `json:"worker_id,omitempty" msgpack:"worker_id,omitempty"` // "": the job's holder
	chunk    `msgpack:",inline"`
	// Last says the archive ends with this chunk: it is then stored, if
	// its chunks make Digest.
	Last   bool   `json:"last,omitempty" msgpack:"last,omitempty"`
	Digest string `json:"digest,omitempty" msgpack:"digest,omitempty"`
}

// fileResult: a chunk of a job's result archive, from the worker that
// holds it (PUT /jobs/{id}/result); the last one stores the archive, once
// it is checked (a zip whose entries stay inside a directory) and the
// worker still holds the job.
func (c *CommandServer) fileResult(k *call) *cmdReply {
	var req fileResultCommand
	if r := k.decodeFor(&req, &req.ID); r != nil {
		return r
	}
	if err := c.sees(k.ctx, k.p, req.ID); err != nil {
		return fail(err, req.ID)
	}
	job, err := c.claimant(k.ctx, k.p, req.ID, req.WorkerID)
	if err != nil {
		return fail(err, req.ID)
	}
	if req.Last && (req.Digest == "" || len(req.Digest) > maxDigestBytes) {
		return fail(&commands.InputError{Field: "digest", Reason: fmt.Sprintf("with last: the archive's digest, 1-%d bytes", maxDigestBytes)}, req.ID)
	}
	up, err := c.stage(k.ctx, &req.chunk, resultChunkName)
	if err != nil {
		return fail(err, req.ID)
	}
	size := req.Offset + int64(len(req.Data))
	if !req.Last {
		return &cmdReply{Body: &stagedReply{Upload: up, Next: size}}
	}
	ref, err := c.storeResult(k, req.ID, job.Worker, up, size, req.Digest)
	if err != nil {
		return fail(err, req.ID)
	}
	return &cmdReply{Body: map[string]any{"file": ref}}
}

// storeResult joins the staged archive of upload (size bytes) in a
// temporary file, checks it is the archive of digest and a zip a worker
// may store, and stores it as job id's result if worker wid still holds it.
func (c *CommandServer) storeResult(k *call, id, wid, upload string, size int64, digest string) (domain.FileRef, error) {
	fs, err := c.filesStore(k.ctx)
	if err != nil {
		return domain.FileRef{}, err
	}
	tmp, err := os.CreateTemp("", "jetflow-result-*.zip")
	if err != nil {
		return domain.FileRef{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	in := fs.Staged(k.ctx, upload, resultChunkName, size)
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), in); err != nil {
		if errors.Is(err, files.ErrStaged) {
			return domain.FileRef{}, &commands.InputError{Field: "offset", Reason: err.Error()}
		}
		return domain.FileRef{}, err
	}
	if got := jetstream.GetObjectDigestValue(h); got != digest {
		return domain.FileRef{}, &commands.InputError{Field: "digest", Value: digest,
			Reason: fmt.Sprintf("the archive's chunks make %d bytes of digest %s", size, got)}
	}
	if err := files.CheckArchive(tmp, size); err != nil {
		return domain.FileRef{}, &commands.InputError{Field: "result", Reason: err.Error()}
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return domain.FileRef{}, err
	}
	// Held still, now that the archive is in: an upload that took longer
	// than the lease must not replace the archive of the attempt after it.
	if _, err := c.claimant(k.ctx, k.p, id, wid); err != nil {
		return domain.FileRef{}, err
	}
	ref, err := fs.PutResult(k.ctx, id, tmp)
	if err != nil {
		return domain.FileRef{}, err
	}
	if err := in.Drop(context.WithoutCancel(k.ctx)); err != nil {
		c.log.Debug("drop the chunks of a stored archive (the sweep will)", "job", id, "err", err)
	}
	return ref, nil
}

// piece is how far a read by offset goes.
type piece struct {
	Offset int64  `json:"offset" msgpack:"offset"`
	Limit  *int   `json:"limit,omitempty" msgpack:"limit,omitempty"`
	Cursor string `json:"cursor,omitempty" msgpack:"cursor,omitempty"`
}

func (p *piece) limit() (int, error) {
	if p.Limit == nil {
		return files.MaxChunkBytes, nil
	}
	if *p.Limit < 1 || *p.Limit > files.MaxChunkBytes {
		return 0, &commands.InputError{Field: "limit", Value: fmt.Sprint(*p.Limit), Reason: fmt.Sprintf("want 1-%d", files.MaxChunkBytes)}
	}
	return *p.Limit, nil
}

// pieceReply is a piece of a file: the file, where the piece starts, its
// bytes, where the next starts, whether it is the last, and the cursor to
// read on with.
type pieceReply struct {
	File   domain.FileRef `json:"file"`
	Offset int64          `json:"offset"`
	Data   []byte         `json:"data"`
	Next   int64          `json:"next"`
	EOF    bool           `json:"eof"`
	Cursor string         `json:"cursor"`
}

// readErr is the problem of a read by offset: a cursor that was not handed
// out is bad-cursor.
func readErr(err error) error {
	if errors.Is(err, files.ErrBadCursor) {
		p := problems.New(problems.BadCursor, http.StatusBadRequest, err.Error())
		p.Field = "cursor"
		return p
	}
	return err
}

type fileInputCommand struct {
	ID       string `json:"id" msgpack:"id"`
	WorkerID string `json:"worker_id,omitempty" msgpack:"worker_id,omitempty"` // "": the job's holder
	Name     string `json:"name" msgpack:"name"`
	piece    `msgpack:",inline"`
}

// fileInput: a piece of an input file of a job, for the worker that holds
// it (GET /jobs/{id}/inputs/{name...}).
func (c *CommandServer) fileInput(k *call) *cmdReply {
	var req fileInputCommand
	if r := k.decodeFor(&req, &req.ID); r != nil {
		return r
	}
	if err := c.sees(k.ctx, k.p, req.ID); err != nil {
		return fail(err, req.ID)
	}
	job, err := c.claimant(k.ctx, k.p, req.ID, req.WorkerID)
	if err != nil {
		return fail(err, req.ID)
	}
	var ref *domain.FileRef
	for i := range job.Spec.Files {
		if job.Spec.Files[i].Name == req.Name {
			ref = &job.Spec.Files[i]
		}
	}
	if ref == nil {
		return fail(problems.New(problems.NotFound, http.StatusNotFound, fmt.Sprintf("job %s has no input file %q", req.ID, req.Name)), req.ID)
	}
	limit, err := req.limit()
	if err != nil {
		return fail(err, req.ID)
	}
	fs, err := c.filesStore(k.ctx)
	if err != nil {
		return fail(err, req.ID)
	}
	p, err := fs.ReadInput(k.ctx, req.ID, *ref, req.Offset, limit, req.Cursor)
	if err != nil {
		return fail(readErr(err), req.ID)
	}
	return &cmdReply{Body: &pieceReply{File: *ref, Offset: req.Offset, Data: p.Data, Next: p.Next, EOF: p.EOF, Cursor: p.Cursor}}
}

type fileDownloadCommand struct {
	ID string `json:"id" msgpack:"id"`
	// Result asks for the job's JSON result kept as a file (its
	// result_ref) instead of its result archive.
	Result bool `json:"result,omitempty" msgpack:"result,omitempty"`
	piece  `msgpack:",inline"`
}

// fileDownload: a piece of the result archive of a job that ended (GET
// /jobs/{id}/download), or with result of its JSON result kept as a file
// (GET /jobs/{id}/result); the job itself while it has not ({"job": Job}).
func (c *CommandServer) fileDownload(k *call) *cmdReply {
	var req fileDownloadCommand
	if r := k.decodeFor(&req, &req.ID); r != nil {
		return r
	}
	limit, err := req.limit()
	if err != nil {
		return fail(err, req.ID)
	}
	snap, err := c.store.ReadSeen(k.ctx, k.p, req.ID)
	if err != nil {
		return fail(err, req.ID)
	}
	if !snap.Job.State.Terminal() {
		return &cmdReply{Job: projections.View(snap.Job)}
	}
	fs, err := c.filesStore(k.ctx)
	if err != nil {
		return fail(err, req.ID)
	}
	if req.Result {
		ref := snap.Job.ResultRef
		if ref == nil {
			return fail(problems.New(problems.NotFound, http.StatusNotFound, fmt.Sprintf(
				"job %s ended (%s) without a result kept as a file: its result (if any) is in the job", req.ID, snap.Job.State)), req.ID)
		}
		p, err := fs.ReadResultJSON(k.ctx, req.ID, *ref, req.Offset, limit, req.Cursor)
		if err != nil {
			return fail(readErr(err), req.ID)
		}
		return &cmdReply{Body: &pieceReply{File: *ref, Offset: req.Offset, Data: p.Data, Next: p.Next, EOF: p.EOF, Cursor: p.Cursor}}
	}
	ref, p, err := fs.ReadResult(k.ctx, req.ID, req.Offset, limit, req.Cursor)
	if errors.Is(err, files.ErrNoFile) {
		return fail(problems.New(problems.NoArchive, http.StatusNotFound, fmt.Sprintf(
			"job %s ended (%s) without a result archive: only shell jobs (jetflow worker --exec) and HTTP workers that upload one have it",
			req.ID, snap.Job.State)), req.ID)
	}
	if err != nil {
		return fail(readErr(err), req.ID)
	}
	return &cmdReply{Body: &pieceReply{File: ref, Offset: req.Offset, Data: p.Data, Next: p.Next, EOF: p.EOF, Cursor: p.Cursor}}
}
