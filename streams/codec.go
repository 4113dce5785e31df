package streams

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/jetflow/jetflow/internal/domain"

	"github.com/vmihailenco/msgpack/v5"
)

// ErrBadRecord is returned (wrapped) when bytes read from JetStream do not
// decode into the record they should hold.
var ErrBadRecord = errors.New("jetflow: malformed record")

var encPool = sync.Pool{New: func() any {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	return &pooledEnc{buf: &buf, enc: enc}
}}

type pooledEnc struct {
	buf *bytes.Buffer
	enc *msgpack.Encoder
}

// Marshal encodes v as msgpack into a new slice.
func Marshal(v any) ([]byte, error) {
	pe := encPool.Get().(*pooledEnc)
	pe.buf.Reset()
	ok, err := encodeFast(pe.enc, v)
	if !ok {
		err = pe.enc.Encode(v)
	}
	out := append([]byte(nil), pe.buf.Bytes()...)
	if pe.buf.Cap() <= 1<<16 {
		encPool.Put(pe)
	}
	return out, err
}

// Unmarshal decodes msgpack data into v, after CheckMsgpack. Fields that v
// does not know are skipped, so that older code reads newer records.
func Unmarshal(data []byte, v any) (err error) {
	if err := CheckMsgpack(data); err != nil {
		return err
	}
	defer recoverDecode(&err)
	return msgpack.Unmarshal(data, v)
}

// recoverDecode turns a panic of msgpack's decoder into an error: it
// panics on some input that CheckMsgpack lets through (a nil where a
// time.Time is: reflect's IsNil of a struct), and a record that does not
// decode must not stop the process that reads it.
func recoverDecode(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("msgpack: %v", p)
	}
}

// UnmarshalStrict is Unmarshal for input from outside (commands): fields
// that v does not know are errors.
func UnmarshalStrict(data []byte, v any) (err error) {
	if err := CheckMsgpack(data); err != nil {
		return err
	}
	defer recoverDecode(&err)
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields(true)
	return dec.Decode(v)
}

// EncodeEvent encodes an event envelope.
func EncodeEvent(e *domain.Event) ([]byte, error) {
	if e.V == 0 {
		e.V = domain.EnvelopeVersion
	}
	return Marshal(e)
}

// DecodeEvent decodes an event envelope and checks that it is one.
func DecodeEvent(data []byte) (*domain.Event, error) {
	var e domain.Event
	if err := Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("%w: event: %v", ErrBadRecord, err)
	}
	if e.V < 1 || e.Type == "" || e.JobID == "" {
		return nil, fmt.Errorf("%w: event without version, type or job id", ErrBadRecord)
	}
	if e.V > domain.EnvelopeVersion {
		return nil, fmt.Errorf("%w: event envelope version %d is newer than this build (%d)", ErrBadRecord, e.V, domain.EnvelopeVersion)
	}
	e.Hash = ChainHash(e.Prev, data)
	return &e, nil
}

// EncodeJob encodes a job record.
func EncodeJob(j *domain.Job) ([]byte, error) { return Marshal(j) }

// DecodeJob decodes a job record.
func DecodeJob(data []byte) (*domain.Job, error) {
	var j domain.Job
	if err := Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("%w: job: %v", ErrBadRecord, err)
	}
	if j.ID == "" {
		return nil, fmt.Errorf("%w: job record without id", ErrBadRecord)
	}
	return &j, nil
}

// DecodeWorkItem decodes a work item.
func DecodeWorkItem(data []byte) (*domain.WorkItem, error) {
	var w domain.WorkItem
	if err := Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: work item: %v", ErrBadRecord, err)
	}
	if w.Job.ID == "" || w.Job.Seq == 0 {
		return nil, fmt.Errorf("%w: work item without job id or sequence", ErrBadRecord)
	}
	return &w, nil
}
