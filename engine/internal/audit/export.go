package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow/jetflow/internal/domain"
	"github.com/jetflow/jetflow/streams"
)

// An export is JSON Lines (docs/audit.md): a header, the events of the
// range and scope as stored (their bytes, base64, and the hash their
// header claims), then the checkpoints that cover them, and, for each
// subject's last exported event in a checkpoint's range, its Merkle
// inclusion proof in that checkpoint: hashes only, never another
// subject's name.
type Line struct {
	Kind string `json:"kind"` // header, event, checkpoint, proof

	// header
	V         int       `json:"v,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	Until     time.Time `json:"until,omitzero"`
	Namespace string    `json:"namespace,omitempty"`

	// event, checkpoint: the stored message; proof: the head proved.
	Seq     uint64 `json:"seq,omitempty"`
	Subject string `json:"subject,omitempty"`
	Hash    []byte `json:"hash,omitempty"`
	Data    []byte `json:"data,omitempty"`
	// event: what it is, for a reader (not verified: Data is).
	Type string    `json:"type,omitempty"`
	Job  string    `json:"job,omitempty"`
	Time time.Time `json:"time,omitzero"`

	// proof: the checkpoint (its seq) and the path to its root.
	Checkpoint uint64      `json:"checkpoint,omitempty"`
	Path       []ProofStep `json:"path,omitempty"`
}

// ExportScope is what an export holds: the events appended in
// [Since, Until] (zero: no bound), of one namespace's jobs ("" every
// subject of the log).
type ExportScope struct {
	Since, Until time.Time
	Namespace    string
}

// ExportStats is what an export wrote.
type ExportStats struct {
	Events, Checkpoints, Proofs int
	Uncovered                   int   // events after the last checkpoint
	Bytes                       int64 // written to w (an export cut short: how far it got; 0: nothing reached w)
}

type ckInfo struct {
	seq        uint64
	from, upTo uint64
	hash, data []byte
	need       map[string]Head // subject -> its last exported event in the range
}

// Export writes the export of scope to w, streamed.
func Export(ctx context.Context, js jetstream.JetStream, scope ExportScope, w io.Writer) (st ExportStats, err error) {
	cw := &countWriter{w: w}
	defer func() { st.Bytes = cw.n }()
	bw := bufio.NewWriterSize(cw, 1<<16)
	enc := json.NewEncoder(bw)
	// The checkpoints, by the range they cover.
	var cks []*ckInfo
	if _, _, err := ReadRange(ctx, js, []string{streams.CheckpointSubject}, 1, 0, func(seq uint64, _ string, stored, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil || ev.Checkpoint == nil {
			return nil // verify names it; an export carries signed checkpoints only
		}
		cks = append(cks, &ckInfo{seq: seq, from: ev.Checkpoint.From, upTo: ev.Checkpoint.UpTo, hash: HeadHash(stored, data), data: data})
		return nil
	}); err != nil {
		return st, err
	}
	covering := func(seq uint64) *ckInfo {
		i := sort.Search(len(cks), func(i int) bool { return cks[i].upTo >= seq })
		if i < len(cks) && cks[i].from < seq {
			return cks[i]
		}
		return nil
	}
	var filters []string
	if scope.Namespace != "" {
		filters = []string{streams.EventsPrefix + "." + streams.Token(scope.Namespace) + ".>"}
	}
	from := uint64(1)
	if !scope.Since.IsZero() {
		seq, err := firstSeqAt(ctx, js, scope.Since)
		if err != nil {
			return st, err
		}
		from = seq
	}
	if from == 1 {
		s, err := js.Stream(ctx, streams.EventsStream)
		if err != nil {
			return st, fmt.Errorf("events stream: %w", err)
		}
		from = max(from, s.CachedInfo().State.FirstSeq)
	}
	// The header: Seq is the first sequence of the range, 1 when it starts
	// at the log's beginning (then every chain must start in it).
	if err := enc.Encode(Line{Kind: "header", V: 1, Since: scope.Since, Until: scope.Until, Namespace: scope.Namespace, Seq: from}); err != nil {
		return st, err
	}
	errStop := errors.New("stop")
	_, _, err = ReadRange(ctx, js, filters, from, 0, func(seq uint64, subject string, stored, data []byte) error {
		ev, err := streams.DecodeEvent(data)
		if err != nil {
			return fmt.Errorf("event %d: %w", seq, err)
		}
		if !scope.Until.IsZero() && ev.Time.After(scope.Until) {
			return errStop
		}
		if subject == streams.CheckpointSubject || !scope.Since.IsZero() && ev.Time.Before(scope.Since) {
			return nil
		}
		if stored == nil {
			stored = ev.Hash // written outside the chain: verify names it
		}
		if err := enc.Encode(Line{Kind: "event", Seq: seq, Subject: subject, Hash: stored, Data: data, Type: ev.Type, Job: ev.JobID, Time: ev.Time}); err != nil {
			return err
		}
		st.Events++
		if ck := covering(seq); ck != nil {
			if ck.need == nil {
				ck.need = map[string]Head{}
			}
			ck.need[subject] = Head{Subject: subject, Seq: seq, Hash: stored}
		} else {
			st.Uncovered++
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return st, err
	}
	// Every checkpoint from the first to the last that covers an exported
	// event (their chain), and the proofs of the heads exported.
	first, last := -1, -1
	for i, ck := range cks {
		if ck.need != nil {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if from == 1 && last >= 0 {
		// From the log's first event every chain starts in the export, the
		// checkpoints' too: a namespace's first checkpoint may come later.
		first = 0
	}
	for i := first; i >= 0 && i <= last; i++ {
		ck := cks[i]
		if err := enc.Encode(Line{Kind: "checkpoint", Seq: ck.seq, Subject: streams.CheckpointSubject, Hash: ck.hash, Data: ck.data}); err != nil {
			return st, err
		}
		st.Checkpoints++
		if ck.need == nil {
			continue
		}
		heads, err := headsOf(ctx, js, ck.from, ck.upTo)
		if err != nil {
			return st, err
		}
		for k, h := range heads {
			need, ok := ck.need[h.Subject]
			if !ok || need.Seq != h.Seq {
				continue
			}
			if err := enc.Encode(Line{Kind: "proof", Checkpoint: ck.seq, Subject: h.Subject, Seq: h.Seq, Hash: h.Hash, Path: Proof(heads, k)}); err != nil {
				return st, err
			}
			st.Proofs++
		}
	}
	return st, bw.Flush()
}

// headsOf are the chain heads of the subjects changed in (from, upTo],
// sorted, as a checkpoint of that range commits to them.
func headsOf(ctx context.Context, js jetstream.JetStream, from, upTo uint64) ([]Head, error) {
	m := map[string]Head{}
	if _, _, err := ReadRange(ctx, js, nil, from+1, upTo, func(seq uint64, subject string, stored, data []byte) error {
		if subject != streams.CheckpointSubject {
			m[subject] = Head{Subject: subject, Seq: seq, Hash: HeadHash(stored, data)}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	out := make([]Head, 0, len(m))
	for _, h := range m {
		out = append(out, h)
	}
	SortHeads(out)
	return out, nil
}

// firstSeqAt is the sequence of the first event stored at or after t.
func firstSeqAt(ctx context.Context, js jetstream.JetStream, t time.Time) (uint64, error) {
	cons, err := js.OrderedConsumer(ctx, streams.EventsStream, jetstream.OrderedConsumerConfig{
		DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &t})
	if err != nil {
		return 0, fmt.Errorf("read event log: %w", err)
	}
	if info := cons.CachedInfo(); info == nil || info.NumPending == 0 {
		return nothingAfter, nil
	}
	m, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
	if err != nil {
		return 0, fmt.Errorf("read event log: %w", err)
	}
	meta, err := m.Metadata()
	if err != nil {
		return 0, err
	}
	return meta.Sequence.Stream, nil
}

// maxLine bounds a line of an export read back (an event is at most the
// log's largest message, base64).
const maxLine = 16 << 20

// maxExportEvents bounds the events of an export verified at once (its
// heads are held until the checkpoints at its end are read: ~100 bytes
// an event).
const maxExportEvents = 10_000_000

// VerifyExport checks an export offline with the trusted key pub: every
// event's hash, the chain of each subject within the export, the
// checkpoints' signatures and chain, every proof against its
// checkpoint's root, and that each subject's last exported event in a
// checkpoint's range is proved in it.
func VerifyExport(r io.Reader, pub string) (*Report, error) {
	if pub == "" {
		return nil, errors.New("an export is verified against a trusted key: --pubkey")
	}
	v := NewVerifier(pub, false)
	v.exported = true
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<16), maxLine)
	type ck struct {
		c   *domain.Checkpoint
		seq uint64
	}
	var cks []*ck // by their ranges, ascending
	bySeq := map[uint64]*ck{}
	covering := func(seq uint64) *ck {
		i := sort.Search(len(cks), func(i int) bool { return cks[i].c.UpTo >= seq })
		if i < len(cks) && cks[i].c.From < seq {
			return cks[i]
		}
		return nil
	}
	proved := map[[2]any]bool{} // (checkpoint seq, subject) -> proved
	var events []Head
	n := 0
	for sc.Scan() {
		n++
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		switch l.Kind {
		case "header":
			if l.V != 1 {
				return nil, fmt.Errorf("line %d: export version %d, this build reads 1", n, l.V)
			}
			v.exported = l.Seq != 1 // from the log's first event, every chain starts in it
		case "event":
			if len(events) >= maxExportEvents {
				return nil, fmt.Errorf("line %d: more than %d events: verify the log in parts (--since, --until)", n, maxExportEvents)
			}
			v.Add(l.Seq, l.Subject, l.Hash, l.Data)
			if len(l.Hash) == streams.HashSize {
				events = append(events, Head{Subject: l.Subject, Seq: l.Seq, Hash: l.Hash})
			}
		case "checkpoint":
			before := len(v.rep.Findings)
			v.Add(l.Seq, streams.CheckpointSubject, l.Hash, l.Data)
			if len(v.rep.Findings) == before && v.lastCk != nil && v.lastCkAt == l.Seq &&
				(len(cks) == 0 || v.lastCk.UpTo > cks[len(cks)-1].c.UpTo) {
				cks = append(cks, &ck{c: v.lastCk, seq: l.Seq})
				bySeq[l.Seq] = cks[len(cks)-1]
			}
		case "proof":
			c := bySeq[l.Checkpoint]
			h := Head{Subject: l.Subject, Seq: l.Seq, Hash: l.Hash}
			switch {
			case c == nil:
				v.find(Finding{Kind: Checkpoint, Subject: l.Subject, Seq: l.Seq, What: fmt.Sprintf("proof in checkpoint %d, which is not in the export or not valid", l.Checkpoint)})
			case !bytes.Equal(ProofRoot(h, l.Path), c.c.Root):
				v.find(Finding{Kind: Checkpoint, Subject: l.Subject, Seq: l.Seq, What: fmt.Sprintf("its proof does not lead to the root signed by checkpoint %d", l.Checkpoint)})
			default:
				proved[[2]any{l.Checkpoint, l.Subject + "\x00" + fmt.Sprint(l.Seq) + "\x00" + string(l.Hash)}] = true
			}
		default:
			return nil, fmt.Errorf("line %d: unknown kind %q", n, l.Kind)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	// Coverage: each subject's last event in each checkpoint's range must
	// be proved in it, with the hash it was exported with.
	last := map[[2]any]Head{}
	covered := 0
	for _, e := range events {
		if c := covering(e.Seq); c != nil {
			last[[2]any{c.seq, e.Subject}] = e
			covered++
		}
	}
	for k, e := range last {
		if !proved[[2]any{k[0], e.Subject + "\x00" + fmt.Sprint(e.Seq) + "\x00" + string(e.Hash)}] {
			v.find(Finding{Kind: Checkpoint, Subject: e.Subject, Seq: e.Seq, What: fmt.Sprintf("not proved in checkpoint %d, whose range holds it: edited, or not the last event of its subject in that range", k[0])})
		}
	}
	rep := v.Finish()
	rep.Uncovered = len(events) - covered
	sort.Slice(rep.Findings, func(i, j int) bool { return rep.Findings[i].Seq < rep.Findings[j].Seq })
	return rep, nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
