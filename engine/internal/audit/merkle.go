package audit

import (
	"crypto/sha256"
	"encoding/binary"
	"sort"

	"github.com/jetflow/jetflow/streams"
)

// Head is a subject's chain head: its last event's sequence and hash.
type Head struct {
	Subject string `json:"subject"`
	Seq     uint64 `json:"seq"`
	Hash    []byte `json:"hash"`
}

// Leaf is a head's leaf in a checkpoint's Merkle tree:
// sha256(0x00 || subject || 0x00 || seq (8 bytes, big endian) || hash).
func Leaf(h Head) []byte {
	d := sha256.New()
	d.Write([]byte{0})
	d.Write([]byte(h.Subject))
	d.Write([]byte{0})
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], h.Seq)
	d.Write(b[:])
	d.Write(h.Hash)
	return d.Sum(nil)
}

func node(l, r []byte) []byte {
	d := sha256.New()
	d.Write([]byte{1})
	d.Write(l)
	d.Write(r)
	return d.Sum(nil)
}

// SortHeads sorts heads by subject, the order of a checkpoint's leaves.
func SortHeads(hs []Head) {
	sort.Slice(hs, func(i, j int) bool { return hs[i].Subject < hs[j].Subject })
}

// Root is the Merkle root over heads sorted by subject (SortHeads): leaves
// are paired left to right, an odd last node is carried up as it is. The
// root of no heads is sha256 of nothing.
func Root(sorted []Head) []byte {
	if len(sorted) == 0 {
		s := sha256.Sum256(nil)
		return s[:]
	}
	level := make([][]byte, len(sorted))
	for i, h := range sorted {
		level[i] = Leaf(h)
	}
	for len(level) > 1 {
		next := level[:0:0]
		for i := 0; i < len(level); i += 2 {
			if i+1 < len(level) {
				next = append(next, node(level[i], level[i+1]))
			} else {
				next = append(next, level[i])
			}
		}
		level = next
	}
	return level[0]
}

// ProofStep is one sibling on the path from a leaf to the root.
type ProofStep struct {
	Left bool   `json:"left,omitempty"` // the sibling is on the left
	Hash []byte `json:"hash"`
}

// Proof is the inclusion proof of sorted[i] in Root(sorted): the siblings
// from the leaf up. It reveals hashes only, no other subject.
func Proof(sorted []Head, i int) []ProofStep {
	level := make([][]byte, len(sorted))
	for k, h := range sorted {
		level[k] = Leaf(h)
	}
	var out []ProofStep
	for len(level) > 1 {
		if sib := i ^ 1; sib < len(level) {
			out = append(out, ProofStep{Left: sib < i, Hash: level[sib]})
		}
		next := level[:0:0]
		for k := 0; k < len(level); k += 2 {
			if k+1 < len(level) {
				next = append(next, node(level[k], level[k+1]))
			} else {
				next = append(next, level[k])
			}
		}
		level, i = next, i/2
	}
	return out
}

// ProofRoot is the root a leaf and its proof lead to.
func ProofRoot(h Head, proof []ProofStep) []byte {
	cur := Leaf(h)
	for _, s := range proof {
		if s.Left {
			cur = node(s.Hash, cur)
		} else {
			cur = node(cur, s.Hash)
		}
	}
	return cur
}

// HeadHash is the hash a checkpoint commits to for an event: the hash its
// header claims, or, without one, the hash of its bytes (prev decoded
// from them).
func HeadHash(stored, data []byte) []byte {
	if stored != nil {
		return stored
	}
	var h struct {
		Prev []byte `msgpack:"prev,omitempty"`
	}
	_ = streams.Unmarshal(data, &h)
	return streams.ChainHash(h.Prev, data)
}
