package streams

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// maxMsgpackDepth bounds the nesting of msgpack input.
const maxMsgpackDepth = 64

var errTruncated = errors.New("truncated")

// CheckMsgpack walks one msgpack value without decoding it and refuses
// input whose declared lengths exceed the bytes present, or that nests
// deeper than maxMsgpackDepth. The msgpack decoder allocates a container
// for the length a header declares before it reads the elements, so
// without this check a 6-byte message can ask for gigabytes.
func CheckMsgpack(b []byte) error {
	i, err := skipValue(b, 0)
	if err != nil {
		return err
	}
	if i != len(b) {
		return fmt.Errorf("msgpack: %d trailing bytes", len(b)-i)
	}
	return nil
}

// skipValue walks the msgpack value at b[i:] with CheckMsgpack's checks and
// returns where it ends.
func skipValue(b []byte, i int) (int, error) {
	// pending[k] is how many values are still to come at depth k.
	var stack [8]uint64
	pending := append(stack[:0], 1)
	for len(pending) > 0 {
		if pending[len(pending)-1] == 0 {
			pending = pending[:len(pending)-1]
			continue
		}
		pending[len(pending)-1]--
		if i >= len(b) {
			return 0, fmt.Errorf("msgpack: %w", errTruncated)
		}
		c := b[i]
		i++
		var skip, n uint64 // bytes to skip; elements to expect
		var hdr int        // length of a length field
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			n = 2 * uint64(c&0x0f)
		case c >= 0x90 && c <= 0x9f:
			n = uint64(c & 0x0f)
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		case c == 0xc1:
			return 0, fmt.Errorf("msgpack: invalid byte 0xc1 at %d", i-1)
		case c == 0xc4, c == 0xd9:
			hdr = 1
		case c == 0xc5, c == 0xda:
			hdr = 2
		case c == 0xc6, c == 0xdb:
			hdr = 4
		case c == 0xc7, c == 0xc8, c == 0xc9: // ext: length, then a type byte
			hdr = 1 << (c - 0xc7)
			skip = 1
		case c == 0xca:
			skip = 4
		case c == 0xcb:
			skip = 8
		case c >= 0xcc && c <= 0xcf:
			skip = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3:
			skip = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8: // fixext: a type byte and 1..16 bytes
			skip = 1 + 1<<(c-0xd4)
		case c == 0xdc, c == 0xde:
			hdr = 2
		case c == 0xdd, c == 0xdf:
			hdr = 4
		}
		if hdr > 0 {
			if len(b)-i < hdr {
				return 0, fmt.Errorf("msgpack: %w length at %d", errTruncated, i)
			}
			var l uint64
			switch hdr {
			case 1:
				l = uint64(b[i])
			case 2:
				l = uint64(binary.BigEndian.Uint16(b[i:]))
			case 4:
				l = uint64(binary.BigEndian.Uint32(b[i:]))
			}
			i += hdr
			switch c {
			case 0xdc, 0xdd:
				n = l
			case 0xde, 0xdf:
				n = 2 * l
			default:
				skip += l
			}
		}
		rest := uint64(len(b) - i)
		if skip > rest || n > rest { // every element takes at least one byte
			return 0, fmt.Errorf("msgpack: value at %d declares more than the %d bytes left", i, rest)
		}
		i += int(skip)
		if n > 0 {
			if len(pending) >= maxMsgpackDepth {
				return 0, fmt.Errorf("msgpack: nested deeper than %d", maxMsgpackDepth)
			}
			pending = append(pending, n)
		}
	}
	return i, nil
}
