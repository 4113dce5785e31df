package streams

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/jetflow/jetflow/internal/domain"
)

// DecodeJobHead decodes what a job record says of where the job is: its
// id, state, last folded event (Seq) and the spec's namespace, queue and
// type (its subject: JobSubject), and nothing else. A workflow's record
// holds its whole graph; a child's claim asks only whether its parent
// ended, and reads the record this way, skipping the rest without
// decoding it. A value of a known field in a form the encoder does not
// write is decoded by the general decoder instead.
func DecodeJobHead(data []byte) (*domain.Job, error) {
	var j domain.Job
	if err := scanJobHead(data, &j); err != nil {
		if !errors.Is(err, errHeadForm) {
			return nil, fmt.Errorf("%w: job: %v", ErrBadRecord, err)
		}
		if err := decodeJobHeadGeneral(data, &j); err != nil {
			return nil, err
		}
	}
	if j.ID == "" {
		return nil, fmt.Errorf("%w: job record without id", ErrBadRecord)
	}
	return &j, nil
}

// decodeJobHeadGeneral is DecodeJobHead through the general decoder.
func decodeJobHeadGeneral(data []byte, j *domain.Job) error {
	var h struct {
		ID   string `msgpack:"id"`
		Spec struct {
			Namespace string `msgpack:"ns"`
			Type      string `msgpack:"type"`
			Queue     string `msgpack:"queue"`
		} `msgpack:"spec"`
		State domain.State `msgpack:"state"`
		Seq   uint64       `msgpack:"seq"`
	}
	if err := Unmarshal(data, &h); err != nil {
		return fmt.Errorf("%w: job: %v", ErrBadRecord, err)
	}
	*j = domain.Job{ID: h.ID, State: h.State, Seq: h.Seq,
		Spec: domain.Spec{Namespace: h.Spec.Namespace, Type: h.Spec.Type, Queue: h.Spec.Queue}}
	return nil
}

// readMapLen reads a msgpack map header at i.
func readMapLen(b []byte, i int) (n, next int, ok bool) {
	if i >= len(b) {
		return 0, 0, false
	}
	switch c := b[i]; {
	case c >= 0x80 && c <= 0x8f:
		return int(c & 0x0f), i + 1, true
	case c == 0xde && i+3 <= len(b):
		return int(binary.BigEndian.Uint16(b[i+1:])), i + 3, true
	case c == 0xdf && i+5 <= len(b):
		return int(binary.BigEndian.Uint32(b[i+1:])), i + 5, true
	}
	return 0, 0, false
}

// readUint reads a msgpack unsigned integer (or a non-negative fixint) at i.
func readUint(b []byte, i int) (uint64, int, bool) {
	if i >= len(b) {
		return 0, 0, false
	}
	switch c := b[i]; {
	case c <= 0x7f:
		return uint64(c), i + 1, true
	case c == 0xcc && i+2 <= len(b):
		return uint64(b[i+1]), i + 2, true
	case c == 0xcd && i+3 <= len(b):
		return uint64(binary.BigEndian.Uint16(b[i+1:])), i + 3, true
	case c == 0xce && i+5 <= len(b):
		return uint64(binary.BigEndian.Uint32(b[i+1:])), i + 5, true
	case c == 0xcf && i+9 <= len(b):
		return binary.BigEndian.Uint64(b[i+1:]), i + 9, true
	}
	return 0, 0, false
}

// scanJobHead reads the top-level map of a job record, and of its spec.
func scanJobHead(b []byte, j *domain.Job) error {
	if len(b) == 0 {
		return fmt.Errorf("msgpack: %w", errTruncated)
	}
	n, i, ok := readMapLen(b, 0)
	if !ok {
		return errHeadForm
	}
	for range n {
		key, next, ok := readStr(b, i)
		if !ok {
			return errHeadForm
		}
		i = next
		switch string(key) {
		case "id", "state":
			s, next, ok := readStr(b, i)
			if !ok {
				return errHeadForm
			}
			i = next
			if string(key) == "id" {
				j.ID = string(s)
			} else {
				j.State = domain.State(s)
			}
		case "seq":
			v, next, ok := readUint(b, i)
			if !ok {
				return errHeadForm
			}
			j.Seq, i = v, next
		case "spec":
			next, err := scanSpecHead(b, i, &j.Spec)
			if err != nil {
				return err
			}
			i = next
		default:
			next, err := skipValue(b, i)
			if err != nil {
				return err
			}
			i = next
		}
	}
	if i != len(b) {
		return fmt.Errorf("msgpack: %d trailing bytes", len(b)-i)
	}
	return nil
}

// scanSpecHead reads a spec's namespace, queue and type at i, skipping the
// rest (a workflow's graph among it).
func scanSpecHead(b []byte, i int, s *domain.Spec) (int, error) {
	n, i, ok := readMapLen(b, i)
	if !ok {
		return 0, errHeadForm
	}
	for range n {
		key, next, ok := readStr(b, i)
		if !ok {
			return 0, errHeadForm
		}
		i = next
		switch string(key) {
		case "ns", "queue", "type":
			v, next, ok := readStr(b, i)
			if !ok {
				return 0, errHeadForm
			}
			i = next
			switch string(key) {
			case "ns":
				s.Namespace = string(v)
			case "queue":
				s.Queue = string(v)
			default:
				s.Type = string(v)
			}
		default:
			next, err := skipValue(b, i)
			if err != nil {
				return 0, err
			}
			i = next
		}
	}
	return i, nil
}
