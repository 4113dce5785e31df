// Package audit proves the event log: the hash chain of each subject, the
// signed checkpoints that commit to the chain heads, and exports that
// carry both (docs/audit.md).
package audit

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"strings"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// Kinds of findings.
const (
	Edited     = "edited"     // its bytes do not match the hash it was stored with
	Removed    = "removed"    // an event before it on its subject is missing
	Reordered  = "reordered"  // it chains to an event before the last one on its subject, which has no other successor
	Inserted   = "inserted"   // it chains to an event that has a successor already (a second branch)
	Forged     = "forged"     // written without the chain (no hash, no prev) or not an event
	Checkpoint = "checkpoint" // a checkpoint that is not signed by the key, or does not match the log
)

// Finding is one thing wrong with the log: which event, and what.
type Finding struct {
	Kind    string `json:"kind"`
	Subject string `json:"subject"`
	Job     string `json:"job,omitempty"`
	Seq     uint64 `json:"seq"`
	What    string `json:"what"`
}

func (f Finding) String() string {
	job := f.Job
	if job == "" {
		job = "-"
	}
	return fmt.Sprintf("%s seq %d job %s on %s: %s", f.Kind, f.Seq, job, f.Subject, f.What)
}

// Report is what a verification found.
type Report struct {
	Events      int       `json:"events"`
	Subjects    int       `json:"subjects"`
	Checkpoints int       `json:"checkpoints"`
	Findings    []Finding `json:"findings"`
	// Covered is the last sequence a verified checkpoint covers; Uncovered
	// the events after it, not yet committed to by a checkpoint.
	Covered   uint64 `json:"covered"`
	Uncovered int    `json:"uncovered"`
	// Key is the key checkpoints were checked against ("" no checkpoint).
	Key string `json:"key,omitempty"`
	// KeyPinned: Key was given by the caller, not taken from the log.
	KeyPinned bool `json:"key_pinned"`
}

// OK reports whether nothing was found.
func (r *Report) OK() bool { return len(r.Findings) == 0 }

// maxFindings bounds a report: a log rewritten wholesale is named by its
// first findings.
const maxFindings = 10000

// recent is how many of a subject's last events a verifier remembers, to
// tell a reordered or inserted event from a removal (one further back is
// a removal, and the event moved a reordering, when it comes).
const recent = 4

// maxPending bounds the changes a verifier keeps between two checkpoints
// (the checkpointer covers at most 500,000 events each): a checkpoint
// whose range starts before the oldest it kept is a finding, its root not
// recomputed.
const maxPending = 1 << 20

// link is a subject's last event: its hash and its sequence, the top bit
// set when an event after it chains to it.
type link struct {
	hash [streams.HashSize]byte
	seq  uint64
}

// older is a link before a subject's last one: its hash's first 8 bytes
// (enough to tell which of a subject's last events another chains to:
// a finding is made either way) and its sequence (top bit as in link).
type older struct {
	fp, seq uint64
}

const succBit = 1 << 63

// chainState is what a verifier keeps of a subject: about 100 bytes, in
// chunks without pointers but missing (a log of millions of jobs is
// millions of them: 10M events of three-event jobs verify in < 1 GiB).
type chainState struct {
	last  link // seq 0: none yet
	older [recent - 1]older
	n     uint8 // of older
	// missing are the prevs of events whose event before them was not
	// there (a removal finding), by finding: one that comes later makes it
	// a reordering.
	missing map[[streams.HashSize]byte]int
}

func fingerprint(h []byte) uint64 { return binary.BigEndian.Uint64(h) }

// find returns the older link h names (nil: none).
func (c *chainState) find(h []byte) *older {
	if len(h) != streams.HashSize {
		return nil
	}
	fp := fingerprint(h)
	for i := int(c.n) - 1; i >= 0; i-- {
		if c.older[i].fp == fp {
			return &c.older[i]
		}
	}
	return nil
}

func (c *chainState) push(h []byte, seq uint64) {
	if c.last.seq != 0 {
		o := older{fp: fingerprint(c.last.hash[:]), seq: c.last.seq}
		if int(c.n) == len(c.older) {
			copy(c.older[:], c.older[1:])
			c.n--
		}
		c.older[c.n] = o
		c.n++
	}
	c.last = link{seq: seq}
	copy(c.last.hash[:], h)
}

// pend is a change since the last checkpoint: its subject's new head.
type pend struct {
	subject string
	seq     uint64
	hash    [streams.HashSize]byte
}

// Verifier checks a log fed to it in stream order (Add), then reports
// (Finish). Pub is the trusted checkpoint key ("": the key the
// checkpoints name). Whole says the log fed is the whole log (not a
// scope), so that checkpoints' roots can be recomputed.
type Verifier struct {
	Pub   string
	Whole bool
	// FirstSeq is the stream's first sequence, and AgedOut says the
	// events before it were removed by the log's retention (its MaxAge),
	// not by someone: a chain may then start with a prev.
	FirstSeq uint64
	AgedOut  bool
	// RangeHeads (a scope only; nil: checkpoints are not recomputed) reads
	// the heads of every subject changed in (from, upTo], sorted, and
	// InScope says which subjects the scope holds: a scope's verification
	// recomputes each checkpoint's root from them.
	RangeHeads func(from, upTo uint64) ([]Head, error)
	InScope    func(subject string) bool
	// exported: the log is an export, whose chains start where its range
	// does.
	exported bool

	rep Report
	// chains index the slab's chunks, a subject's state (chunks: no
	// copy of all of them as they grow), by a 128-bit hash of the subject
	// (seeded per verifier), not the subject itself: less to keep.
	chains map[subjectKey]int32
	seeds  [2]maphash.Seed
	slab   [][]chainState
	// pending are the heads of subjects changed since the last checkpoint
	// (Whole only), with every change's sequence to cut at UpTo; dropped
	// counts those dropped beyond maxPending, horizon is the newest
	// sequence among them.
	pending    chunked[pend]
	maxPending int // maxPending, but in tests
	dropped    int
	horizon    uint64
	lastCk     *domain.Checkpoint
	lastCkAt   uint64
	lastSeq    uint64
}

// NewVerifier returns a verifier (pub: the trusted key, or "").
func NewVerifier(pub string, whole bool) *Verifier {
	return newVerifier(pub, whole, 0)
}

// newVerifier is NewVerifier for a log of about subjects subjects.
func newVerifier(pub string, whole bool, subjects int) *Verifier {
	v := &Verifier{Pub: pub, Whole: whole, chains: make(map[subjectKey]int32, subjects), maxPending: maxPending,
		seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}}
	v.rep.Key, v.rep.KeyPinned = pub, pub != ""
	return v
}

func (v *Verifier) find(f Finding) {
	if len(v.rep.Findings) < maxFindings {
		v.rep.Findings = append(v.rep.Findings, f)
	}
}

// Add checks the event stored at seq on subject: its bytes data and the
// hash its header claims (stored, nil: none).
func (v *Verifier) Add(seq uint64, subject string, stored, data []byte) {
	v.rep.Events++
	v.lastSeq = seq
	var h domain.Event
	if err := streams.DecodeEventHead(data, &h); err != nil {
		v.find(Finding{Kind: Forged, Subject: subject, Seq: seq, What: "not an event envelope"})
		return
	}
	job := h.JobID
	if !streams.IsJobSubject(subject) && !streams.IsPieceSubject(subject) {
		job = ""
	}
	sum := streams.ChainSum(h.Prev, data)
	computed := sum[:]
	claimed := computed
	switch {
	case stored == nil:
		v.find(Finding{Kind: Forged, Subject: subject, Job: job, Seq: seq, What: h.Type + " has no chain hash: not written by an engine"})
	case !bytes.Equal(stored, computed):
		v.find(Finding{Kind: Edited, Subject: subject, Job: job, Seq: seq,
			What: fmt.Sprintf("%s: its bytes hash to %.16s…, it was stored with %.16s…", h.Type, hex.EncodeToString(computed), hex.EncodeToString(stored))})
		claimed = stored // what the next event chains to
	}
	c := v.chain(subject)
	// Piece events and job.duplicate (appended without a decision, any
	// number at once) are out of the chain: each names the event it
	// follows, and the next event links past it.
	unlinked := streams.IsPieceSubject(subject) || h.Type == domain.EvDuplicate
	if !unlinked && stored != nil {
		v.link(c, seq, subject, job, &h, claimed)
	}
	if c.missing != nil {
		var k [streams.HashSize]byte
		copy(k[:], claimed)
		if i, ok := c.missing[k]; ok && i < len(v.rep.Findings) {
			f := &v.rep.Findings[i]
			f.Kind = Reordered
			f.What = fmt.Sprintf("it chains to seq %d, which comes after it: the events of its subject are out of order", seq)
			delete(c.missing, k)
		}
	}
	if !unlinked || streams.IsPieceSubject(subject) {
		c.push(claimed, seq)
	}
	if subject == streams.CheckpointSubject {
		v.checkpoint(seq, data, computed)
		return
	}
	if v.Whole || v.RangeHeads != nil {
		if half := v.maxPending / 2; v.pending.len() == v.maxPending {
			// No checkpoint for this long: keep the newer half.
			v.horizon = v.pending.at(half - 1).seq
			v.pending.dropOldest(half)
			v.dropped += half
		}
		p := v.pending.add()
		p.subject, p.seq = subject, seq
		copy(p.hash[:], claimed)
	}
}

const slabChunk = 4096

type subjectKey [2]uint64

// chain is subject's state, made if it has none.
func (v *Verifier) chain(subject string) *chainState {
	k := subjectKey{maphash.String(v.seeds[0], subject), maphash.String(v.seeds[1], subject)}
	i, ok := v.chains[k]
	if !ok {
		n := len(v.chains)
		if n%slabChunk == 0 {
			v.slab = append(v.slab, make([]chainState, slabChunk))
		}
		i = int32(n)
		v.chains[k] = i
	}
	return &v.slab[i/slabChunk][i%slabChunk]
}

// chunked is a list that grows by chunks (no copy of what it holds).
type chunked[T any] struct {
	chunks [][]T
	n      int
}

const chunkLen = 4096

func (c *chunked[T]) len() int { return c.n }

func (c *chunked[T]) at(i int) *T { return &c.chunks[i/chunkLen][i%chunkLen] }

// add appends a zero value and returns it.
func (c *chunked[T]) add() *T {
	if c.n == len(c.chunks)*chunkLen {
		c.chunks = append(c.chunks, make([]T, chunkLen))
	}
	c.n++
	return c.at(c.n - 1)
}

// filter keeps the values keep says to, in order.
func (c *chunked[T]) filter(keep func(*T) bool) {
	k := 0
	for i := range c.n {
		if p := c.at(i); keep(p) {
			*c.at(k) = *p
			k++
		}
	}
	var zero T
	for i := k; i < c.n; i++ {
		*c.at(i) = zero
	}
	c.n = k
	c.chunks = c.chunks[:(k+chunkLen-1)/chunkLen]
}

// dropOldest drops the n oldest values (n a multiple of chunkLen).
func (c *chunked[T]) dropOldest(n int) {
	c.chunks = append([][]T(nil), c.chunks[n/chunkLen:]...)
	c.n -= n
}

func (v *Verifier) link(c *chainState, seq uint64, subject, job string, h *domain.Event, hash []byte) {
	var last *link
	if c.last.seq != 0 {
		last = &c.last
	}
	switch {
	case last == nil && len(h.Prev) == 0:
	case last == nil:
		if v.AgedOut || v.exported {
			return // the log's first events aged out: its first events may have been among them
		}
		v.missingPrev(c, h.Prev)
		v.find(Finding{Kind: Removed, Subject: subject, Job: job, Seq: seq,
			What: fmt.Sprintf("%s is the first event left on its subject, but chains to %.16s…: the events before it are missing", h.Type, hex.EncodeToString(h.Prev))})
	case bytes.Equal(h.Prev, last.hash[:]):
		last.seq |= succBit
	case len(h.Prev) == 0:
		v.find(Finding{Kind: Reordered, Subject: subject, Job: job, Seq: seq,
			What: fmt.Sprintf("%s is a first event (no prev), but follows seq %d on its subject", h.Type, last.seq&^succBit)})
	default:
		if l := c.find(h.Prev); l != nil {
			if ls := l.seq &^ succBit; l.seq&succBit != 0 {
				v.find(Finding{Kind: Inserted, Subject: subject, Job: job, Seq: seq,
					What: fmt.Sprintf("%s chains to seq %d, which has a successor already: a second branch appended after seq %d", h.Type, ls, last.seq&^succBit)})
			} else {
				v.find(Finding{Kind: Reordered, Subject: subject, Job: job, Seq: seq,
					What: fmt.Sprintf("%s chains to seq %d but comes after seq %d: moved from its place", h.Type, ls, last.seq&^succBit)})
			}
			l.seq |= succBit
			return
		}
		v.missingPrev(c, h.Prev)
		v.find(Finding{Kind: Removed, Subject: subject, Job: job, Seq: seq,
			What: fmt.Sprintf("%s does not chain to seq %d before it: an event between them is missing (or seq %d was rewritten)", h.Type, last.seq&^succBit, last.seq&^succBit)})
	}
}

// missingPrev remembers that the next finding is of an event whose prev
// was not found: if an event with that hash comes later, it was moved.
func (v *Verifier) missingPrev(c *chainState, prev []byte) {
	if len(prev) != streams.HashSize || len(v.rep.Findings) >= maxFindings {
		return
	}
	if c.missing == nil {
		c.missing = map[[streams.HashSize]byte]int{}
	}
	var k [streams.HashSize]byte
	copy(k[:], prev)
	c.missing[k] = len(v.rep.Findings)
}

func (v *Verifier) checkpoint(seq uint64, data, hash []byte) {
	var h struct {
		Type string             `msgpack:"type"`
		Prev []byte             `msgpack:"prev,omitempty"`
		Ckpt *domain.Checkpoint `msgpack:"ckpt,omitempty"`
	}
	err := streams.Unmarshal(data, &h)
	c := h.Ckpt
	if err != nil || h.Type != domain.EvCheckpoint || c == nil {
		v.find(Finding{Kind: Forged, Subject: streams.CheckpointSubject, Seq: seq, What: h.Type + " on the checkpoint subject is not a checkpoint"})
		return
	}
	v.rep.Checkpoints++
	if err := CheckSignature(c, h.Prev, v.Pub); err != nil {
		v.find(Finding{Kind: Checkpoint, Subject: streams.CheckpointSubject, Seq: seq, What: "checkpoint: " + err.Error()})
		return
	}
	if v.rep.Key == "" {
		v.rep.Key = c.Key
	}
	if !v.Whole && v.RangeHeads == nil {
		v.lastCk, v.lastCkAt = c, seq
		v.rep.Covered = c.UpTo
		return
	}
	// The heads of the subjects changed in (From, UpTo]: the last change of
	// each, among the pending changes up to UpTo (of the scope's subjects,
	// in a scope).
	heads := map[string]Head{}
	v.pending.filter(func(p *pend) bool {
		switch {
		case p.seq <= c.From:
		case p.seq <= c.UpTo:
			// (a copy: filter moves the values it keeps over the others)
			heads[p.subject] = Head{Subject: p.subject, Seq: p.seq, Hash: bytes.Clone(p.hash[:])}
		default:
			return true
		}
		return false
	})
	if v.horizon > c.From {
		v.find(Finding{Kind: Checkpoint, Subject: streams.CheckpointSubject, Seq: seq,
			What: fmt.Sprintf("checkpoint covers (%d, %d], more events than a verifier keeps between two checkpoints (%d; the checkpointer writes at most 500,000): its root was not recomputed", c.From, c.UpTo, v.maxPending/2)})
		v.lastCk, v.lastCkAt, v.rep.Covered = c, seq, c.UpTo
		v.dropped, v.horizon = 0, 0
		return
	}
	v.dropped = 0
	if v.AgedOut && c.From+1 < v.FirstSeq {
		// Part of its range aged out: its root cannot be recomputed.
		v.lastCk, v.lastCkAt, v.rep.Covered = c, seq, c.UpTo
		return
	}
	if v.lastCk != nil && c.From != v.lastCk.UpTo {
		v.find(Finding{Kind: Checkpoint, Subject: streams.CheckpointSubject, Seq: seq,
			What: fmt.Sprintf("checkpoint covers from seq %d, the one before it up to %d", c.From, v.lastCk.UpTo)})
	}
	var sorted []Head
	if v.Whole {
		sorted = make([]Head, 0, len(heads))
		for _, hd := range heads {
			sorted = append(sorted, hd)
		}
		SortHeads(sorted)
	} else {
		// A scope: the range's heads of every subject, read again, and the
		// scope's among them must be the ones the scope's events left.
		all, err := v.RangeHeads(c.From, c.UpTo)
		if err != nil {
			v.find(Finding{Kind: Checkpoint, Subject: streams.CheckpointSubject, Seq: seq,
				What: fmt.Sprintf("the heads of (%d, %d] could not be read: %v", c.From, c.UpTo, err)})
			v.lastCk, v.lastCkAt, v.rep.Covered = c, seq, c.UpTo
			return
		}
		v.scopeHeads(seq, c, all, heads)
		sorted = all
	}
	if root := Root(sorted); len(sorted) != c.Count || !bytes.Equal(root, c.Root) {
		v.find(Finding{Kind: Checkpoint, Subject: streams.CheckpointSubject, Seq: seq,
			What: fmt.Sprintf("the log's heads of (%d, %d] are %d subjects with root %.16s…; the signed checkpoint says %d with root %.16s…: an event in that range was removed, edited or added since it was signed",
				c.From, c.UpTo, len(sorted), hex.EncodeToString(root), c.Count, hex.EncodeToString(c.Root))})
	}
	v.lastCk, v.lastCkAt, v.rep.Covered = c, seq, c.UpTo
}

// scopeHeads checks that the heads of the scope's subjects among all
// (a checkpoint's range, every subject) are those its events left.
func (v *Verifier) scopeHeads(seq uint64, c *domain.Checkpoint, all []Head, scoped map[string]Head) {
	for _, h := range all {
		if !v.InScope(h.Subject) {
			continue
		}
		got, ok := scoped[h.Subject]
		switch {
		case !ok:
			v.find(Finding{Kind: Checkpoint, Subject: h.Subject, Seq: h.Seq,
				What: fmt.Sprintf("the log's head of %s in (%d, %d] is seq %d, which the scope's read did not see", h.Subject, c.From, c.UpTo, h.Seq)})
		case got.Seq != h.Seq || !bytes.Equal(got.Hash, h.Hash):
			v.find(Finding{Kind: Checkpoint, Subject: h.Subject, Seq: got.Seq,
				What: fmt.Sprintf("the scope's head of %s in (%d, %d] is seq %d, the log's seq %d", h.Subject, c.From, c.UpTo, got.Seq, h.Seq)})
		}
		delete(scoped, h.Subject)
	}
	for _, h := range scoped {
		v.find(Finding{Kind: Checkpoint, Subject: h.Subject, Seq: h.Seq,
			What: fmt.Sprintf("the scope's head of %s in (%d, %d] (seq %d) is not among the log's heads", h.Subject, c.From, c.UpTo, h.Seq)})
	}
}

// Finish returns the report.
func (v *Verifier) Finish() *Report {
	v.rep.Subjects = len(v.chains)
	n := v.dropped
	for i := range v.pending.len() {
		if v.pending.at(i).seq > v.rep.Covered {
			n++
		}
	}
	if !v.Whole && v.RangeHeads == nil {
		n = 0 // not known per scope
	}
	v.rep.Uncovered = n
	return &v.rep
}

// Contains reports whether subject is among the scope's events.
func (s Scope) Contains(subject string) bool {
	if s.Whole() {
		return true
	}
	for _, f := range s.Filters() {
		if streams.SubjectMatches(f, subject) {
			return true
		}
	}
	return false
}

// Scope is a part of the log: a namespace, queue, type or job ("" all).
type Scope struct {
	Namespace, Queue, Type, Job string
}

// Whole reports whether s is the whole log.
func (s Scope) Whole() bool { return s == Scope{} }

// Filters are the subject filters of s's events (nil: the whole stream).
func (s Scope) Filters() []string {
	if s.Whole() {
		return nil
	}
	tok := func(v string) string {
		if v == "" {
			return "*"
		}
		return streams.Token(v)
	}
	id := s.Job
	if id == "" {
		id = "*"
	}
	out := []string{strings.Join([]string{streams.EventsPrefix, tok(s.Namespace), tok(s.Queue), tok(s.Type), id}, ".")}
	if s.Job != "" {
		out = append(out, streams.PieceSubject(s.Job))
	}
	return out
}
