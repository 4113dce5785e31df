package domain

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"sync"
	"time"
)

// Job ids are 26 characters of Crockford base32: a 48-bit millisecond
// timestamp followed by 80 random bits, so that ids sort by creation time and
// are valid KV keys and subject tokens as they are.
const idLen = 26

const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

var idState struct {
	sync.Mutex
	lastMS uint64
	last   [10]byte
}

// NewID returns a new job id. Ids made in the same millisecond by this
// process are strictly increasing.
func NewID() string {
	ms := uint64(time.Now().UnixMilli())
	var r [10]byte
	idState.Lock()
	if ms <= idState.lastMS {
		// Same millisecond (or a clock step back): increment the random part so
		// that ids stay ordered within this process.
		ms = idState.lastMS
		r = idState.last
		for i := len(r) - 1; i >= 0; i-- {
			r[i]++
			if r[i] != 0 {
				break
			}
		}
	} else {
		if _, err := rand.Read(r[:]); err != nil {
			panic("jetflow: crypto/rand failed: " + err.Error())
		}
	}
	idState.lastMS, idState.last = ms, r
	idState.Unlock()
	return encodeID(ms, r)
}

// KeyedID returns the job id that an idempotency key maps to within a
// namespace. It has the shape of NewID's ids but starts with a fixed "K"
// millisecond prefix no clock will reach, so keyed ids never collide with
// random ones.
func KeyedID(namespace, key string) string {
	h := sha256.Sum256([]byte(namespace + "\x00" + key))
	var r [10]byte
	copy(r[:], h[6:16])
	ms := binary.BigEndian.Uint64(append([]byte{0, 0}, h[:6]...))
	id := []byte(encodeID(ms, r))
	id[0] = 'Z' // 'Z' as the first character is a timestamp beyond year 10889
	return string(id)
}

func encodeID(ms uint64, r [10]byte) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[0:8], ms<<16)
	copy(b[6:], r[:])
	// 128 bits -> 26 base32 characters (130 bits, 2 leading zero bits).
	var out [idLen]byte
	hi := binary.BigEndian.Uint64(b[0:8])
	lo := binary.BigEndian.Uint64(b[8:16])
	for i := idLen - 1; i >= 0; i-- {
		out[i] = crockford[lo&31]
		lo = lo>>5 | hi<<59
		hi >>= 5
	}
	return string(out[:])
}

// ValidID reports whether s has the shape of a job id.
func ValidID(s string) bool {
	if len(s) != idLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z') || c == 'I' || c == 'L' || c == 'O' || c == 'U' {
			return false
		}
	}
	return true
}
