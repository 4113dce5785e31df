package jetflow

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/engine"
	"github.com/jetflow/jetflow/files"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/projections"
)

// A token client's files go over the command protocol in chunks of at most
// files.MaxChunkBytes (docs/protocol.md, "Files"): up with file.put (then
// file.submit) and file.result, down with file.input and file.download,
// each checked against its size and digest.

// stagedFile is a file of a submit with files, as file.submit names it.
type stagedFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// stagedReply answers a chunk.
type stagedReply struct {
	Upload string `json:"upload"`
	Next   int64  `json:"next"`
}

// sendWithFiles stages each upload in chunks, then submits the request
// naming them: the engine stores them under the job's id and submits it
// (docs/files.md, "Crash safety").
func (c command) sendWithFiles(ctx context.Context, req *commands.SubmitRequest) (*projections.JobView, bool, error) {
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
	upload := ""
	staged := make([]stagedFile, 0, len(req.Uploads))
	buf := make([]byte, files.MaxChunkBytes)
	for _, u := range req.Uploads {
		h := sha256.New()
		var off int64
		for {
			n, rerr := io.ReadFull(u.Reader, buf)
			if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
				return nil, false, fmt.Errorf("read %s: %w", u.Name, rerr)
			}
			if n > 0 || off == 0 {
				var out stagedReply
				put := map[string]any{"name": u.Name, "offset": off, "data": buf[:n]}
				if upload != "" {
					put["upload"] = upload
				}
				if err := c.call(ctx, "file.put", put, &out, 30*time.Second); err != nil {
					return nil, false, fmt.Errorf("%s: %w", u.Name, err)
				}
				upload = out.Upload
				h.Write(buf[:n])
				off += int64(n)
			}
			if rerr != nil {
				break
			}
		}
		staged = append(staged, stagedFile{Name: u.Name, Size: off, Digest: jetstream.GetObjectDigestValue(h)})
	}
	out, err := c.do(ctx, "file.submit", map[string]any{"upload": upload, "files": staged, "job": &r})
	if err != nil {
		return nil, false, err
	}
	return out.Job, out.Created != nil && *out.Created, nil
}

// piece is a piece of a file read by offset.
type piece struct {
	Job    *projections.JobView `json:"job"` // file.download of a job that has not ended
	File   domain.FileRef       `json:"file"`
	Offset int64                `json:"offset"`
	Data   []byte               `json:"data"`
	Next   int64                `json:"next"`
	EOF    bool                 `json:"eof"`
	Cursor string               `json:"cursor"`
}

// pieces reads a file piece by piece with verb (file.input or
// file.download) and req (the file's; offset and cursor are added), and
// checks its size and digest at its end.
type pieces struct {
	c    command
	ctx  context.Context
	verb string
	req  map[string]any
	// want is the file as the caller expects it (its size and digest, if
	// set); the first piece says what the file is.
	want   domain.FileRef
	file   *domain.FileRef
	h      hash.Hash
	buf    bytes.Reader
	next   int64
	cursor string
	eof    bool
	// first is the first piece, read by open.
	first *piece
}

// open reads the first piece.
func (p *pieces) open() (*piece, error) {
	p.h = sha256.New()
	pc, err := p.fetch()
	if err != nil {
		return nil, err
	}
	p.first = pc
	return pc, nil
}

func (p *pieces) fetch() (*piece, error) {
	p.req["offset"] = p.next
	if p.cursor != "" {
		p.req["cursor"] = p.cursor
	}
	var pc piece
	if err := p.c.call(p.ctx, p.verb, p.req, &pc, 30*time.Second); err != nil {
		return nil, err
	}
	if pc.Job != nil {
		return &pc, nil
	}
	if p.file == nil {
		f := pc.File
		p.file = &f
		if p.want.Digest != "" && f.Digest != p.want.Digest {
			return nil, fmt.Errorf("%s: its digest %s is not the %s expected", f.Name, f.Digest, p.want.Digest)
		}
	}
	if pc.File.Digest != p.file.Digest {
		return nil, fmt.Errorf("%s: %w", p.file.Name, files.ErrFileChanged)
	}
	if pc.Offset != p.next || pc.Next != pc.Offset+int64(len(pc.Data)) || (len(pc.Data) == 0 && !pc.EOF) {
		return nil, fmt.Errorf("%s: a piece at offset %d of %d bytes does not follow offset %d", p.file.Name, pc.Offset, len(pc.Data), p.next)
	}
	p.h.Write(pc.Data)
	p.buf.Reset(pc.Data)
	p.next, p.cursor, p.eof = pc.Next, pc.Cursor, pc.EOF
	if p.eof {
		if p.next != p.file.Size {
			return nil, fmt.Errorf("%s: %d bytes, want %d", p.file.Name, p.next, p.file.Size)
		}
		if got := jetstream.GetObjectDigestValue(p.h); got != p.file.Digest {
			return nil, fmt.Errorf("%s: the bytes read have the digest %s, not %s", p.file.Name, got, p.file.Digest)
		}
	}
	return &pc, nil
}

func (p *pieces) Read(b []byte) (int, error) {
	for p.buf.Len() == 0 {
		if p.eof {
			return 0, io.EOF
		}
		if _, err := p.fetch(); err != nil {
			return 0, err
		}
	}
	return p.buf.Read(b)
}

func (p *pieces) Close() error { return nil }

// openInput reads an input file of a job held by an HTTP worker of the
// token's (any, with an admin's): the engine's file.input, as GET
// /jobs/{id}/inputs/{name} for the job's holder.
func (c command) openInput(ctx context.Context, jobID string, f domain.FileRef) (io.ReadCloser, error) {
	if err := commands.CheckFileName(f.Name); err != nil {
		return nil, err
	}
	p := &pieces{c: c, ctx: ctx, verb: "file.input", req: map[string]any{"id": jobID, "name": f.Name}, want: f}
	if _, err := p.open(); err != nil {
		if errors.Is(err, commands.ErrNotFound) {
			return nil, fmt.Errorf("input %s of job %s: %w (%v)", f.Name, jobID, ErrNoFile, err)
		}
		return nil, err
	}
	return p, nil
}

// download writes a job's result archive, piece by piece (file.download).
func (c command) download(ctx context.Context, id string, w io.Writer) (domain.FileRef, error) {
	p := &pieces{c: c, ctx: ctx, verb: "file.download", req: map[string]any{"id": id}}
	first, err := p.open()
	var pr *engine.Problem
	if errors.As(err, &pr) && pr.Type == engine.ProblemNoArchive {
		return domain.FileRef{}, fmt.Errorf("result of job %s: %w", id, ErrNoFile)
	}
	if err != nil {
		return domain.FileRef{}, err
	}
	if first.Job != nil {
		return domain.FileRef{}, fmt.Errorf("download %s (%s): %w", id, first.Job.State, ErrNotEnded)
	}
	if _, err := io.Copy(w, p); err != nil {
		return domain.FileRef{}, fmt.Errorf("download %s: %w", id, err)
	}
	return *p.file, nil
}

// result reads a job's result kept as a file, piece by piece
// (file.download with result), its size and digest checked at its end.
func (c command) result(ctx context.Context, id string, ref domain.FileRef) ([]byte, error) {
	if ref.Size < 0 || ref.Size > commands.MaxResultBytes {
		return nil, fmt.Errorf("result of job %s: %d bytes, more than a result may have", id, ref.Size)
	}
	p := &pieces{c: c, ctx: ctx, verb: "file.download", req: map[string]any{"id": id, "result": true}, want: ref}
	first, err := p.open()
	if err != nil {
		return nil, err
	}
	if first.Job != nil {
		return nil, fmt.Errorf("result of job %s (%s): %w", id, first.Job.State, ErrNotEnded)
	}
	buf := bytes.NewBuffer(make([]byte, 0, ref.Size))
	if _, err := io.Copy(buf, io.LimitReader(p, commands.MaxResultBytes+1)); err != nil {
		return nil, fmt.Errorf("result of job %s: %w", id, err)
	}
	if int64(buf.Len()) != ref.Size {
		return nil, fmt.Errorf("result of job %s: %d bytes, want %d", id, buf.Len(), ref.Size)
	}
	return buf.Bytes(), nil
}

// putResult stores a job's result archive in chunks (file.result), for the
// HTTP worker of the token's that holds the job (any, with an admin's): the
// last chunk says so, with the archive's digest, and the engine stores it.
func (c command) putResult(ctx context.Context, jobID string, r io.Reader) (domain.FileRef, error) {
	h := sha256.New()
	cur, next := make([]byte, files.MaxChunkBytes), make([]byte, files.MaxChunkBytes)
	n, err := io.ReadFull(r, cur)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return domain.FileRef{}, fmt.Errorf("read the result of job %s: %w", jobID, err)
	}
	ended := err != nil
	upload := ""
	var off int64
	for {
		m := 0
		if !ended {
			var rerr error
			m, rerr = io.ReadFull(r, next)
			if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
				return domain.FileRef{}, fmt.Errorf("read the result of job %s: %w", jobID, rerr)
			}
			ended = rerr != nil
		}
		last := ended && m == 0
		h.Write(cur[:n])
		req := map[string]any{"id": jobID, "offset": off, "data": cur[:n]}
		if upload != "" {
			req["upload"] = upload
		}
		if last {
			req["last"], req["digest"] = true, jetstream.GetObjectDigestValue(h)
			var out struct {
				File domain.FileRef `json:"file"`
			}
			if err := c.call(ctx, "file.result", req, &out, 30*time.Second); err != nil {
				return domain.FileRef{}, err
			}
			return out.File, nil
		}
		var out stagedReply
		if err := c.call(ctx, "file.result", req, &out, 30*time.Second); err != nil {
			return domain.FileRef{}, err
		}
		upload, off = out.Upload, off+int64(n)
		cur, next, n = next, cur, m
	}
}
