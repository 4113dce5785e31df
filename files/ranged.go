package files

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/commands"
	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Reads by offset: a file read in pieces, each in one bounded message (the
// command protocol's file.input and file.download). A piece is read from
// the messages the object store keeps the file's chunks in, by direct
// gets: its reply carries a cursor (the object's version, the stream
// sequence of the chunk that holds the next offset and where that chunk
// starts), so that reading a file piece after piece reads each chunk
// once. Without a cursor, the chunks before the offset are walked from the
// first.

// ErrBadCursor: a cursor that is not one a read handed out.
var ErrBadCursor = errors.New("the cursor is not one a read of this file handed out")

// ErrFileChanged: the file was replaced between two reads of its pieces.
var ErrFileChanged = fmt.Errorf("the file was replaced while it was read: read it again from the start: %w", commands.ErrConflict)

// Piece is a piece of a file read by offset.
type Piece struct {
	Data []byte
	// Next is the offset after Data; EOF says it is the file's end.
	Next int64
	EOF  bool
	// Cursor reads on from Next.
	Cursor string
}

// ReadInput reads at most max bytes (at most MaxChunkBytes) of a job's
// input file f from offset: the file the job's spec recorded (its digest
// the recorded one, else it was replaced and is refused, as Input does).
func (s *Store) ReadInput(ctx context.Context, jobID string, f domain.FileRef, offset int64, max int, cursor string) (Piece, error) {
	if err := commands.CheckFileName(f.Name); err != nil {
		return Piece{}, err
	}
	info, err := s.obs.GetInfo(ctx, InputKey(jobID, f.Name))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return Piece{}, fmt.Errorf("input %s of job %s: %w", f.Name, jobID, ErrNoFile)
	}
	if err != nil {
		return Piece{}, fmt.Errorf("input %s of job %s: %w", f.Name, jobID, err)
	}
	if f.Digest != "" && info.Digest != f.Digest {
		return Piece{}, fmt.Errorf("input %s of job %s: its digest %s is not the %s the job was submitted with",
			f.Name, jobID, info.Digest, f.Digest)
	}
	return s.readPiece(ctx, info, offset, max, cursor)
}

// ReadResult reads at most max bytes (at most MaxChunkBytes) of a job's
// result archive from offset, and describes the archive; ErrNoFile if it
// has none.
func (s *Store) ReadResult(ctx context.Context, jobID string, offset int64, max int, cursor string) (domain.FileRef, Piece, error) {
	info, err := s.obs.GetInfo(ctx, ResultKey(jobID))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return domain.FileRef{}, Piece{}, fmt.Errorf("result of job %s: %w", jobID, ErrNoFile)
	}
	if err != nil {
		return domain.FileRef{}, Piece{}, fmt.Errorf("result of job %s: %w", jobID, err)
	}
	p, err := s.readPiece(ctx, info, offset, max, cursor)
	return ref(ResultName, info), p, err
}

// ReadResultJSON reads at most max bytes (at most MaxChunkBytes) of the
// result of a job kept as a file (domain.Job.ResultRef f) from offset,
// refused unless the object still has the recorded size and digest.
func (s *Store) ReadResultJSON(ctx context.Context, jobID string, f domain.FileRef, offset int64, max int, cursor string) (Piece, error) {
	if !validResultJSONName(f.Name) {
		return Piece{}, fmt.Errorf("result of job %s: %q is not a result's name", jobID, f.Name)
	}
	info, err := s.obs.GetInfo(ctx, jobID+"/"+f.Name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return Piece{}, fmt.Errorf("result of job %s (%s): %w", jobID, f.Name, ErrNoFile)
	}
	if err != nil {
		return Piece{}, fmt.Errorf("result of job %s: %w", jobID, err)
	}
	if info.Digest != f.Digest || int64(info.Size) != f.Size {
		return Piece{}, fmt.Errorf("result of job %s: %s (%d bytes) is not the %s (%d bytes) its event recorded",
			jobID, info.Digest, info.Size, f.Digest, f.Size)
	}
	return s.readPiece(ctx, info, offset, max, cursor)
}

// at is where a chunk of an object is: the object's version (NUID), the
// chunk's stream sequence and its first byte's offset in the object.
type at struct {
	nuid  string
	seq   uint64
	start int64
}

func (a at) encode() string {
	return base64.RawURLEncoding.EncodeToString([]byte(a.nuid + "." + strconv.FormatUint(a.seq, 10) + "." + strconv.FormatInt(a.start, 10)))
}

func decodeAt(s string) (at, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) > 256 {
		return at{}, ErrBadCursor
	}
	parts := strings.Split(string(b), ".")
	if len(parts) != 3 || parts[0] == "" {
		return at{}, ErrBadCursor
	}
	seq, err1 := strconv.ParseUint(parts[1], 10, 64)
	start, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || seq == 0 || start < 0 {
		return at{}, ErrBadCursor
	}
	return at{nuid: parts[0], seq: seq, start: start}, nil
}

// readPiece reads at most max bytes of the object info from offset.
func (s *Store) readPiece(ctx context.Context, info *jetstream.ObjectInfo, offset int64, max int, cursor string) (Piece, error) {
	size := int64(info.Size)
	if offset < 0 || offset > size {
		return Piece{}, &commands.InputError{Field: "offset", Value: strconv.FormatInt(offset, 10),
			Reason: fmt.Sprintf("want 0 to the file's size, %d", size)}
	}
	if max <= 0 || max > MaxChunkBytes {
		max = MaxChunkBytes
	}
	pos := at{nuid: info.NUID, seq: 1}
	if cursor != "" {
		c, err := decodeAt(cursor)
		if err != nil {
			return Piece{}, err
		}
		if c.nuid != info.NUID {
			return Piece{}, ErrFileChanged
		}
		if c.start <= offset {
			pos = c
		}
	}
	p := Piece{Next: offset}
	if offset == size {
		p.EOF, p.Cursor = true, pos.encode()
		return p, nil
	}
	stream, err := s.js.Stream(ctx, "OBJ_"+streams.FilesBucket)
	if err != nil {
		return Piece{}, err
	}
	subj := "$O." + streams.FilesBucket + ".C." + info.NUID
	for p.Next < size && len(p.Data) < max {
		m, err := stream.GetMsg(ctx, pos.seq, jetstream.WithGetMsgSubject(subj))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return Piece{}, ErrFileChanged // its chunks were purged: replaced
		}
		if err != nil {
			return Piece{}, err
		}
		pos.seq = m.Sequence
		end := pos.start + int64(len(m.Data))
		if end > p.Next {
			from := p.Next - pos.start
			n := min(int64(max-len(p.Data)), end-p.Next)
			p.Data = append(p.Data, m.Data[from:from+n]...)
			p.Next += n
		}
		if p.Next < end {
			break // the chunk holds the next offset: the cursor points at it
		}
		pos = at{nuid: info.NUID, seq: m.Sequence + 1, start: end}
	}
	p.EOF = p.Next == size
	p.Cursor = pos.encode()
	return p, nil
}
