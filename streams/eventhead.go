package streams

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow/jetflow/internal/domain"
)

// DecodeEventHead decodes only an event's version, type, job, time, move
// (from, to) and chain link (prev: it refers into data) into ev, for readers of every event that need no more
// (the statistics): a submit's spec and payload, an error or a result are
// walked over, not decoded. The checks are DecodeEvent's, CheckMsgpack's
// included.
//
// It reads the envelope's map itself rather than through reflection: it
// runs once per event of the log. A value of a known field in a form the
// encoder does not write (a time that is not the timestamp extension, a
// version that is not a small integer) is decoded by the general decoder
// instead.
func DecodeEventHead(data []byte, ev *domain.Event) error {
	*ev = domain.Event{}
	if err := scanEventHead(data, ev); err != nil {
		if !errors.Is(err, errHeadForm) {
			return fmt.Errorf("%w: event: %v", ErrBadRecord, err)
		}
		if err := decodeEventHeadGeneral(data, ev); err != nil {
			return err
		}
	}
	if ev.V < 1 || ev.Type == "" || ev.JobID == "" {
		return fmt.Errorf("%w: event without version, type or job id", ErrBadRecord)
	}
	if ev.V > domain.EnvelopeVersion {
		return fmt.Errorf("%w: event envelope version %d is newer than this build (%d)", ErrBadRecord, ev.V, domain.EnvelopeVersion)
	}
	return nil
}

// decodeEventHeadGeneral is DecodeEventHead through the general decoder.
func decodeEventHeadGeneral(data []byte, ev *domain.Event) error {
	var h struct {
		V     int          `msgpack:"v"`
		Type  string       `msgpack:"type"`
		JobID string       `msgpack:"job"`
		Time  time.Time    `msgpack:"time"`
		From  domain.State `msgpack:"from,omitempty"`
		To    domain.State `msgpack:"to,omitempty"`
		Prev  []byte       `msgpack:"prev,omitempty"`
	}
	if err := Unmarshal(data, &h); err != nil {
		return fmt.Errorf("%w: event: %v", ErrBadRecord, err)
	}
	*ev = domain.Event{V: h.V, Type: h.Type, JobID: h.JobID, Time: h.Time, From: h.From, To: h.To, Prev: h.Prev}
	return nil
}

// errHeadForm: a known field in a form scanEventHead does not read.
var errHeadForm = errors.New("a field in another form")

// scanEventHead reads the top-level map of an event envelope.
func scanEventHead(b []byte, ev *domain.Event) error {
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
		case "v":
			if i >= len(b) || b[i] > 0x7f {
				return errHeadForm
			}
			ev.V = int(b[i])
			i++
		case "type", "job", "from", "to":
			s, next, ok := readStr(b, i)
			if !ok {
				return errHeadForm
			}
			i = next
			switch string(key) {
			case "type":
				ev.Type = string(s)
			case "job":
				ev.JobID = string(s)
			case "from":
				ev.From = domain.State(s)
			case "to":
				ev.To = domain.State(s)
			}
		case "prev":
			p, next, ok := readBin(b, i)
			if !ok {
				return errHeadForm
			}
			ev.Prev, i = p, next
		case "time":
			t, next, ok := readTime(b, i)
			if !ok {
				return errHeadForm
			}
			ev.Time, i = t, next
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

// readStr reads a msgpack string (or nil, as "") at i, without copying.
func readStr(b []byte, i int) (s []byte, next int, ok bool) {
	if i >= len(b) {
		return nil, 0, false
	}
	c := b[i]
	var l, h int
	switch {
	case c >= 0xa0 && c <= 0xbf:
		l, h = int(c&0x1f), 1
	case c == 0xc0:
		return nil, i + 1, true
	case c == 0xd9 && i+2 <= len(b):
		l, h = int(b[i+1]), 2
	case c == 0xda && i+3 <= len(b):
		l, h = int(binary.BigEndian.Uint16(b[i+1:])), 3
	case c == 0xdb && i+5 <= len(b):
		l, h = int(binary.BigEndian.Uint32(b[i+1:])), 5
	default:
		return nil, 0, false
	}
	if l < 0 || l > len(b)-i-h {
		return nil, 0, false
	}
	return b[i+h : i+h+l], i + h + l, true
}

// readBin reads a msgpack bin (or nil) at i, without copying.
func readBin(b []byte, i int) (v []byte, next int, ok bool) {
	if i >= len(b) {
		return nil, 0, false
	}
	var l, h int
	switch c := b[i]; {
	case c == 0xc0:
		return nil, i + 1, true
	case c == 0xc4 && i+2 <= len(b):
		l, h = int(b[i+1]), 2
	case c == 0xc5 && i+3 <= len(b):
		l, h = int(binary.BigEndian.Uint16(b[i+1:])), 3
	case c == 0xc6 && i+5 <= len(b):
		l, h = int(binary.BigEndian.Uint32(b[i+1:])), 5
	default:
		return nil, 0, false
	}
	if l < 0 || l > len(b)-i-h {
		return nil, 0, false
	}
	return b[i+h : i+h+l : i+h+l], i + h + l, true
}

// readTime reads the msgpack timestamp extension (type -1) at i, in the
// three lengths the encoder writes.
func readTime(b []byte, i int) (time.Time, int, bool) {
	if i+2 > len(b) {
		return time.Time{}, 0, false
	}
	switch c := b[i]; {
	case c == 0xd6 && b[i+1] == 0xff && i+6 <= len(b):
		return time.Unix(int64(binary.BigEndian.Uint32(b[i+2:])), 0), i + 6, true
	case c == 0xd7 && b[i+1] == 0xff && i+10 <= len(b):
		v := binary.BigEndian.Uint64(b[i+2:])
		return time.Unix(int64(v&(1<<34-1)), int64(v>>34)), i + 10, true
	case c == 0xc7 && i+15 <= len(b) && b[i+1] == 12 && b[i+2] == 0xff:
		nsec := binary.BigEndian.Uint32(b[i+3:])
		sec := binary.BigEndian.Uint64(b[i+7:])
		return time.Unix(int64(sec), int64(nsec)), i + 15, true
	}
	return time.Time{}, 0, false
}
