package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Staged uploads. A file sent in pieces (the command protocol's file.put
// and file.result, whose messages are bounded) is stored chunk by chunk,
// each an object of its own, "<upload>/<offset>/<name>", under an upload's
// handle, until the submit (or the last chunk of a result archive) joins
// its chunks into the file: any engine may take any chunk. An upload's
// handle names no job: Sweep deletes its chunks once the newest of them is
// older than the sweep's grace, used or not.

// MaxChunkBytes bounds one chunk of a staged file, and one piece of a file
// read by offset (ReadInput, ReadResult).
const MaxChunkBytes = 512 << 10

// uploadPrefix starts every upload's handle; a job's id never does.
const uploadPrefix = "up-"

// uploadSecretLen is the length of a handle's secret: 16 random bytes in
// unpadded base64url.
const uploadSecretLen = 22

// ErrStaged: a staged file's chunks do not make the file (one is missing,
// or they overlap). It is the client's mistake.
var ErrStaged = errors.New("the staged chunks do not make the file")

// NewUpload returns a new upload's handle: "up-" and 16 random bytes. Only
// whoever was given it can add to, or use, the upload.
func NewUpload() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return uploadPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// ValidUpload reports whether h is the shape of an upload's handle.
func ValidUpload(h string) bool {
	if len(h) != len(uploadPrefix)+uploadSecretLen || !strings.HasPrefix(h, uploadPrefix) {
		return false
	}
	for _, c := range []byte(h[len(uploadPrefix):]) {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// chunkKey is the object of the chunk of a staged file that starts at
// offset.
func chunkKey(upload, name string, offset int64) string {
	return upload + "/" + strconv.FormatInt(offset, 10) + "/" + name
}

// PutChunk stores the chunk of a staged file (name, checked by the caller)
// that starts at offset. Storing one again replaces it.
func (s *Store) PutChunk(ctx context.Context, upload, name string, offset int64, data []byte) error {
	if !ValidUpload(upload) {
		return fmt.Errorf("upload %q: not an upload's handle", upload)
	}
	if _, err := s.obs.Put(ctx, jetstream.ObjectMeta{Name: chunkKey(upload, name, offset)}, bytes.NewReader(data)); err != nil {
		return fmt.Errorf("store a chunk of %s: %w", name, err)
	}
	return nil
}

// Staged is a staged file of size bytes read whole: its chunks one after
// the other, each starting where the one before ended. Reading fails with
// ErrStaged when a chunk is missing or runs past size.
type Staged struct {
	s      *Store
	ctx    context.Context
	upload string
	name   string
	size   int64
	off    int64 // of the next chunk
	cur    io.Reader
	keys   []string // the chunks read
}

// Staged opens the staged file name of upload, of size bytes.
func (s *Store) Staged(ctx context.Context, upload, name string, size int64) *Staged {
	return &Staged{s: s, ctx: ctx, upload: upload, name: name, size: size}
}

func (r *Staged) Read(p []byte) (int, error) {
	for {
		if r.cur != nil {
			n, err := r.cur.Read(p)
			if err == io.EOF {
				r.cur, err = nil, nil
			}
			if n > 0 || err != nil {
				return n, err
			}
			continue
		}
		if r.off == r.size && (r.size > 0 || len(r.keys) > 0) {
			return 0, io.EOF
		}
		key := chunkKey(r.upload, r.name, r.off)
		b, err := r.s.obs.GetBytes(r.ctx, key)
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return 0, fmt.Errorf("%s: no chunk at offset %d of %d bytes: %w", r.name, r.off, r.size, ErrStaged)
		}
		if err != nil {
			return 0, fmt.Errorf("%s: chunk at offset %d: %w", r.name, r.off, err)
		}
		r.keys = append(r.keys, key)
		if len(b) == 0 && r.size > 0 || r.off+int64(len(b)) > r.size {
			return 0, fmt.Errorf("%s: the chunk at offset %d (%d bytes) does not fit a file of %d bytes: %w",
				r.name, r.off, len(b), r.size, ErrStaged)
		}
		r.off += int64(len(b))
		r.cur = bytes.NewReader(b)
	}
}

// Drop deletes the chunks read (once the file they make is stored);
// those it did not read are left to Sweep.
func (r *Staged) Drop(ctx context.Context) error {
	var errs []error
	for _, k := range r.keys {
		if err := r.s.obs.Delete(ctx, k); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
