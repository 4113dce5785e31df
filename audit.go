package jetflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow/jetflow/engine"
)

// The audit of the event log (docs/audit.md): the hash chain of every
// subject and the signed checkpoints, verified on a scope of the log.

// AuditReport is what a verification of the event log found.
type AuditReport struct {
	Events      int // the events read (the scope's and the checkpoints)
	Subjects    int
	Checkpoints int
	// Findings name each thing wrong, by event; none when the log is whole.
	Findings []AuditFinding
	// Covered is the last stream sequence a verified checkpoint covers;
	// Uncovered how many events come after it, not yet committed to by a
	// checkpoint (a whole-log verification only).
	Covered   uint64
	Uncovered int
	// Key is the key the checkpoints were checked against ("": no
	// checkpoint was read); KeyPinned says it was the one given, not the
	// one the log names (which proves nothing against whoever writes it).
	Key       string
	KeyPinned bool
	// FindingsNotShown is how many findings a token client's reply left
	// out (a reply holds 1 MiB at most; the first are shown).
	FindingsNotShown int
}

// OK reports whether nothing was found.
func (r *AuditReport) OK() bool { return len(r.Findings) == 0 && r.FindingsNotShown == 0 }

// AuditFinding is one thing wrong with the log: its kind (AuditEdited,
// ...), the event's subject, job and stream sequence, and what is wrong.
type AuditFinding struct {
	Kind    string
	Subject string
	Job     string
	Seq     uint64
	What    string
}

func (f AuditFinding) String() string {
	job := f.Job
	if job == "" {
		job = "-"
	}
	return fmt.Sprintf("%s seq %d job %s on %s: %s", f.Kind, f.Seq, job, f.Subject, f.What)
}

// Kinds of AuditFinding.
const (
	AuditEdited     = "edited"     // its bytes do not hash to the hash it was stored with
	AuditRemoved    = "removed"    // an event before it on its subject is missing
	AuditReordered  = "reordered"  // it is out of its place on its subject
	AuditInserted   = "inserted"   // it chains to an event that has a successor already
	AuditForged     = "forged"     // written without the chain, or not an event
	AuditCheckpoint = "checkpoint" // a checkpoint not signed by the key, or not matching the log
)

// AuditKey is the key that signs the event log's checkpoints, as an
// engine tells it: the key of the engine that answered (Source
// AuditKeyOfEngine), or, from an engine that signs none and from a Client
// without a token, the key the log's newest checkpoint names (Source
// AuditKeyOfCheckpoint, Checkpoint its sequence), which is what the log
// claims. Keep the key apart from the system and verify with it.
type AuditKey struct {
	PublicKey  string
	Source     string
	Checkpoint uint64
}

// Sources of an AuditKey.
const (
	AuditKeyOfEngine     = engine.AuditKeyOfEngine
	AuditKeyOfCheckpoint = engine.AuditKeyOfCheckpoint
)

// auditBackend is what a backend does for the audit.
type auditBackend interface {
	auditVerify(ctx context.Context, f engine.AuditFields) (*engine.AuditReport, int, error)
	auditKey(ctx context.Context) (*engine.AuditKey, error)
	auditExport(ctx context.Context, f engine.AuditExportFields, w io.Writer) (engine.AuditExportReply, error)
}

// AuditExportScope is what an export holds: the events the log stored
// from Since to Until (zero: no bound), of one namespace's jobs ("": every
// subject of the log).
type AuditExportScope struct {
	Since, Until time.Time
	Namespace    string
}

// AuditExportStats is what an export wrote: the events, the checkpoints
// covering them, the inclusion proofs, the events after the last
// checkpoint (not covered yet), and the bytes.
type AuditExportStats struct {
	Events, Checkpoints, Proofs, Uncovered int
	Bytes                                  int64
}

// AuditExport writes a verifiable copy of a range of the event log to w,
// as JSON Lines (docs/audit.md#export; jetflow export): the events with
// their chain hashes, the signed checkpoints covering them and, for a
// namespace's export, the inclusion proofs (nothing of another
// namespace). Check it offline with jetflow audit verify --file and the
// public key. A token client's token of one namespace exports that
// namespace's part only (another is ErrDenied); the whole log needs an
// admin token of every namespace. An error after some bytes were written
// leaves w with an export cut short, which verifies as incomplete.
func (c *Client) AuditExport(ctx context.Context, s AuditExportScope, w io.Writer) (*AuditExportStats, error) {
	f := engine.AuditExportFields{Namespace: s.Namespace}
	if !s.Since.IsZero() {
		f.Since = s.Since.UTC().Format(time.RFC3339Nano)
	}
	if !s.Until.IsZero() {
		f.Until = s.Until.UTC().Format(time.RFC3339Nano)
	}
	r, err := c.b.auditExport(ctx, f, w)
	if err != nil {
		return nil, publicErr(err)
	}
	return &AuditExportStats{Events: r.Events, Checkpoints: r.Checkpoints, Proofs: r.Proofs, Uncovered: r.Uncovered, Bytes: r.Bytes}, nil
}

// AuditVerify verifies the hash chain and the checkpoints of the events
// of a scope of the log (the zero ReplayScope: the whole log), stored from
// s.Since to s.Until, against pubkey (the checkpoint keys to trust,
// comma-separated; "": the key each checkpoint names, which proves only
// that the log agrees with itself). A token client's token of one
// namespace verifies that namespace's part only (another is ErrDenied, a
// job of another ErrNotFound); one of every namespace must be an admin's.
func (c *Client) AuditVerify(ctx context.Context, s ReplayScope, pubkey string) (*AuditReport, error) {
	sc := s.command()
	rep, notShown, err := c.b.auditVerify(ctx, engine.AuditFields{Job: sc.Job, Namespace: sc.Namespace, Queue: sc.Queue,
		Type: sc.Type, Since: sc.Since, Until: sc.Until, Pubkey: pubkey})
	if err != nil {
		return nil, publicErr(err)
	}
	out := &AuditReport{Events: rep.Events, Subjects: rep.Subjects, Checkpoints: rep.Checkpoints, Findings: []AuditFinding{},
		Covered: rep.Covered, Uncovered: rep.Uncovered, Key: rep.Key, KeyPinned: rep.KeyPinned, FindingsNotShown: notShown}
	for _, f := range rep.Findings {
		out.Findings = append(out.Findings, AuditFinding{Kind: f.Kind, Subject: f.Subject, Job: f.Job, Seq: f.Seq, What: f.What})
	}
	return out, nil
}

// AuditPublicKey is the key that signs the event log's checkpoints (see
// AuditKey); ErrNotFound when no engine signs them and the log has no
// checkpoint.
func (c *Client) AuditPublicKey(ctx context.Context) (*AuditKey, error) {
	k, err := c.b.auditKey(ctx)
	if err != nil {
		return nil, publicErr(err)
	}
	return &AuditKey{PublicKey: k.PublicKey, Source: k.Source, Checkpoint: k.Checkpoint}, nil
}

func (d direct) auditVerify(ctx context.Context, f engine.AuditFields) (*engine.AuditReport, int, error) {
	req, err := f.Request()
	if err != nil {
		return nil, 0, err
	}
	rep, err := req.Verify(ctx, d.store.JS)
	return rep, 0, err
}

func (d direct) auditKey(ctx context.Context) (*engine.AuditKey, error) {
	return engine.AuditKeyOf(ctx, d.store.JS, "")
}

func (c command) auditVerify(ctx context.Context, f engine.AuditFields) (*engine.AuditReport, int, error) {
	var out struct {
		Report           *engine.AuditReport `json:"report"`
		FindingsNotShown int                 `json:"findings_not_shown"`
	}
	if err := c.call(ctx, "audit_verify", f, &out, rebuildWait); err != nil {
		return nil, 0, err
	}
	if out.Report == nil {
		return nil, 0, errors.New("audit_verify: the reply has no report")
	}
	return out.Report, out.FindingsNotShown, nil
}

func (d direct) auditExport(ctx context.Context, f engine.AuditExportFields, w io.Writer) (engine.AuditExportReply, error) {
	sc, err := f.Scope()
	if err != nil {
		return engine.AuditExportReply{}, err
	}
	st, err := engine.AuditExport(ctx, d.store.JS, sc, w)
	return engine.AuditExportReply{Events: st.Events, Checkpoints: st.Checkpoints, Proofs: st.Proofs, Uncovered: st.Uncovered, Bytes: st.Bytes}, err
}

// auditExport receives the chunks audit_export streams to its own inbox,
// acknowledging each once written to w, then the command's reply.
func (c command) auditExport(ctx context.Context, f engine.AuditExportFields, w io.Writer) (engine.AuditExportReply, error) {
	var out engine.AuditExportReply
	b, err := json.Marshal(f)
	if err != nil {
		return out, err
	}
	inbox := c.nc.NewInbox()
	sub, err := c.nc.SubscribeSync(inbox)
	if err != nil {
		return out, err
	}
	defer sub.Unsubscribe()
	m := c.msg(ctx, "audit_export", b)
	m.Reply = inbox
	if err := c.nc.PublishMsg(m); err != nil {
		return out, fmt.Errorf("audit_export: %w", err)
	}
	next := 1
	for {
		// Each chunk comes within the engine's wait for the one before's
		// acknowledgement; the reply within its read of the log's end.
		wait, cancel := context.WithTimeout(ctx, rebuildWait)
		msg, err := sub.NextMsgWithContext(wait)
		cancel()
		if err != nil {
			return out, fmt.Errorf("audit_export: %w", err)
		}
		if msg.Header.Get("Status") == "503" {
			return out, fmt.Errorf("audit_export: no jetflow engine answers commands on this NATS system: %w", nats.ErrNoResponders)
		}
		chunk := msg.Header.Get(engine.ExportChunkHeader)
		if chunk == "" {
			return out, decodeReply("audit_export", msg.Data, &out)
		}
		if n, err := strconv.Atoi(chunk); err != nil || n != next {
			stopExport(msg, "chunk out of order")
			return out, fmt.Errorf("audit_export: chunk %q where %d was due", chunk, next)
		}
		if _, err := w.Write(msg.Data); err != nil {
			stopExport(msg, err.Error())
			return out, fmt.Errorf("audit_export: %w", err)
		}
		if err := msg.Respond(nil); err != nil {
			return out, fmt.Errorf("audit_export: acknowledge chunk %d: %w", next, err)
		}
		next++
	}
}

// stopExport answers a chunk with the header that stops the export (the
// engine gives back its slot at once, not after its wait for an answer).
func stopExport(msg *nats.Msg, why string) {
	m := nats.NewMsg(msg.Reply)
	m.Header.Set(engine.ExportStopHeader, why)
	_ = msg.RespondMsg(m)
}

func (c command) auditKey(ctx context.Context) (*engine.AuditKey, error) {
	var out engine.AuditKey
	if err := c.call(ctx, "audit_pubkey", struct{}{}, &out, commandWait); err != nil {
		return nil, err
	}
	return &out, nil
}
